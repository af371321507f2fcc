/**
 * `agent-router serve --storage ...`: the demo on Postgres, Redis (node-redis
 * and ioredis), memory and files, run as a child process (from source under
 * tsx, or compiled in .build/). Postgres and Redis are the real servers on
 * 127.0.0.1 (see .ci/run); each test uses its own schema or key prefix and
 * removes it.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { createClient } from 'redis';
import { listening, runCli, type Cli } from '../helpers/cli.ts';
import { getJson, postJson } from '../helpers/http.ts';

const root = process.cwd();
const fromSource = import.meta.url.endsWith('.ts');
const PG = 'postgres://postgres@127.0.0.1:5432/test';
const REDIS = 'redis://127.0.0.1:6379';

/** Unique per run, safe in a schema name and a key prefix; printed so a leftover can be traced. */
const tag = `${process.pid}_${randomBytes(4).toString('hex')}`;
console.log(`cli-storage run tag: ${tag}`);


async function increment(url: string, id: string, by: number): Promise<unknown> {
  const reply = await postJson(`${url}/agent/${id}/invoke`, { method: 'increment', params: { by } });
  assert.equal(reply.status, 200, JSON.stringify(reply.body));
  return reply.body.result;
}

async function count(url: string, id: string): Promise<unknown> {
  return (await getJson(`${url}/agent/${id}/state`)).body.state.count;
}

async function stop(cli: Cli): Promise<void> {
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null }, cli.stderr());
  assert.equal(cli.stderr(), '');
}

/** Waits for `condition`, checking every 20 ms for at most 10 s (a bound, not a timing assertion). */
async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.ok(condition(), `timed out waiting: ${what}`);
}

/** A directory with no node_modules above it that holds a driver: nothing resolves from there. */
async function emptyProject(t: { after: (fn: () => Promise<void>) => void }): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-cli-storage-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A Redis user of the test's own, allowed only the keys under `prefix`, and an admin client (returned) that
 * removes the user and those keys after the test.
 */
