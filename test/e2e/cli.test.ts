import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { cliArgs, listening, runCli, spawnNode, type Cli } from '../helpers/cli.ts';
import { getJson, postJson } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { noTurnId } from '../helpers/turns.ts';

const root = process.cwd();
const fromSource = import.meta.url.endsWith('.ts');
const exampleModule = fromSource ? path.join(root, 'examples/serve-agents.ts') : path.join(root, '.build/examples/serve-agents.js');


test('the demo serves echo and counter agents, prints curl lines, exits 0 on SIGTERM, and keeps state across restarts', async (t) => {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dataDir, { recursive: true, force: true }));
  const cli = runCli(t, ['serve', '--port', '0', '--data-dir', dataDir]);
  const url = await listening(cli);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);

  assert.deepEqual(noTurnId((await postJson(`${url}/agent/echo-1/chat`, { message: 'Hello, agent' })).body), { agent_id: 'echo-1', response: 'Hello, agent' });
  const stream = await fetch(`${url}/agent/echo-1/chat?stream=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message: 'Stream these words' }),
  });
  assert.equal((await collectSSE(stream)).text, 'Stream these words');
  assert.deepEqual(noTurnId((await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment', params: { by: 2 } })).body), { agent_id: 'counter-1', result: 2 });
  assert.deepEqual((await getJson(`${url}/agent/counter-1/state`)).body, { agent_id: 'counter-1', state: { count: 2 } });
  assert.equal((await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment', params: { by: 'x' } })).status, 400);
  assert.deepEqual((await getJson(`${url}/healthz`)).body, { status: 'ok' });

  const printed = cli.stdout();
  assert.ok(printed.includes(`curl '${url}/agent/echo-1/chat' -H 'content-type: application/json' -d '{"message": "Hello, agent"}'`), printed);
  assert.ok(printed.includes(`curl -N '${url}/agent/echo-1/chat?stream=true' -H 'content-type: application/json'`), printed);

  assert.match(printed, /Storage: files in .* \(FileStorage; kept across restarts\)/);

  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
  assert.match(cli.stdout(), /SIGTERM received/);
  assert.equal(cli.stderr(), '');

  const again = runCli(t, ['serve', '--port', '0', '--data-dir', dataDir]);
  const url2 = await listening(again);
  assert.deepEqual((await getJson(`${url2}/agent/counter-1/state`)).body.state, { count: 2 }, 'the embedded storage is durable');
  assert.equal((await getJson(`${url2}/agent/echo-1/state`)).status, 200);
  again.child.kill('SIGINT');
  assert.deepEqual(await again.exited, { code: 0, signal: null });
});

test('"~/dir" in a config file\'s data_dir, file:~/dir and --data-dir=~/dir are under the home directory, as a shell would read them', async (t) => {
  const home = await mkdtemp(path.join(os.tmpdir(), 'agent-router-home-'));
  const project = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => Promise.all([rm(home, { recursive: true, force: true }), rm(project, { recursive: true, force: true })]));
  await writeFile(path.join(project, 'data-dir.json'), JSON.stringify({ data_dir: '~/from-config', port: 0 }));
  await writeFile(path.join(project, 'storage.json'), JSON.stringify({ storage: 'file:~/from-spec', port: 0 }));
  const runs = [
    runCli(t, ['serve', '--config', 'data-dir.json'], project, { HOME: home }),
    runCli(t, ['serve', '--config', 'storage.json'], project, { HOME: home }),
    runCli(t, ['serve', '--port', '0', '--data-dir=~/from-flag'], project, { HOME: home }),
  ];
  for (const cli of runs) {
    const url = await listening(cli);
    assert.equal((await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment' })).status, 200);
    cli.child.kill('SIGTERM');
    assert.deepEqual(await cli.exited, { code: 0, signal: null });
  }
  assert.deepEqual((await readdir(home)).sort(), ['from-config', 'from-flag', 'from-spec']);
  for (const dir of ['from-config', 'from-flag', 'from-spec']) assert.ok((await readdir(path.join(home, dir))).length > 1, `${dir} holds the agent's files`);
  assert.deepEqual((await readdir(project)).sort(), ['data-dir.json', 'storage.json'], 'no directory named ~ in the project');
});

