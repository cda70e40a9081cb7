import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import * as z from 'zod/mini';
import { ANSWERS, answerShapesModule } from '../../scripts/answer-shapes.js';
import * as shapes from '../../shared/contracts/answer-shapes.js';
import { checkShape, primeShape, type Shape } from '../../shared/contracts/shape.js';
import { shapeOf } from '../../shared/contracts/shape-of.js';
import * as sessions from '../../shared/contracts/sessions.js';
import { ROOT } from '../helpers.js';

type Answer = 'AcquireResponse' | 'HeartbeatResponse' | 'HeartbeatBatchResponse' | 'ReleaseResponse';
const schemaOf = (name: Answer): z.ZodMiniType => sessions[name];
const shapeOfAnswer = (name: Answer): Shape<unknown> => shapes[`${name}Shape`];

const session = {
  id: 'ses_ABCdef123456',
  engine: 'podman',
  label: 'llxprt',
  clientPid: 4242,
  createdAt: '2026-08-20T10:11:12.345Z',
  lastHeartbeatAt: '2026-08-20T10:11:13Z',
  ssh: { status: 'forwarded', bridge: 'mount', socket: '/run/sandboxd/ssh/agent.sock', hostAgentSocket: '/tmp/agent.sock', bridgeId: 'relay_0123' },
  container: { id: null, cidfile: '/run/user/1000/sandboxd/containers/ses_ABCdef123456.cid' },
  refused: 0,
  gitCredentials: ['github.com', 'git.example.com:8443'],
  git: null,
};

/** What a session's git work left: a held ref with its command, one whose objects never arrived, a note, an error. */
const git = {
  repository: '/home/me/src/app/.git',
  held: [
    { ref: 'refs/heads/feature', keptAs: 'refs/sandboxd/ses_ABCdef123456/feature', reason: 'your feature moved on meanwhile', command: 'git merge refs/sandboxd/ses_ABCdef123456/feature' },
    { ref: 'refs/heads/lost', keptAs: null, reason: 'its commit did not reach the host', command: null },
  ],
  notes: ['you staged changes in /home/me/src/app: its HEAD and index are left as they are'],
  error: 'the sandbox git dir exceeded a bound',
};

/** Answers as a daemon gives them: every field, every branch of every union, both sides of every nullable. */
const VALID: Record<Answer, unknown[]> = {
  AcquireResponse: [
    {
      session,
      plan: {
        mounts: [
          { source: '/run/user/1000/sandboxd/agents/0123', target: '/run/sandboxd/ssh', readOnly: true, purpose: 'ssh agent', relabel: 'z' },
          { source: '/home/me/.gitconfig', target: '/home/node/.gitconfig', readOnly: true, purpose: 'git config' },
        ],
        env: { SSH_AUTH_SOCK: '/run/sandboxd/ssh/agent.sock' },
        spawnEnv: {},
        globalArgs: ['--connection', 'vm'],
        flags: ['--label', 'sandboxd.session=ses_ABCdef123456'],
        args: ['--volume', '/a:/b:ro'],
        warnings: ['socket gpg is not forwarded: it does not exist'],
        notices: ['git: safe.directory is set'],
      },
      leaseTtlMs: 30000,
      heartbeatIntervalMs: 10000,
      sockets: [
        { name: 'credential-proxy', status: 'forwarded', bridge: 'tunnel', socket: '/run/sandboxd/sockets/credential-proxy/agent.sock', hostSocket: '/tmp/proxy.sock', bridgeId: 'tunnel_1', env: null },
        { name: 'gpg', status: 'skipped', reason: 'socket gpg /x does not exist' },
        { name: 'named', status: 'forwarded', bridge: 'mount', socket: '/run/x.sock', hostSocket: '/tmp/x.sock', bridgeId: 'relay_2', env: 'GPG_AGENT' },
      ],
      gitCredentials: { status: 'served', hosts: ['github.com'], bridge: 'tunnel', socket: '/run/sandboxd/git-credential/agent.sock' },
    },
    {
      session: { ...session, label: null, container: null, ssh: { status: 'skipped', reason: 'no agent' } },
      plan: { mounts: [], env: {}, spawnEnv: { DOCKER_HOST: 'unix:///x' }, globalArgs: [], flags: [], args: [], warnings: [], notices: [] },
      leaseTtlMs: 1,
      heartbeatIntervalMs: 1,
      sockets: [],
      gitCredentials: null,
    },
    {
      session: { ...session, gitCredentials: [] },
      plan: { mounts: [], env: {}, spawnEnv: {}, globalArgs: [], flags: [], args: [], warnings: [], notices: [] },
      leaseTtlMs: 1,
      heartbeatIntervalMs: 1,
      sockets: [],
      gitCredentials: { status: 'skipped', hosts: ['github.com'], reason: 'a Docker engine' },
    },
  ],
  HeartbeatResponse: [{ session }, { session: { ...session, engine: 'docker', ssh: { ...session.ssh, bridge: 'desktop' }, git } }],
  HeartbeatBatchResponse: [{ unknown: [] }, { unknown: ['ses_ABCdef123456', 'ses_zzzzzz'] }],
  ReleaseResponse: [{ released: true, git: null }, { released: false, git }, { released: true, git: { ...git, held: [], notes: [], error: null } }],
};