async function redisUser(t: { after: (fn: () => Promise<void>) => void }, user: string, password: string, prefix: string) {
  const admin = createClient({ url: REDIS });
  admin.on('error', () => undefined);
  await admin.connect();
  t.after(async () => {
    const keys: string[] = [];
    for await (const batch of admin.scanIterator({ MATCH: `${prefix}*`, COUNT: 100 })) keys.push(...batch);
    if (keys.length > 0) await admin.del(keys);
    await admin.sendCommand(['ACL', 'DELUSER', user]);
    await admin.close();
  });
  // Its keys and its pub/sub channels (turn control across processes) under the prefix.
  await admin.sendCommand(['ACL', 'SETUSER', user, 'on', `>${password}`, `~${prefix}*`, `&${prefix}*`, '+@all']);
  return admin;
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test('--storage postgres://: the counter survives a restart; other URL parameters reach pg; the schema is ours', async (t) => {
  const schema = `ar_cli_${tag}`;
  const admin = new pg.Pool({ connectionString: PG, max: 1 });
  t.after(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  const storage = `${PG}?schema=${schema}&application_name=${schema}`;

  const first = runCli(t, ['serve', '--port', '0', '--storage', storage]);
  const url = await listening(first);
  assert.match(first.stdout(), new RegExp(`Storage: Postgres at postgres://127\\.0\\.0\\.1:5432/test, schema ${schema} \\(postgresStorage; kept across restarts\\)`));
  assert.equal(await increment(url, 'counter-pg', 2), 2);
  const versionOf = async (): Promise<number[]> =>
    (await admin.query(`SELECT version FROM "${schema}".agent_router_agents WHERE id = 'counter-pg'`)).rows.map((row) => Number(row.version));
  const [firstVersion] = await versionOf(); // a record's first version is random (record-version.ts)
  assert.equal(await increment(url, 'counter-pg', 3), 5);
  // application_name went through to pg; ending those sessions (a Postgres restart, a failover) is a
  // logged line, not a crash: pg reports it on the pool, and the next turn takes a new connection.
  const ended = await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [schema]);
  assert.ok(ended.rows.length >= 1, 'the CLI has sessions named by ?application_name=');
  await until(() => first.stderr().includes('\n'), 'the CLI reports the lost connection');
  assert.equal(first.stderr(), 'agent-router: Postgres at 127.0.0.1:5432: terminating connection due to administrator command\n');
  assert.equal(await increment(url, 'counter-pg', 0), 5, 'still serving');
  first.child.kill('SIGTERM');
  assert.deepEqual(await first.exited, { code: 0, signal: null });

  const second = runCli(t, ['serve', '--port', '0', '--storage', storage]);
  const url2 = await listening(second);
  assert.equal(await count(url2, 'counter-pg'), 5, 'kept across the restart');
  assert.equal(await increment(url2, 'counter-pg', 1), 6);
  await stop(second);

  assert.deepEqual(await versionOf(), [(firstVersion as number) + 3], 'four commits, in the schema from the URL');
});

test('--storage redis://: the counter survives a restart and a dropped connection, from node-redis to ioredis when only ioredis is installed', async (t) => {
  const prefix = `ar-cli:${tag}:`;
  // A Redis user of its own, so the test can drop exactly the CLI's connection (and a password is in the URL).
  const user = `ar_cli_${tag}`;
  const admin = await redisUser(t, user, 's3cret-pw', prefix);
  const storage = `redis://${user}:s3cret-pw@127.0.0.1:6379/?prefix=${encodeURIComponent(prefix)}`;

  const first = runCli(t, ['serve', '--port', '0', '--storage', storage]);
  const url = await listening(first);
  assert.match(first.stdout(), /Storage: Redis at redis:\/\/127\.0\.0\.1:6379, key prefix "ar-cli:[^"]+" \(redisStorage on node-redis; kept across restarts\)/);
  assert.equal(await increment(url, 'counter-r', 2), 2);
  const firstVersion = Number(await admin.get(`${prefix}{counter-r}:v`)); // a record's first version is random (record-version.ts)
  assert.ok(Number.isSafeInteger(firstVersion) && firstVersion > 0, 'written under the prefix from the URL');
  // A dropped connection (a Redis restart) is one line; the client reconnects and the next turn works.
  await admin.sendCommand(['CLIENT', 'KILL', 'USER', user]);
  await until(() => first.stderr().includes('\n'), 'the CLI reports the dropped connection');
  assert.match(first.stderr(), /^agent-router: Redis at 127\.0\.0\.1:6379: .+; reconnecting\n$/);
  assert.equal(await increment(url, 'counter-r', 0), 2, 'still serving');
  first.child.kill('SIGTERM');
  assert.deepEqual(await first.exited, { code: 0, signal: null });
  assert.doesNotMatch(first.stdout() + first.stderr(), /s3cret/);

  // A project with ioredis and no redis package: the CLI falls back to ioredis.
  const project = await emptyProject(t);
  await mkdir(path.join(project, 'node_modules'));
  await symlink(path.join(root, 'node_modules/ioredis'), path.join(project, 'node_modules/ioredis'), 'dir');
  const second = runCli(t, ['serve', '--port', '0', '--storage', storage], project);
  const url2 = await listening(second);
  assert.match(second.stdout(), /\(redisStorage on ioredis; kept across restarts\)/);
  assert.equal(await count(url2, 'counter-r'), 2, 'kept across the restart');
  assert.equal(await increment(url2, 'counter-r', 1), 3);
  await stop(second);
  assert.equal(await admin.get(`${prefix}{counter-r}:v`), String(firstVersion + 2), 'three commits');
});

for (const backend of ['postgres', 'redis'] as const) {
  test(`--storage ${backend}://: servers on one storage share turn control: a stream of one is replayed through another, whose cancel finds nothing running`, async (t) => {
    const schema = `ar_cli_share_${tag}`;
    const prefix = `ar-cli-share:${tag}:`;
    t.after(async () => {
      if (backend === 'postgres') {
        const admin = new pg.Pool({ connectionString: PG, max: 1 });
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await admin.end();
        return;
      }
      const admin = createClient({ url: REDIS });
      await admin.connect();
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(keys);
      await admin.close();
    });
    const storage = backend === 'postgres' ? `${PG}?schema=${schema}` : `${REDIS}/?prefix=${encodeURIComponent(prefix)}`;
    const [one, two] = [runCli(t, ['serve', '--port', '0', '--storage', storage]), runCli(t, ['serve', '--port', '0', '--storage', storage])];
    const [urlOne, urlTwo] = await Promise.all([listening(one), listening(two)]);

    const streamed = await fetch(`${urlOne}/agent/echo-1/chat?stream=events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'one two three' }) });
    const turnId = streamed.headers.get('turn-id');
    const events = await streamed.text();
    assert.match(events, /event: turn\.finished\n/);
    const replayed = await fetch(`${urlTwo}/agent/echo-1/turns/${turnId}/events?stream=events`);
    assert.equal(replayed.status, 200, 'the other server knows the turn');
    assert.equal(await replayed.text(), events, 'replayed event for event, ids included');

    const cancel = await postJson(`${urlTwo}/agent/echo-1/cancel`, {});
    assert.equal(cancel.status, 404, JSON.stringify(cancel.body));
    assert.deepEqual(cancel.body, { error: 'Agent "echo-1" runs no turn in any process sharing its storage', code: 'no_running_turn' });
    await Promise.all([stop(one), stop(two)]);
  });
}

test('a backend line written after whoever read stderr has gone (agent-router serve 2>&1 | head -1) does not end the server', async (t) => {
  const prefix = `ar-cli-epipe:${tag}:`;
  const user = `ar_cli_epipe_${tag}`;
  const admin = await redisUser(t, user, 'pw', prefix);
  const cli = runCli(t, ['serve', '--port', '0', '--storage', `redis://${user}:pw@127.0.0.1:6379/?prefix=${encodeURIComponent(prefix)}`]);
  const url = await listening(cli);
  assert.equal(await increment(url, 'counter-e', 1), 1);
  cli.child.stderr?.destroy(); // the reader is gone: the next line written to stderr meets EPIPE
  // A dropped connection is reported on stderr ("reconnecting"); the client reconnects and serving goes on.
  await admin.sendCommand(['CLIENT', 'KILL', 'USER', user]);
  assert.equal(await increment(url, 'counter-e', 1), 2, 'still serving after the line');
  cli.child.kill('SIGTERM');
  assert.deepEqual(await cli.exited, { code: 0, signal: null });
});

test('--storage memory forgets on restart; "storage" in a config file works like the flag', async (t) => {
  const dir = await emptyProject(t);
  await writeFile(path.join(dir, 'memory.json'), JSON.stringify({ storage: 'memory' }));
  const first = runCli(t, ['serve', '--port', '0', '--storage', 'memory'], dir);
  const url = await listening(first);
  assert.match(first.stdout(), /Storage: in memory \(MemoryStorage; lost on exit\)/);
  assert.equal(await increment(url, 'counter-m', 4), 4);
  assert.equal(await count(url, 'counter-m'), 4);
  await stop(first);

  const second = runCli(t, ['serve', '--port', '0', '--config', 'memory.json'], dir);
  const url2 = await listening(second);
  assert.match(second.stdout(), /Storage: in memory/);
  assert.equal(await count(url2, 'counter-m'), 0, 'a new process starts empty');
  await stop(second);
  assert.deepEqual(await readdir(dir), ['memory.json'], 'no .data directory was made');

  // The same config file next to a module: the module keeps its own storage, and the CLI says so.
  const agentModule = pathToFileURL(path.join(root, fromSource ? 'src/agent/agent.ts' : '.build/src/agent/agent.js')).href;
  const echo = pathToFileURL(path.join(root, fromSource ? 'src/models/echo.ts' : '.build/src/models/echo.js')).href;
  await writeFile(path.join(dir, 'solo.mjs'), `import { Agent } from ${JSON.stringify(agentModule)};\nimport { echoModel } from ${JSON.stringify(echo)};\nexport default new Agent('solo', { model: echoModel() });\n`);
  const module = runCli(t, ['serve', 'solo.mjs', '--port', '0', '--config', 'memory.json'], dir);
  await listening(module);
  await until(() => module.stderr().includes('\n'), 'the note (stderr and stdout are separate pipes)');
  assert.equal(module.stderr(), 'agent-router: note: solo.mjs chooses its agents\' storage; "storage" in memory.json applies to the demo only\n');
  module.child.kill('SIGTERM');
  assert.deepEqual(await module.exited, { code: 0, signal: null });
});

test('--storage file:<dir> is --data-dir <dir>', async (t) => {
  const dir = await emptyProject(t);
  const first = runCli(t, ['serve', '--port', '0', '--storage', 'file:agents'], dir);
  const url = await listening(first);
  assert.match(first.stdout(), /Storage: files in \.\/agents \(FileStorage; kept across restarts\)/);
  assert.equal(await increment(url, 'counter-f', 7), 7);
  await stop(first);
  const second = runCli(t, ['serve', '--port', '0', '--data-dir', path.join(dir, 'agents')], dir);
  assert.equal(await count(await listening(second), 'counter-f'), 7);
  await stop(second);
});

test('the data directory the CLI makes is left out of git; one that was there is left as it is', async (t) => {
  const dir = await emptyProject(t);
  const git = (...args: string[]): string => execFileSync('git', args, { cwd: dir, encoding: 'utf8' });
  git('init', '-q');
  await mkdir(path.join(dir, 'mine'));
  const made = runCli(t, ['serve', '--port', '0'], dir);
  assert.equal(await increment(await listening(made), 'counter-g', 3), 3);
  await stop(made);
  const kept = runCli(t, ['serve', '--port', '0', '--data-dir', 'mine'], dir);
  assert.equal(await increment(await listening(kept), 'counter-g', 4), 4);
  await stop(kept);
  // The conversation in ./.data is on disk, and git sees none of it; the directory the user made is theirs.
  assert.ok((await readdir(path.join(dir, '.data'))).some((name) => name.startsWith('counter_g-')));
  const mine = (await readdir(path.join(dir, 'mine'))).sort();
  assert.ok(mine.some((name) => name.startsWith('counter_g-')), mine.join(', '));
  assert.ok(!mine.includes('.gitignore'));
  assert.equal(git('status', '--porcelain', '--untracked-files=all'), mine.map((name) => `?? mine/${name}\n`).join(''));
});

test('a data directory that is a file, or under one, is one line saying so: exit code 1', async (t) => {
  const dir = await emptyProject(t);
  await writeFile(path.join(dir, 'notes.txt'), 'not a directory');
  const cases = [
    [['--data-dir', 'notes.txt'], `agent-router: cannot use ${path.join(dir, 'notes.txt')} as the data directory: it is a file, not a directory (EEXIST); pass a writable directory with --data-dir\n`],
    [['--storage', 'file:notes.txt/agents'], `agent-router: cannot use ${path.join(dir, 'notes.txt/agents')} as the data directory: a part of its path is a file, not a directory (ENOTDIR); pass a writable directory with --data-dir\n`],
  ] as const;
  const runs = cases.map(([args]) => runCli(t, ['serve', '--port', '0', ...args], dir));
  for (const [i, [args, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 1, signal: null }, args.join(' '));
    assert.equal(cli.stderr(), expected);
  }
});

test('a bad --storage, or --storage with a module or with --data-dir, is a usage error: exit code 2', async (t) => {
  const cases = [
    [['serve', '--storage', 'mysql://root:hunter2@db/app'], '--storage must be memory, file:<dir>, postgres://…, postgresql://…, redis://… or rediss://…; got "mysql://db/app"'],
    [['serve', '--storage', 'postgres://127.0.0.1/test?schema=a-b'], '--storage: ?schema must be a plain identifier (letters, digits, underscores); got "a-b"'],
    [['serve', 'agents.js', '--storage', 'memory'], "--storage applies to the demo only; agents.js chooses its agents' storage in its code, e.g. new Agent(id, { model, storage: postgresStorage(pool) })"],
    [['serve', '--storage', 'memory', '--data-dir', 'x'], '--storage and --data-dir both say where the demo keeps its agents; give one (--data-dir <dir> is --storage file:<dir>)'],
  ] as const;
  const runs = cases.map(([args]) => runCli(t, [...args]));
  for (const [i, [args, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 2, signal: null }, args.join(' '));
    assert.equal(cli.stderr(), `agent-router: ${expected}\nRun 'agent-router --help' for usage.\n`);
    assert.doesNotMatch(cli.stderr(), /hunter2/);
  }
});

test('a driver missing from the project is one line naming the package to install: exit code 1', async (t) => {
  const dir = await emptyProject(t);
  const cases = [
    ['postgres://postgres@127.0.0.1:5432/test', 'agent-router: --storage postgres://… needs the pg driver; install it in your project: npm install pg\n'],
    ['postgresql://127.0.0.1/test', 'agent-router: --storage postgresql://… needs the pg driver; install it in your project: npm install pg\n'],
    [`${REDIS}/0`, 'agent-router: --storage redis://… needs a Redis driver; install one in your project: npm install redis (or: npm install ioredis)\n'],
  ] as const;
  const runs = cases.map(([storage]) => runCli(t, ['serve', '--port', '0', '--storage', storage], dir));
  for (const [i, [storage, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 1, signal: null }, storage);
    assert.equal(cli.stderr(), expected);
  }
});

test('a server that takes the connection and never answers (a stopped Redis, another service\'s port) is one line after 10 s: exit code 1', async (t) => {
  const held: net.Socket[] = [];
  const silent = net.createServer((socket) => held.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    for (const socket of held) socket.destroy();
    silent.close();
  });
  const { port } = silent.address() as net.AddressInfo;
  const cases = [
    [`redis://default:s3cret-pw@127.0.0.1:${port}/0`, `agent-router: cannot connect to Redis at 127.0.0.1:${port}: no answer within 10 s; check that it runs and the --storage URL\n`],
    [`postgres://postgres:s3cret-pw@127.0.0.1:${port}/test`, /^agent-router: cannot connect to Postgres at 127\.0\.0\.1:\d+: .*timeout.*; check that it runs and the --storage URL\n$/],
  ] as const;
  const runs = cases.map(([storage]) => runCli(t, ['serve', '--port', '0', '--storage', storage]));
  for (const [i, [storage, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 1, signal: null }, storage);
    if (typeof expected === 'string') assert.equal(cli.stderr(), expected);
    else assert.match(cli.stderr(), expected);
    assert.doesNotMatch(cli.stdout() + cli.stderr(), /s3cret/);
  }
});

test('a server that does not answer is one line naming host:port, never the password: exit code 1', async (t) => {
  const port = await closedPort();
  const cases = [
    [`postgres://postgres:s3cret-pw@127.0.0.1:${port}/test`, `agent-router: cannot connect to Postgres at 127.0.0.1:${port}: connection refused (ECONNREFUSED); check that it runs and the --storage URL\n`],
    [`redis://default:s3cret-pw@127.0.0.1:${port}/0`, `agent-router: cannot connect to Redis at 127.0.0.1:${port}: connection refused (ECONNREFUSED); check that it runs and the --storage URL\n`],
    // Postgres answers, but the database is wrong: its own message, and still no password.
    [`postgres://postgres:s3cret-pw@127.0.0.1:5432/no_such_db_${tag}`, `agent-router: cannot connect to Postgres at 127.0.0.1:5432: database "no_such_db_${tag}" does not exist; check that it runs and the --storage URL\n`],
  ] as const;
  const runs = cases.map(([storage]) => runCli(t, ['serve', '--port', '0', '--storage', storage]));
  for (const [i, [storage, expected]] of cases.entries()) {
    const cli = runs[i] as Cli;
    assert.deepEqual(await cli.exited, { code: 1, signal: null }, storage);
    assert.equal(cli.stderr(), expected);
    assert.doesNotMatch(cli.stdout() + cli.stderr(), /s3cret/);
  }
});