test('serves a module whose default export is a registry; a config file sets the server options', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, 'server.json'), JSON.stringify({ enable_list_agents: true, max_agents: 5, port: 0 }));
  // The module path and the config path are resolved from the working directory.
  const cli = runCli(t, ['serve', path.relative(dir, exampleModule), '--config', 'server.json'], dir);
  const url = await listening(cli);
  assert.deepEqual(noTurnId((await postJson(`${url}/agent/notes-alice/invoke`, { method: 'add', params: { text: 'buy milk' } })).body), { agent_id: 'notes-alice', result: 1 });
  assert.deepEqual((await getJson(`${url}/agent/notes-alice/state`)).body.state, { notes: ['buy milk'] });
  assert.deepEqual((await getJson(`${url}/agents`)).body.agents.map((agent: { id: string }) => agent.id), ['notes-alice']);
  cli.child.kill('SIGINT');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
});

test('--enable_list_agents, --max_agents and --idle-timeout set the server options, over the config file', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, 'server.json'), JSON.stringify({ max_agents: 5 }));
  const cli = runCli(t, ['serve', '--port', '0', '--storage', 'memory', '--config', 'server.json', '--enable_list_agents', '--max_agents', '1', '--idle-timeout', '0'], dir);
  const url = await listening(cli);
  assert.equal((await postJson(`${url}/agent/echo-1/chat`, { message: 'one' })).status, 200);
  assert.equal((await postJson(`${url}/agent/echo-2/chat`, { message: 'two' })).status, 200);
  // One live agent at most (the flag, not the file's 5): echo-1, idle, made room for echo-2.
  assert.deepEqual((await getJson(`${url}/agents`)).body.agents.map((agent: { id: string }) => agent.id), ['echo-2']);
  cli.child.kill('SIGINT');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
});

test('serves a module whose default export is a promise of a registry (CommonJS, which has no top-level await)', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(
    path.join(dir, 'later.mjs'),
    `import registry from ${JSON.stringify(pathToFileURL(exampleModule).href)};\nexport default new Promise((resolve) => setTimeout(() => resolve(registry), 10));\n`,
  );
  const cli = runCli(t, ['serve', 'later.mjs', '--port', '0'], dir);
  const url = await listening(cli);
  assert.deepEqual(noTurnId((await postJson(`${url}/agent/notes-bob/invoke`, { method: 'add', params: { text: 'call back' } })).body), { agent_id: 'notes-bob', result: 1 });
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
});

test('serves a module whose default export is an Agent, or an AgentServer with its own options', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  // The same library files the CLI runs from, so `instanceof` holds.
  const lib = (file: string): string => JSON.stringify(pathToFileURL(path.join(root, fromSource ? `src/${file}.ts` : `.build/src/${file}.js`)).href);
  const imports = `import { Agent } from ${lib('agent/agent')};\nimport { echoModel } from ${lib('models/echo')};\nimport { AgentServer } from ${lib('server/server')};\n`;
  await writeFile(path.join(dir, 'agent.mjs'), `${imports}export default new Agent('solo', { model: echoModel() });\n`);
  await writeFile(path.join(dir, 'server.mjs'), `${imports}export default new AgentServer(new Agent('solo', { model: echoModel() }), { enableListAgents: true });\n`);
  await writeFile(path.join(dir, 'config.json'), JSON.stringify({ max_agents: 3 }));

  const agent = runCli(t, ['serve', 'agent.mjs', '--port', '0'], dir);
  const agentUrl = await listening(agent);
  assert.deepEqual(noTurnId((await postJson(`${agentUrl}/agent/solo/chat`, { message: 'just me' })).body), { agent_id: 'solo', response: 'just me' });
  assert.equal((await getJson(`${agentUrl}/agents`)).status, 404);
  agent.child.kill('SIGTERM');
  assert.deepEqual(await agent.exited, { code: 0, signal: null });

  const server = runCli(t, ['serve', 'server.mjs', '--port', '0', '--config', 'config.json'], dir);
  const serverUrl = await listening(server);
  assert.deepEqual(noTurnId((await postJson(`${serverUrl}/agent/solo/chat`, { message: 'hi' })).body), { agent_id: 'solo', response: 'hi' });
  assert.deepEqual((await getJson(`${serverUrl}/agents`)).body.agents.map((live: { id: string }) => live.id), ['solo'], 'its own enableListAgents');
  assert.equal(server.stderr(), 'agent-router: note: server.mjs exports its own AgentServer; only port and host from --config apply\n');
  server.child.kill('SIGTERM');
  assert.deepEqual(await server.exited, { code: 0, signal: null });

  // The note names the flags that were given, and only those.
  const flagged = runCli(t, ['serve', 'server.mjs', '--port', '0', '--max-agents', '9'], dir);
  await listening(flagged);
  assert.equal(flagged.stderr(), 'agent-router: note: server.mjs exports its own AgentServer; --max_agents does not apply to it\n');
  flagged.child.kill('SIGTERM');
  assert.deepEqual(await flagged.exited, { code: 0, signal: null });
});