/** Values that break one kind of field or another: types, strings of every check, numbers of every bound. */
const REPLACEMENTS: unknown[] = [undefined, null, true, 0, -1, 1.5, 2 ** 60, '', 'x', 'relative/path', '/with\0nul', '/ok', 'ses_short', 'ses_ABCdef123456', '2026-02-30T00:00:00Z', '2026-08-20 10:11:12', [], {}, ['x'], { extra: 1 }, 'a'.repeat(4097), `/${'a'.repeat(4096)}`];

/** Every value found at every path of `value`, with a way to put something else there. */
function* places(value: unknown, set: (next: unknown) => unknown): Generator<{ at: unknown; set: (next: unknown) => unknown }> {
  yield { at: value, set };
  if (Array.isArray(value)) {
    const items = value as unknown[];
    for (const [index, item] of items.entries()) yield* places(item, (next) => set(items.map((old, i) => (i === index ? next : old))));
  } else if (typeof value === 'object' && value !== null) {
    const record = value as Record<string, unknown>;
    for (const key of Object.keys(record)) {
      // Replaced by undefined: the key is gone, as JSON would have it.
      yield* places(record[key], (next) => set(Object.fromEntries(Object.entries(record).flatMap(([name, old]) => (name !== key ? [[name, old]] : next === undefined ? [] : [[name, next]])))));
    }
  }
}

function mutants(valid: unknown): unknown[] {
  const out: unknown[] = [];
  for (const place of places(valid, (next) => next)) {
    for (const replacement of REPLACEMENTS) out.push(place.set(replacement));
    if (typeof place.at === 'object' && place.at !== null && !Array.isArray(place.at)) out.push(place.set({ ...place.at, unknownKey: 'x' }));
  }
  return out;
}

