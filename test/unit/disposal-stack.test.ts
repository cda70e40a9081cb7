import { describe, expect, it } from 'vitest';
import { DisposalStack, settleAll } from '../../daemon/sessions/disposal-stack.js';

describe('DisposalStack', () => {
  it('gives back in reverse, runs every step when one fails, and fails with the first failure', async () => {
    const stack = new DisposalStack();
    const given: string[] = [];
    stack.defer(() => given.push('first'));
    stack.defer(() => {
      throw new Error('second cannot be given back');
    });
    stack.defer(() => Promise.resolve().then(() => given.push('third')));
    await expect(stack.unwind()).rejects.toThrow('second cannot be given back');
    expect(given).toEqual(['third', 'first']);
    // Unwound once: a second unwind has nothing left.
    await stack.unwind();
    expect(given).toEqual(['third', 'first']);
  });

  it('waits for a resource still being taken and gives it back only if it was taken', async () => {
    const stack = new DisposalStack();
    const given: string[] = [];
    const refused = Promise.reject(new Error('not taken'));
    expect(stack.adopt(refused, () => given.push('refused'))).toBe(refused);
    let arrive: (value: string) => void = () => undefined;
    void stack.adopt(new Promise<string>((resolve) => (arrive = resolve)), (value) => given.push(value));
    const unwound = stack.unwind();
    arrive('late lease');
    await unwound;
    expect(given).toEqual(['late lease']);
    await expect(refused).rejects.toThrow('not taken');
  });
});

describe('settleAll', () => {
  it('answers every value in order', async () => {
    expect(await settleAll([Promise.resolve(1), 'two', Promise.resolve(null)] as const)).toEqual([1, 'two', null]);
  });

  it('waits for every branch, then fails with the first in order that failed', async () => {
    let finished = false;
    const slow = new Promise<void>((resolve) => setTimeout(resolve, 10)).then(() => {
      finished = true;
    });
    const outcome = settleAll([slow, Promise.reject(new Error('first')), Promise.reject(new Error('second'))]);
    await expect(outcome).rejects.toThrow('first');
    expect(finished).toBe(true);
  });
});