test('a module whose AgentServer serves itself is refused, saying to leave serving to the CLI', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const lib = (file: string): string => JSON.stringify(pathToFileURL(path.join(root, fromSource ? `src/${file}.ts` : `.build/src/${file}.js`)).href);
  await writeFile(
    path.join(dir, 'self.mjs'),
    `import { Agent } from ${lib('agent/agent')};\nimport { echoModel } from ${lib('models/echo')};\nimport { AgentServer } from ${lib('server/server')};\n` +
      `const server = new AgentServer(new Agent('solo', { model: echoModel() }));\nawait server.serve(0);\nexport default server;\n`,
  );
  const cli = runCli(t, ['serve', 'self.mjs', '--port', '0'], dir);
  assert.deepEqual(await cli.exited, { code: 1, signal: null });
  assert.match(cli.stderr(), /^agent-router: already serving on http:\/\/127\.0\.0\.1:\d+; a module given to agent-router serve exports its server without calling serve\(\) itself\n$/);
});

test('a missing module is one clear line on stderr and exit code 1', async (t) => {
  const cli = runCli(t, ['serve', './no-such-agents.js', '--port', '0']);
  assert.deepEqual(await cli.exited, { code: 1, signal: null });
  assert.equal(cli.stderr(), `agent-router: cannot find module ./no-such-agents.js (looked for ${path.join(root, 'no-such-agents.js')})\n`);
});

test('a module exporting something else is refused, saying what to export', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, 'wrong.mjs'), 'export default { answer: 42 };\n');
  await writeFile(path.join(dir, 'none.mjs'), 'export const registry = 1;\n');
  await writeFile(path.join(dir, 'throws.mjs'), 'throw new Error("database is down");\n');
  // A module that opened something (a client's connection, a timer) before failing: the CLI still exits.
  await writeFile(path.join(dir, 'busy.mjs'), 'setInterval(() => {}, 1000);\nexport default { answer: 42 };\n');
  // CommonJS has no top-level await: a module that connects first exports a promise.
  await writeFile(path.join(dir, 'rejects.cjs'), 'module.exports = new Promise((_, reject) => setTimeout(() => reject(new Error("database is down")), 10));\n');
  await writeFile(path.join(dir, 'rejects-now.cjs'), 'module.exports = Promise.reject(new Error("database is down"));\n');
  await writeFile(path.join(dir, 'wrong-later.cjs'), 'module.exports = Promise.resolve({ answer: 42 });\n');
  const cases: Array<[string, RegExp]> = [
    ['wrong.mjs', /^agent-router: wrong\.mjs default-exports an object \(Object\), not an AgentRegistry, an Agent or an AgentServer\n$/],
    ['none.mjs', /^agent-router: none\.mjs has no default export; end it with `export default registry`/],
    ['throws.mjs', /^agent-router: loading throws\.mjs failed: Error: database is down\n$/],
    ['busy.mjs', /^agent-router: busy\.mjs default-exports an object \(Object\), not an AgentRegistry/],
    ['rejects.cjs', /^agent-router: rejects\.cjs's default export, a promise, failed: Error: database is down\n$/],
    ['rejects-now.cjs', /^agent-router: rejects-now\.cjs's default export, a promise, failed: Error: database is down\n$/],
    ['wrong-later.cjs', /^agent-router: wrong-later\.cjs default-exports an object \(Object\), not an AgentRegistry, an Agent or an AgentServer\n$/],
  ];
  // Started together: each is a process start, and they are independent.
  const runs = cases.map(([file]) => runCli(t, ['serve', file], dir));
  for (const [i, [file, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 1, signal: null }, file);
    assert.match(cli.stderr(), expected);
    assert.doesNotMatch(cli.stderr(), /\n\s+at /, 'no stack trace');
  }
});

test('a bad flag or port is a usage error: exit code 2', async (t) => {
  const cases = [
    [['serve', '--prot', '8080'], 'agent-router: unknown option --prot\n'],
    [['serve', '--port'], 'agent-router: --port needs a value\n'],
    [['serve', '-p', '-1'], 'agent-router: -p needs a value; one that starts with "-" is written --port=<value>\n'],
    [['serve', '--port', 'eighty'], 'agent-router: --port must be a port number from 0 to 65535, got "eighty"\n'],
    [['serve', 'a.js', 'b.js'], 'agent-router: serve takes one module, got 2: a.js b.js\n'],
  ] as const;
  const runs = cases.map(([args]) => runCli(t, [...args]));
  for (const [i, [args, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 2, signal: null }, args.join(' '));
    assert.equal(cli.stderr(), `${expected}Run 'agent-router --help' for usage.\n`);
  }
});