describe('answer shapes (shared/contracts/answer-shapes.ts)', () => {
  it('are what the schemas are now: `npm run shapes` writes them', () => {
    const roots = Object.fromEntries(ANSWERS.map((name) => [name, shapeOf(schemaOf(name as Answer), name)]));
    const written = readFileSync(path.join(ROOT, 'shared/contracts/answer-shapes.ts'), 'utf8');
    expect(written, 'shared/contracts/answer-shapes.ts is stale: run `npm run shapes`').toBe(answerShapesModule(roots));
  });

  it.each(ANSWERS as Answer[])('%s: the shape and the schema give every answer the same verdict', (name) => {
    const schema = schemaOf(name);
    const shape = shapeOfAnswer(name);
    let accepted = 0;
    let refused = 0;
    for (const valid of VALID[name]) {
      expect(schema.safeParse(valid).success).toBe(true);
      for (const candidate of [valid, ...mutants(valid)]) {
        const verdict = checkShape(shape, candidate).success;
        expect({ candidate, verdict }).toEqual({ candidate, verdict: schema.safeParse(candidate).success });
        if (verdict) accepted += 1;
        else refused += 1;
      }
    }
    // Both kinds were met, so the comparison could have failed either way.
    expect(accepted).toBeGreaterThan(VALID[name].length);
    expect(refused).toBeGreaterThan(10);
  });

  it('the first issue names where an answer breaks its shape, as zod would', () => {
    const [valid] = VALID.AcquireResponse;
    const broken = { ...(valid as Record<string, unknown>), session: { ...session, clientPid: 'x' } };
    expect(checkShape(shapes.AcquireResponseShape, broken)).toEqual({ success: false, error: { issues: [{ code: 'invalid_type', path: ['session', 'clientPid'] }] } });
    expect(checkShape(shapes.ReleaseResponseShape, { released: true, git: null, more: 1, most: 2 })).toEqual({ success: false, error: { issues: [{ code: 'unrecognized_keys', path: [], keys: ['more', 'most'] }] } });
    const zodIssue = sessions.AcquireResponse.safeParse(broken).error?.issues[0];
    expect(zodIssue).toMatchObject({ code: 'invalid_type', path: ['session', 'clientPid'] });
  });

  it('an issue deep in arrays, records and objects is placed where zod places it, each path its own', () => {
    const [valid] = VALID.AcquireResponse as [{ plan: Record<string, unknown>; sockets: unknown[] }];
    const breaks: [string, unknown][] = [
      ['a mount\'s target', { ...valid, plan: { ...valid.plan, mounts: [(valid.plan.mounts as unknown[])[0], { ...(valid.plan.mounts as object[])[1], target: 'relative' }] } }],
      ['an env value', { ...valid, plan: { ...valid.plan, env: { SSH_AUTH_SOCK: 1 } } }],
      ['an arg', { ...valid, plan: { ...valid.plan, args: ['--volume', 2] } }],
      ['a key the mount does not have', { ...valid, plan: { ...valid.plan, mounts: [{ ...(valid.plan.mounts as object[])[0], extra: true }] } }],
    ];
    const paths = breaks.map(([what, broken]) => {
      const result = checkShape(shapes.AcquireResponseShape, broken);
      const zodIssue = sessions.AcquireResponse.safeParse(broken).error?.issues[0];
      expect(result.success, what).toBe(false);
      const issue = result.success ? undefined : result.error.issues[0];
      expect({ what, code: issue?.code, path: issue?.path }).toEqual({ what, code: zodIssue?.code, path: zodIssue?.path });
      return issue?.path;
    });
    expect(paths.map((found) => found?.join('.'))).toEqual(['plan.mounts.1.target', 'plan.env.SSH_AUTH_SOCK', 'plan.args.1', 'plan.mounts.0']);
    expect(new Set(paths).size).toBe(paths.length);
    // zod names the discriminator of a union no variant fits; a shape, which has none, the union.
    const unfit = checkShape(shapes.AcquireResponseShape, { ...valid, sockets: [valid.sockets[0], { name: 'gpg', status: 'lost' }] });
    expect(unfit).toEqual({ success: false, error: { issues: [{ code: 'invalid_union', path: ['sockets', 1] }] } });
  });

  it('priming a shape runs every pattern it holds twice (V8 compiles a pattern on its second run), however deep, once per process, and changes no verdict', () => {
    const tested: string[] = [];
    const spied = (name: string): RegExp => Object.assign(/^a$/, { test: (value: string) => (tested.push(`${name}:${value}`), value === 'a') });
    const deep: Shape<unknown> = {
      root: {
        kind: 'object',
        fields: {
          list: { kind: 'array', of: { kind: 'nullable', of: { kind: 'string', patterns: [spied('listed')] } } },
          map: { kind: 'record', key: { kind: 'string' }, value: { kind: 'union', of: [{ kind: 'number', integer: true }, { kind: 'string', patterns: [spied('mapped')] }] } },
        },
      },
    };
    primeShape(deep);
    expect(tested.sort()).toEqual(['listed:x', 'listed:x', 'mapped:x', 'mapped:x']);
    primeShape(deep);
    expect(tested).toHaveLength(4);
    for (const name of ANSWERS as Answer[]) {
      const shape = shapeOfAnswer(name);
      const before = VALID[name].flatMap((valid) => [valid, ...mutants(valid)].map((candidate) => checkShape(shape, candidate)));
      primeShape(shape);
      expect(VALID[name].flatMap((valid) => [valid, ...mutants(valid)].map((candidate) => checkShape(shape, candidate)))).toEqual(before);
    }
  });

  it('refuses, by name, a schema it cannot write down', () => {
    expect(() => shapeOf(z.strictObject({ a: z._default(z.string(), 'x') }), 'Example')).toThrow('Example.a: a default, which an answer\'s shape cannot write down');
    expect(() => shapeOf(z.object({ a: z.string() }), 'Loose')).toThrow('Loose: an object that is not strict');
    expect(() => shapeOf(z.string().check(z.refine((value) => value !== 'x')), 'Own')).toThrow('Own: a refine with a function not in shared/contracts/refinements.ts');
  });
});
