/**
 * The floor under `sandboxd run`, run by `npm run bench` as its own process: what any
 * Node client must do to run a container with a plan, and nothing more. One connection, one
 * acquire, the engine spawned with the plan's arguments, one release; no option parsing, no
 * response validation, no trust check. The acquire asks for what `sandboxd run --quiet -- …
 * IMAGE …` asks for (the workdir, the label, the image), so the daemon does the same work for
 * both: `sandboxd run` minus this is what sandboxd's own code costs a launch; this minus
 * `node -e 0` is what the two requests and the spawn cost Node.
 *
 *   node run-floor.js <socket> <protocol header> <protocol version> <ssh bridge> <client env names,…> <engine> <image> <run args…>
 *
 * The names are shared's CLIENT_ENV_NAMES, given by the bench: the floor loads no module of
 * sandboxd's. The image is what the acquire names; the run args are `run`'s own, the image among them.
 *
 * Loads node's builtins without their ESM facades, as the `sandboxd` command does.
 */
const net = process.getBuiltinModule('node:net');
const { spawn } = process.getBuiltinModule('node:child_process');

const [socketPath = '', header = '', protocol = '', sshBridge = '', envNames = '', engine = '', image = '', ...runArgs] = process.argv.slice(2);
const socket = net.connect(socketPath);

/** One request on the kept connection; the daemon answers with a Content-Length body. */
function ask(method: string, route: string, body?: string): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let received = '';
    const onData = (chunk: Buffer): void => {
      received += chunk.toString('latin1');
      const end = received.indexOf('\r\n\r\n');
      if (end === -1) return;
      const length = Number(/content-length: *(\d+)/i.exec(received.slice(0, end))?.[1]);
      if (received.length - end - 4 < length) return;
      socket.off('data', onData);
      resolve(JSON.parse(Buffer.from(received.slice(end + 4, end + 4 + length), 'latin1').toString('utf8')));
    };
    socket.on('data', onData).once('error', reject);
    const head = body === undefined ? '' : `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
    socket.write(`${method} ${route} HTTP/1.1\r\nhost: localhost\r\n${header}: ${protocol}\r\n${head}\r\n${body ?? ''}`);
  });
}

interface Acquired {
  session: { id: string };
  plan: { globalArgs: string[]; args: string[] };
}

const env: Record<string, string> = {};
for (const name of envNames.split(',')) {
  const value = process.env[name];
  if (value !== undefined && value !== '') env[name] = value;
}
const acquired = (await ask(
  'POST',
  '/v1/sessions',
  JSON.stringify({
    engine,
    client: { pid: process.pid, cwd: process.cwd(), sshAuthSock: process.env.SSH_AUTH_SOCK, path: process.env.PATH, env },
    sshAgent: 'auto',
    sshBridge,
    workdir: true,
    label: 'sandboxd-cli',
    image,
    mounts: [],
    cloudCredentials: false,
    passEnv: {},
    gitHooks: 'readonly',
    gitConfig: 'readonly',
  }),
)) as Acquired;
const code = await new Promise<number>((resolve) => {
  spawn(engine, [...acquired.plan.globalArgs, 'run', ...acquired.plan.args, ...runArgs], { stdio: 'inherit' }).once('exit', (exitCode) => {
    resolve(exitCode ?? 1);
  });
});
await ask('DELETE', `/v1/sessions/${acquired.session.id}`);
socket.destroy();
process.exitCode = code;