test('a port from $PORT on the default loopback host gets a note to add --host 0.0.0.0; a host given gets none', async (t) => {
  // Heroku, Render, Cloud Run and Fly.io set PORT and route to it from outside, which 127.0.0.1 never answers.
  const fromEnv = runCli(t, ['serve', '--storage', 'memory'], root, { PORT: '0' });
  const withHost = runCli(t, ['serve', '--storage', 'memory', '--host', '127.0.0.1'], root, { PORT: '0' });
  const withPort = runCli(t, ['serve', '--storage', 'memory', '--port', '0']);
  const runs = [fromEnv, withHost, withPort];
  assert.match(await listening(fromEnv), /^http:\/\/127\.0\.0\.1:\d+$/);
  await Promise.all([listening(withHost), listening(withPort)]);
  // All of their output, read to the end: stderr and stdout are two pipes, read in no set order.
  const closed = runs.map((cli) => once(cli.child, 'close'));
  for (const cli of runs) cli.child.kill('SIGTERM');
  await Promise.all(closed);
  const notes = runs.map((cli) => cli.stderr().split('\n').filter((line) => line.includes('note:')));
  assert.deepEqual(notes, [
    ['agent-router: note: the port comes from $PORT, but the host is 127.0.0.1, reachable from this machine only; where a platform routes $PORT to the server from outside, add --host 0.0.0.0'],
    [],
    [],
  ]);
});

test('a bad config file names the file and the key', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, 'bad.json'), JSON.stringify({ idle_timout: 5 }));
  const cli = runCli(t, ['serve', '--config', 'bad.json', '--port', '0'], dir);
  assert.deepEqual(await cli.exited, { code: 1, signal: null });
  assert.match(cli.stderr(), /^agent-router: config file .*bad\.json: unknown key "idle_timout"; did you mean idle_timeout\?$/m);
});

test('a port in use is one clear line and exit code 1', async (t) => {
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
  const { port } = blocker.address() as net.AddressInfo;
  const cli = runCli(t, ['serve', '--port', String(port)]);
  assert.deepEqual(await cli.exited, { code: 1, signal: null });
  assert.equal(cli.stderr(), `agent-router: 127.0.0.1:${port} is already in use; stop the other process or choose another port (--port)\n`);
});

test('SIGTERM still shuts down gracefully, exit 0, when whoever read stdout has gone (agent-router serve | head -1)', async (t) => {
  const cli = runCli(t, ['serve', '--port', '0', '--storage', 'memory']);
  await listening(cli);
  cli.child.stdout?.destroy(); // the reader is gone: the next line written to stdout meets EPIPE
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
  assert.doesNotMatch(cli.stderr(), /EPIPE/);
});

/** `npm start -- <args>` without npm: scripts/start.mjs, on the dist/ that scripts/test.mjs built before the tests run. */
function npmStart(t: { after: (fn: () => unknown) => void }, args: string[], cwd = root): Cli {
  const env = { ...process.env };
  for (const name of ['PORT', 'npm_command', 'AGENT_ROUTER_DEBUG', 'OPENAI_API_KEY', 'OPENAI_BASE_URL', 'ANTHROPIC_API_KEY']) delete env[name];
  return spawnNode(t, [path.join(root, 'scripts/start.mjs'), ...args], cwd, env);
}

test('npm start (scripts/start.mjs) exits 1 on a refused module that opened a timer, as the bin does, instead of hanging', { timeout: 20_000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(path.join(dir, 'busy.mjs'), 'setInterval(() => {}, 1000);\nexport default { answer: 42 };\n');
  const cli = npmStart(t, [path.join(dir, 'busy.mjs'), '--port', '0']);
  assert.deepEqual(await cli.exited, { code: 1, signal: null });
  assert.match(cli.stderr(), /busy\.mjs default-exports an object \(Object\), not an AgentRegistry/);
});

