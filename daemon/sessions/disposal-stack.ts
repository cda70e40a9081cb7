/*
 * Taking several resources at once and giving them back if the whole fails (Node 20 has no
 * AsyncDisposableStack). Every started branch is awaited before a failure goes on, so none is left
 * running unobserved, and none fails as an unhandled rejection while another is awaited.
 */

type Settled<T extends readonly unknown[]> = { -readonly [K in keyof T]: Awaited<T[K]> };

/** Awaits every branch, then fails with the first of them (in order) that failed. */
export async function settleAll<const T extends readonly unknown[]>(branches: T): Promise<Settled<T>> {
  const results = await Promise.allSettled(branches);
  const values: unknown[] = [];
  for (const result of results) {
    if (result.status === 'rejected') throw result.reason;
    values.push(result.value);
  }
  return values as Settled<T>;
}

/** Undo steps pushed as resources are taken, run in reverse by `unwind`. */
export class DisposalStack {
  private readonly steps: (() => unknown)[] = [];

  /** Gives back, on unwind, a resource already held. */
  defer(step: () => unknown): void {
    this.steps.push(step);
  }

  /**
   * A resource still being taken: on unwind it is awaited and given back if it was taken (one that
   * failed holds nothing). Its failure reaches whoever awaits the returned promise, never as an
   * unhandled rejection in the meantime.
   */
  adopt<T>(pending: Promise<T>, release: (value: T) => unknown): Promise<T> {
    const taken = pending.then(
      (value) => ({ value }),
      () => null,
    );
    this.steps.push(async () => {
      const held = await taken;
      if (held !== null) await release(held.value);
    });
    return pending;
  }

  /** Runs every step, last pushed first; a step that fails stops none of the rest, and its error goes on. */
  async unwind(): Promise<void> {
    const failures: unknown[] = [];
    for (const step of this.steps.splice(0).reverse()) {
      try {
        await step();
      } catch (error) {
        failures.push(error);
      }
    }
    if (failures.length > 0) throw failures[0];
  }
}
