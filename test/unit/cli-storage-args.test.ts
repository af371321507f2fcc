import assert from 'node:assert/strict';
import path from 'node:path';
import { test } from 'node:test';
import { parseCliArgs } from '../../src/cli/args.ts';
import { UsageError } from '../../src/cli/usage-error.ts';
import { exportOf } from '../../src/cli/driver.ts';
import { describe } from '../../src/cli/storage-remote.ts';
import { demoStorage, parseStorageSpec, redact } from '../../src/cli/storage-spec.ts';
import { parseFileConfig } from '../../src/server/config.ts';
import { StorageUnavailableError } from '../../src/errors.ts';

const usage = (message: RegExp | string) => ({ name: 'UsageError', message });

test('--storage memory and file:<dir>; without the flag, no storage is chosen by the parser', () => {
  assert.deepEqual(parseCliArgs(['serve', '--storage', 'memory']).storage, { kind: 'memory' });
  assert.deepEqual(parseCliArgs(['--storage', 'file:./agents']).storage, { kind: 'file', dir: './agents' });
  assert.deepEqual(parseCliArgs(['--storage=file:/var/lib/agents']).storage, { kind: 'file', dir: '/var/lib/agents' });
  assert.deepEqual(parseStorageSpec('file:///var/lib/my%20agents', '--storage'), { kind: 'file', dir: '/var/lib/my agents' }, 'a file: URL is decoded');
  assert.equal(parseCliArgs(['serve']).storage, undefined);
});

test('--storage postgres:// keeps the URL for pg, takes out ?schema and ?table_prefix, and names the server without credentials', () => {
  const spec = parseCliArgs(['--storage', 'postgres://alice:pw@db.internal:6543/app?schema=agents&sslmode=require&table_prefix=demo_']).storage;
  assert.deepEqual(spec, {
    kind: 'postgres',
    schema: 'agents',
    tablePrefix: 'demo_',
    url: 'postgres://alice:pw@db.internal:6543/app?sslmode=require',
    shown: 'postgres://db.internal:6543/app',
    address: 'db.internal:6543',
    scheme: 'postgres',
    source: '--storage',
  });
  const plain = parseStorageSpec('postgresql://bob@localhost/test?options=-c%20search_path%3Dx', '--storage');
  assert.equal(plain.kind, 'postgres');
  assert.equal(plain.kind === 'postgres' && plain.url, 'postgresql://bob@localhost/test?options=-c%20search_path%3Dx', 'no parameter of ours: the URL as typed');
  assert.equal(plain.kind === 'postgres' && plain.address, 'localhost:5432', 'the default port');
  assert.equal(plain.kind === 'postgres' && plain.schema, undefined);
});

test('--storage redis:// and rediss:// take out ?prefix; the default port is 6379', () => {
  const spec = parseStorageSpec('rediss://default:pw@cache.example:6380/2?prefix=myapp%3A', '--storage');
  assert.deepEqual(spec, {
    kind: 'redis',
    prefix: 'myapp:',
    url: 'rediss://default:pw@cache.example:6380/2',
    shown: 'rediss://cache.example:6380/2',
    address: 'cache.example:6380',
    scheme: 'rediss',
    source: '--storage',
  });
  const plain = parseStorageSpec('REDIS://127.0.0.1', 'x');
  assert.equal(plain.kind, 'redis');
  assert.equal(plain.kind === 'redis' && plain.address, '127.0.0.1:6379');
  assert.equal(plain.kind === 'redis' && plain.prefix, undefined);
});