test('npm start -- serve <module> serves the module, as agent-router serve <module> does; npm start -- help shows the help', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  // On the library start.mjs serves from (dist/), so `instanceof` holds.
  const lib = JSON.stringify(pathToFileURL(path.join(root, 'dist/index.js')).href);
  await writeFile(path.join(dir, 'agents.mjs'), `import { Agent, AgentRegistry, echoModel } from ${lib};
const registry = new AgentRegistry();
registry.register('echo-.*', class extends Agent { constructor(id) { super(id, { model: echoModel() }); } });
export default registry;
`);
  const cli = npmStart(t, ['serve', 'agents.mjs', '--port', '0'], dir);
  const url = await listening(cli);
  assert.deepEqual(noTurnId((await postJson(`${url}/agent/echo-9/chat`, { message: 'from the module' })).body), { agent_id: 'echo-9', response: 'from the module' });
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
  const help = npmStart(t, ['help'], dir);
  assert.deepEqual(await help.exited, { code: 0, signal: null });
  assert.match(help.stdout(), /^Usage: agent-router serve \[module\] \[options\]/);
});

test('npm start (scripts/start.mjs) too: SIGTERM shuts down gracefully, exit 0, when whoever read stdout has gone', async (t) => {
  const cli = npmStart(t, ['--port', '0', '--storage', 'memory']);
  await listening(cli);
  cli.child.stdout?.destroy();
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
  assert.doesNotMatch(cli.stderr(), /EPIPE/);
});

/**
 * `agent-router serve` as npm runs it: through a shell that stays its parent
 * and passes no signal on. Resolves once it listens, with the server's pid
 * (the shell prints it first) and a promise that settles when the server's
 * stdout closes, that is when the server process has exited.
 */
async function serveThroughShell(t: { after: (fn: () => unknown) => void }, env: NodeJS.ProcessEnv) {
  const shell = spawn('sh', ['-c', '"$0" "$@" & echo "pid $!"; wait $!', process.execPath, ...cliArgs, 'serve', '--port', '0', '--storage', 'memory'], {
    env: { ...env, PORT: '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  shell.stdout.setEncoding('utf8').on('data', (text: string) => (out += text));
  const closed = new Promise<void>((resolve) => shell.stdout.on('close', resolve));
  const started = await new Promise<{ pid: number; url: string }>((resolve, reject) => {
    const check = (): void => {
      const pid = /^pid (\d+)$/m.exec(out)?.[1];
      const url = /listening on (http:\/\/\S+)/.exec(out)?.[1];
      if (pid !== undefined && url !== undefined) resolve({ pid: Number(pid), url });
    };
    shell.stdout.on('data', check);
    void closed.then(() => reject(new Error(`the server exited before listening: ${out}`)));
  });
  t.after(() => {
    try {
      process.kill(started.pid, 'SIGKILL');
    } catch {
      // Already gone, as it should be.
    }
    shell.kill('SIGKILL');
  });
  return { ...started, shell, closed, stdout: () => out };
}

test('started through npm (npm start, npx), the server shuts down gracefully once npm is gone, though the shell between them passes no SIGTERM on', { timeout: 20_000 }, async (t) => {
  const server = await serveThroughShell(t, { ...process.env, npm_command: 'start' });
  assert.equal((await getJson(`${server.url}/healthz`)).status, 200);
  // What `kill <npm>` comes to: npm forwards SIGTERM to its shell, which dies without passing it on.
  server.shell.kill('SIGTERM');
  await server.closed;
  assert.match(server.stdout(), /agent-router: the npm process that started this server is gone; finishing running requests, then exiting\n$/);
  await assert.rejects(fetch(`${server.url}/healthz`), 'nothing listens on its port any more');
});

test('started otherwise (nohup agent-router serve &), the server outlives the shell that started it', async (t) => {
  const env = { ...process.env };
  delete env['npm_command'];
  const server = await serveThroughShell(t, env);
  server.shell.kill('SIGTERM');
  // Three of the watch's checks' worth of time: a server started under npm would have stopped by then.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  assert.equal((await getJson(`${server.url}/healthz`)).status, 200);
  process.kill(server.pid, 'SIGTERM');
  await server.closed;
  assert.match(server.stdout(), /SIGTERM received; finishing running requests, then exiting\n$/);
});

test('--version prints the package\'s version and exits 0', async (t) => {
  // From the working directory: the compiled tests run from .build/, which has no package.json.
  const { version } = JSON.parse(await readFile(path.join(process.cwd(), 'package.json'), 'utf8')) as { version: string };
  for (const flag of ['--version', '-v']) {
    const cli = runCli(t, [flag]);
    assert.deepEqual(await cli.exited, { code: 0, signal: null });
    assert.equal(cli.stdout(), `agent-router ${version}\n`);
  }
});

test('--help prints usage and exits 0', async (t) => {
  const cli = runCli(t, ['--help']);
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
  assert.match(cli.stdout(), /^Usage: agent-router serve \[module\] \[options\]/);
  assert.match(cli.stdout(), /--port <n>/);
});