test('a bad --storage is a UsageError that never shows the password', () => {
  assert.throws(() => parseCliArgs(['--storage', 'mysql://root:hunter2@db/app']), usage('--storage must be memory, file:<dir>, postgres://…, postgresql://…, redis://… or rediss://…; got "mysql://db/app"'));
  assert.throws(() => parseCliArgs(['--storage', 'postgres']), usage(/--storage must be memory, .*; got "postgres"$/));
  assert.throws(() => parseCliArgs(['--storage', '']), usage(/^--storage needs a value/));
  assert.throws(() => parseCliArgs(['--storage']), usage('--storage needs a value'));
  assert.throws(() => parseCliArgs(['--storage', 'file:']), usage('--storage file: needs a directory, e.g. file:./.data'));
  assert.throws(() => parseCliArgs(['--storage', 'file://host/dir']), usage(/^--storage: .*; write file:<dir>/));
  assert.throws(() => parseCliArgs(['--storage', 'postgres://u:hunter2@[bad/x']), (error: Error) => {
    assert.ok(error instanceof UsageError);
    assert.match(error.message, /^--storage is not a valid URL: "postgres:\/\/\[bad\/x"; e\.g\. postgres:\/\/localhost:5432\//);
    return true;
  });
  assert.throws(() => parseCliArgs(['--storage', 'postgres://h/db?schema=a-b']), usage('--storage: ?schema must be a plain identifier (letters, digits, underscores); got "a-b"'));
  assert.throws(() => parseCliArgs(['--storage', 'postgres://h/db?table_prefix=1x']), usage(/^--storage: \?table_prefix must be letters, digits and underscores/));
  assert.throws(() => parseCliArgs(['--storage', 'redis://h/?prefix=']), usage('--storage: ?prefix= needs a value'));
});

test('--storage is refused with a module, and together with --data-dir', () => {
  assert.throws(() => parseCliArgs(['serve', './agents.js', '--storage', 'memory']), usage(/^--storage applies to the demo only; \.\/agents\.js chooses its agents' storage in its code/));
  assert.throws(() => parseCliArgs(['--storage', 'file:a', '--data-dir', 'b']), usage(/^--storage and --data-dir both say where the demo keeps its agents; give one/));
  assert.equal(parseCliArgs(['help', 'x.js', '--storage', 'memory']).command, 'help', '--help still prints help');
  assert.throws(() => parseCliArgs(['serve', './agents.js', '--data-dir', 'd']), usage(/^--data-dir applies to the demo only; \.\/agents\.js chooses its agents' storage in its code, e\.g\. new Agent\(id, \{ model, storage: new FileStorage\('d'\) \}\)/));
});

test('redact strips everything up to the last @ after the scheme', () => {
  assert.equal(redact('postgres://u:p/w@x@host:1/db'), 'postgres://host:1/db');
  assert.equal(redact('redis://host:6379'), 'redis://host:6379');
  assert.equal(redact('not a url @ all'), 'not a url @ all');
});

test('the demo storage: a flag, then the config file, then ./.data; relative directories from cwd', () => {
  const cwd = path.resolve('/srv/app');
  const none = { storage: undefined, dataDir: undefined };
  const where = 'config file c.json';
  assert.deepEqual(demoStorage(none, {}, where, cwd), { kind: 'file', dir: path.join(cwd, '.data') });
  assert.deepEqual(demoStorage(none, { dataDir: 'd' }, where, cwd), { kind: 'file', dir: path.join(cwd, 'd') });
  assert.deepEqual(demoStorage(none, { storage: 'memory' }, where, cwd), { kind: 'memory' });
  assert.deepEqual(demoStorage(none, { storage: 'file:e' }, where, cwd), { kind: 'file', dir: path.join(cwd, 'e') });
  assert.deepEqual(demoStorage({ storage: { kind: 'file', dir: 'f' }, dataDir: undefined }, { storage: 'memory' }, where, cwd), { kind: 'file', dir: path.join(cwd, 'f') }, 'the flag beats the file');
  assert.deepEqual(demoStorage({ storage: undefined, dataDir: '/abs' }, { storage: 'memory' }, where, cwd), { kind: 'file', dir: path.resolve('/abs') }, '--data-dir beats the file too');
  assert.deepEqual(demoStorage({ storage: { kind: 'memory' }, dataDir: undefined }, { dataDir: 'd' }, where, cwd), { kind: 'memory' });
  assert.throws(() => demoStorage(none, { storage: 'memory', dataDir: 'd' }, where, cwd), { name: 'TypeError', message: /^config file c\.json: set storage or data_dir, not both/ });
  assert.throws(() => demoStorage(none, { storage: 'mongodb://u:pw@h/x' }, where, cwd), { name: 'TypeError', message: /^config file c\.json: storage must be memory, .*; got "mongodb:\/\/h\/x"$/ });
  const remote = demoStorage(none, { storage: 'postgres://h/db' }, where, cwd);
  assert.equal(remote.kind === 'postgres' && remote.source, 'config file c.json: storage', 'messages name the config file');
});

test('a config file may hold "storage" (a string; checked by the CLI)', () => {
  assert.deepEqual(parseFileConfig({ storage: 'redis://127.0.0.1:6379', port: 0 }, 'f'), { server: {}, storage: 'redis://127.0.0.1:6379', port: 0 });
  assert.throws(() => parseFileConfig({ storage: 5 }, 'config file c.json'), { message: 'config file c.json: storage must be a non-empty string, got 5' });
  assert.throws(() => parseFileConfig({ storage: '' }, 'config file c.json'), { message: /storage must be a non-empty string/ });
});

test("a driver's error is one line with system codes spelled out and the URL's password masked", () => {
  const url = 'postgres://u:p%40ss@h/db?password=other';
  assert.equal(describe(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }), url), 'connection refused (ECONNREFUSED)');
  assert.equal(describe(new Error('wrapped', { cause: Object.assign(new Error('x'), { code: 'ENOTFOUND' }) }), url), 'host not found (ENOTFOUND)');
  // A storage's outage error names the driver's, as the driver's own error did before storages wrapped it.
  assert.equal(describe(new StorageUnavailableError('postgresStorage', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' })), url), 'connection refused (ECONNREFUSED)');
  assert.equal(describe(new Error('auth failed for p@ss and other\nstack'), url), 'auth failed for *** and ***');
  assert.equal(describe(Object.assign(new AggregateError([], ''), { code: 'EPIPE' }), url), 'EPIPE', 'an empty message falls back to the code');
  assert.equal(describe('plain', 'not a url'), 'plain');
  assert.equal(describe(new Error(''), 'redis://h'), 'unknown error');
});

test("a driver's export is found as a named export or on its CommonJS default", () => {
  class Pool {}
  assert.equal(exportOf({ Pool }, 'Pool'), Pool);
  assert.equal(exportOf({ default: { Pool } }, 'Pool'), Pool);
  assert.equal(exportOf({ default: Object.assign(() => undefined, { Pool }) }, 'Pool'), Pool);
  assert.equal(exportOf({ default: 5 }, 'Pool'), undefined);
  assert.equal(exportOf({}, 'Pool'), undefined);
});

test('the spec\'s server options as flags, snake_case or with dashes; bad values are usage errors', () => {
  assert.deepEqual(parseCliArgs(['serve']).server, {});
  assert.deepEqual(parseCliArgs(['--idle_timeout', '60', '--max_agents', '100', '--enable_list_agents']).server, { idleTimeout: 60, maxAgents: 100, enableListAgents: true });
  assert.deepEqual(parseCliArgs(['--idle-timeout=0.5', '--max-agents=1', '--enable-list-agents']).server, { idleTimeout: 0.5, maxAgents: 1, enableListAgents: true });
  assert.throws(() => parseCliArgs(['--idle_timeout', 'soon']), usage('--idle_timeout must be a number of seconds from 0 to 2147483 (0: never drop), got "soon"'));
  assert.throws(() => parseCliArgs(['--idle_timeout=-1']), usage(/--idle_timeout must be a number of seconds/));
  assert.throws(() => parseCliArgs(['--max_agents', '0']), usage('--max_agents must be a whole number >= 1, got "0"'));
  assert.throws(() => parseCliArgs(['--max_agents', '1.5']), usage(/--max_agents must be a whole number >= 1/));
  assert.throws(() => parseCliArgs(['--enable_list_agents=yes']), usage('--enable_list_agents takes no value'));
  assert.throws(() => parseCliArgs(['--idle_timeout', '5', '--idle-timeout', '10']), usage('--idle_timeout and --idle-timeout are the same option; give it once'));
  assert.deepEqual(parseCliArgs(['--allowed-hosts', 'agents.example.com, .corp.example']).server, { allowedHosts: ['agents.example.com', '.corp.example'] });
  assert.deepEqual(parseCliArgs(['--allowed_hosts=backend']).server, { allowedHosts: ['backend'] });
  assert.throws(() => parseCliArgs(['--allowed-hosts', '*.example.com']), usage(/^--allowed-hosts takes host names without port, comma-separated/));
  assert.throws(() => parseCliArgs(['--allowed-hosts', 'backend:8080']), usage(/^--allowed-hosts takes host names without port/));
  for (const argv of [['--help', '--max_agents', '0'], ['serve', '--bogus', '--help'], ['--port', 'abc', '-h'], ['--storage', 'memory', '--data-dir', 'x', '--help']]) {
    assert.equal(parseCliArgs(argv).command, 'help', argv.join(' '));
  }
});

test('--help lists every key a config file takes, and only those', async () => {
  const { HELP } = await import('../../src/cli/help.ts');
  const block = /--config <file>[^\n]*\n((?: {22}[a-z_, ]+\n)+)/.exec(HELP)?.[1] ?? '';
  const listed = block.split(/[\s,]+/).filter(Boolean);
  for (const key of ['replay_limit', 'when_busy', 'on_disconnect', 'metrics', 'playground', 'cors_origins', 'storage']) {
    assert.ok(listed.includes(key), `--help lists ${key}`);
  }
  // A wrong value is refused by the key's own check; a key the file does not take is refused as unknown.
  for (const key of listed) {
    assert.throws(() => parseFileConfig({ [key]: { wrong: true } }, 'f.json'), (error: Error) => !error.message.includes('unknown key'), key);
  }
  assert.throws(() => parseFileConfig({ replay_limt: 1 }, 'f.json'), /unknown key "replay_limt"; did you mean replay_limit\?/);
});
