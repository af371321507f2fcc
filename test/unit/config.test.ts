import assert from 'node:assert/strict';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseFileConfig, readConfigFile, resolveServerConfig } from '../../src/server/config.ts';
import { AgentPool } from '../../src/registry/pool.ts';
import { AgentServer } from '../../src/server/server.ts';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { anthropicModel } from '../../src/models/anthropic.ts';
import { echoModel } from '../../src/models/echo.ts';
import { openAIModel } from '../../src/models/openai.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { toExpress } from '../../src/adapters/express.ts';
import { toFastify } from '../../src/adapters/fastify.ts';
import { toKoa } from '../../src/adapters/koa.ts';
import { FileStorage } from '../../src/storage/file.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import { HTTPTransport } from '../../src/transports/http.ts';

test('defaults: 300 s idle, 10000 agents, no /agents, 10 s drain, load-balancer-safe socket timeouts', () => {
  assert.deepEqual(resolveServerConfig({}), {
    idleTimeout: 300,
    maxAgents: 10_000,
    enableListAgents: false,
    playground: false,
    shutdownTimeout: 10,
    drainDelay: 0,
    keepAliveTimeout: 65,
    headersTimeout: 66,
    requestTimeout: 120,
  });
});

test('headersTimeout and requestTimeout follow a raised keepAliveTimeout unless set', () => {
  const settings = resolveServerConfig({ keepAliveTimeout: 200 });
  assert.equal(settings.headersTimeout, 201);
  assert.equal(settings.requestTimeout, 201);
  assert.equal(resolveServerConfig({ requestTimeout: 0 }).requestTimeout, 0, '0 turns the upload limit off');
  assert.equal(resolveServerConfig({ idleTimeout: Infinity }).idleTimeout, Infinity);
});

test('a bad value is a TypeError naming the option and what it must be', () => {
  assert.throws(() => resolveServerConfig({ idleTimeout: -1 }), { name: 'TypeError', message: /AgentServer: idleTimeout must be a number of seconds/ });
  // A config file cannot write Infinity, so the message offers 0, which it can.
  assert.throws(() => parseFileConfig({ idle_timeout: -1 }, 'config file c.json'), (error: Error) => /\(0: never drop\), got -1$/.test(error.message) && !/Infinity/.test(error.message));
  assert.throws(() => resolveServerConfig({ maxAgents: 1.5 }), { message: /maxAgents must be a whole number/ });
  assert.throws(() => resolveServerConfig({ maxAgents: 0 }), { message: /maxAgents must be a whole number >= 1, got 0/ });
  assert.throws(() => new AgentPool({ maxAgents: -1 }), { message: /maxAgents must be a whole number >= 1, got -1/ });
  assert.throws(() => resolveServerConfig({ enableListAgents: 'yes' as unknown as boolean }), { message: /enableListAgents must be true or false, got "yes"/ });
  assert.throws(() => resolveServerConfig({ shutdownTimeout: Infinity }), { message: /shutdownTimeout/ }, 'a timer would fire at once');
  assert.throws(() => resolveServerConfig({ onEvict: 'x' as unknown as () => void }), { message: /onEvict must be a function/ });
  assert.throws(() => resolveServerConfig({ keepAliveTimeout: 70, headersTimeout: 60 }), { message: /headersTimeout \(60\) must be above keepAliveTimeout \(70\)/ });
  assert.throws(() => resolveServerConfig({ requestTimeout: 30 }), { message: /requestTimeout \(30\) must be 0 or at least headersTimeout \(66\)/ });
  assert.throws(() => resolveServerConfig(null as unknown as object), { message: /config must be an object/ });
});

test('an unknown option is refused; a snake_case one points at its camelCase name', () => {
  assert.throws(() => resolveServerConfig({ idle_timeout: 5 } as object), { message: /unknown option "idle_timeout"; did you mean idleTimeout\?/ });
  assert.throws(() => resolveServerConfig({ prefix: '/x' } as object), { message: /unknown option "prefix"; known options: .*idleTimeout/ });
  // `now`, a clock for tests, is taken but not offered among them.
  assert.throws(() => resolveServerConfig({ prefix: '/x' } as object), { message: /^(?!.*\bnow\b)/ });
  assert.throws(() => resolveServerConfig({ authorise: () => true } as object), { message: /unknown option "authorise"; did you mean authorize\?/ });
});

test('AgentRouter checks its options as AgentServer does: a typo or a wrong type must not leave it open or unbounded', () => {
  const registry = new AgentRegistry();
  const bot = new Agent('bot', { model: echoModel() });
  // Both were accepted: the limit was then gone (a 3 MB body answered 200), and the router had no auth.
  assert.throws(() => new AgentRouter(registry, { bodyLimit: '1mb' } as never), { name: 'TypeError', message: /AgentRouter: bodyLimit must be a whole number >= 0, got "1mb"/ });
  assert.throws(() => new AgentRouter(registry, { authorise: () => false } as never), { message: /AgentRouter: unknown option "authorise"; did you mean authorize\?/ });
  assert.throws(() => new AgentRouter(bot, { body_limit: 10 } as never), { message: /unknown option "body_limit"; did you mean bodyLimit\?/ });
  assert.throws(() => new AgentRouter(registry, { bodyLimit: Number.NaN }), { message: /bodyLimit must be a whole number >= 0, got NaN/ });
  assert.throws(() => new AgentRouter(registry, { maxIdLength: -1 }), { message: /maxIdLength must be a whole number >= 1, got -1/ });
  assert.throws(() => new AgentRouter(registry, { maxIdLength: 0 }), { message: /maxIdLength must be a whole number >= 1, got 0/ }, 'it would refuse every id');
  assert.throws(() => new AgentRouter(registry, { pingInterval: 'x' } as never), { message: /pingInterval must be a number of seconds/ });
  assert.throws(() => new AgentRouter(registry, { authorize: true } as never), { message: /authorize must be a function/ });
  assert.throws(() => new AgentRouter(registry, { prefix: 5 } as never), { message: /prefix must be a string such as "\/agents"/ });
  assert.throws(() => new AgentRouter(registry, 'x' as never), { message: /AgentRouter: options must be an object, got "x"/ });
  assert.throws(() => new AgentRouter(registry, { tags: 'agents' } as never), { message: /tags must be a list of strings, e.g. \["agents"\], got "agents"/ });
  assert.throws(() => new AgentRouter(registry, { cors: true } as never), { message: /cors must be a list of origins such as \["https:\/\/app.example.com"\], '\*', or an object such as \{ origins: \[\.\.\.\], credentials: true \}, got true/ });
  // Taken before, then every failure it should report fell back to the console with "the logger option threw".
  assert.throws(() => new AgentRouter(registry, { logger: {} } as never), { message: /logger must be an object with an error\(message, error\) method, such as console/ });
  assert.throws(() => resolveServerConfig({ logger: { log: () => undefined } } as never), { message: /AgentServer: logger must be an object with an error/ });
  // The nearest name by edits, and not a far one for a short key (port is not cors).
  assert.throws(() => new AgentRouter(registry, { nos: 1 } as never), { message: /unknown option "nos"; did you mean now\?/ });
  assert.throws(() => new AgentRouter(registry, { port: 8080 } as never), { message: /unknown option "port"; known options: prefix, / });
  assert.throws(() => resolveServerConfig({ port: 8080 } as object), { message: /unknown option "port"; where to listen is serve\(port, host\)'s/ });
  // Infinity means no limit, as it did before options were checked.
  new AgentRouter(registry, { bodyLimit: Infinity, maxStreams: Infinity, turnTimeout: Infinity, idleTimeout: Infinity });
  // Every documented option, and undefined for any of them, is taken.
  const router = new AgentRouter(registry, {
    prefix: '', tags: ['agents'], responses: {}, openapi: true, bodyLimit: 10, maxIdLength: 64, pingInterval: 0, turnTimeout: 0,
    authorize: () => true, cors: { origins: '*' }, maxStreams: 1, logger: console, idleTimeout: Infinity, maxAgents: 1,
    onCreate: () => undefined, onEvict: () => undefined, now: undefined,
  } as never);
  assert.equal(router.prefix, '');
});

test('a cors option that would not do what it says is refused when the router is made, teaching the fix', () => {
  const registry = new AgentRegistry();
  const refuses = (cors: unknown, message: RegExp): void => {
    assert.throws(() => new AgentRouter(registry, { cors } as never), { name: 'TypeError', message }, JSON.stringify(cors));
    assert.throws(() => new AgentServer(registry, { cors } as never), (error: unknown) => error instanceof TypeError && error.message.startsWith('AgentServer: cors') && message.test(error.message), `AgentServer ${JSON.stringify(cors)}`);
  };
  // A string (the cors package's habit) was matched with String.prototype.includes: https://app.example.co, a domain
  // anyone can register, was let in with credentials, as was every other prefix of the origin.
  refuses({ origins: 'https://app.example.com', credentials: true }, /cors origins must be '\*', a list or a function; for one origin pass a list: \{ origins: \["https:\/\/app.example.com"\] \}/);
  // Without origins, every request carrying an Origin header was a 500.
  refuses({}, /cors origins must be '\*', a list of origins such as \['https:\/\/app.example.com'\], or a function \(origin\) => boolean; got undefined/);
  refuses({ origin: ['https://app.example.com'] }, /cors: unknown option "origin"; did you mean origins\?/);
  // Origins no browser sends never matched, and the page was blocked without a word on the server.
  refuses({ origins: ['https://app.example.com/'] }, /cors origin "https:\/\/app.example.com\/" is not one a browser sends; it sends "https:\/\/app.example.com"/);
  refuses({ origins: ['https://app.example.com:443'] }, /it sends "https:\/\/app.example.com"/);
  refuses({ origins: ['HTTPS://App.Example.com'] }, /it sends "https:\/\/app.example.com"/);
  refuses({ origins: ['app.example.com'] }, /cors origin "app.example.com" is not one a browser sends \(scheme:\/\/host\[:port\], nothing after it\)/);
  refuses({ origins: ['*'] }, /for any origin pass '\*' itself, not in a list/);
  refuses({ origins: ['https://app.example.com'], maxAge: '600' }, /cors maxAge must be a whole number >= 0, got "600"/);
  refuses({ origins: ['https://app.example.com'], credentials: 'true' }, /cors credentials must be true or false, got "true"/);
  // A header name with a line break (split from a CRLF file) was taken, and every preflight answered 500.
  refuses({ origins: ['https://app.example.com'], allowHeaders: ['content-type', 'authorization\r'] }, /cors allowHeaders "authorization\\r" is not a header name/);
  refuses({ origins: ['https://app.example.com'], allowHeaders: ['x api key'] }, /cors allowHeaders "x api key" is not a header name/);
  assert.throws(() => parseFileConfig({ cors_origins: ['https://app.example.com/'] }, 'config file c.json'), { message: /^config file c.json: cors origin "https:\/\/app.example.com\/" is not one a browser sends/ });
  // Any page can send Origin: null (a sandboxed iframe of its own): with credentials, as open as '*' with them.
  refuses({ origins: ['https://app.example.com', 'null'], credentials: true }, /cors origin 'null' with credentials: true would let any website send its visitors' cookies/);
  // What browsers do send is taken: a port, localhost, a sandboxed frame's null, an extension's scheme.
  new AgentRouter(registry, { cors: { origins: ['https://app.example.com', 'http://localhost:3000', 'chrome-extension://abcdefgh'], credentials: true, maxAge: 0, allowHeaders: ['content-type'] } });
  new AgentRouter(registry, { cors: { origins: ['https://app.example.com', 'null'] } });
  new AgentRouter(registry, { cors: { origins: '*', allowHeaders: ['content-type, authorization', 'x-api-key', '*'] } });
  new AgentRouter(registry, { cors: { origins: (origin) => origin.endsWith('.example.com') } });
});

test('an AgentRouter prefix no request path can carry as it is (non-ASCII, a space, ?, #, %, an empty or dot segment) is refused, not served as 404s', () => {
  const registry = new AgentRegistry();
  for (const prefix of ['/ü', '/a b', '/agents?x', '/a#b', '/%2', '/100%', '/./a', '/a/..']) {
    assert.throws(() => new AgentRouter(registry, { prefix }), (error: unknown) => error instanceof TypeError && error.message.startsWith(`AgentRouter: prefix ${JSON.stringify(prefix)} is matched against request paths as they are sent`), prefix);
  }
  // Percent-encoded, or characters clients send as they are: these were served before, and still are.
  for (const [prefix, normal] of [['agents', '/agents'], ['/api/v1/', '/api/v1'], ['/.well-known/agents', '/.well-known/agents'], ['/', ''], ['/caf%C3%A9', '/caf%C3%A9'], ['/[x]', '/[x]'], ['//api', '//api']]) {
    assert.equal(new AgentRouter(registry, { prefix }).prefix, normal);
  }
});

test('the adapters refuse anything but an AgentRouter with the fix, not a TypeError from inside', () => {
  const registry = new AgentRegistry();
  for (const [name, adapt] of [['toExpress', toExpress], ['toKoa', toKoa], ['toFastify', toFastify]] as const) {
    for (const wrong of [registry, new Agent('a', { model: echoModel() }), null, undefined]) {
      assert.throws(() => adapt(wrong as never), { name: 'TypeError', message: `${name}: pass an AgentRouter, e.g. ${name}(new AgentRouter(registry))` });
    }
    adapt(new AgentRouter(registry));
  }
});

test('a router from another copy of the package (a dependency\'s own, npm link) is served by toExpress and toKoa; toFastify says what is wrong', async (t) => {
  // src/ copied elsewhere is a second copy of the package, as a nested node_modules holds (compiled or not, as this file is).
  const here = path.dirname(fileURLToPath(import.meta.url));
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-copy-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await cp(path.resolve(here, '../../src'), path.join(dir, 'src'), { recursive: true });
  const copy = await import(pathToFileURL(path.join(dir, 'src', `index${path.extname(fileURLToPath(import.meta.url))}`)).href);
  const router = new copy.AgentRouter(new copy.AgentRegistry());
  assert.ok(!(router instanceof AgentRouter), 'a copy really');
  assert.equal(typeof toExpress(router), 'function');
  assert.equal(typeof toKoa(router), 'function');
  assert.throws(() => toFastify(router), { name: 'TypeError', message: /^toFastify: this AgentRouter comes from another copy of agent-router/ });
});

test('Agent, the storages and HTTPTransport refuse a misspelt option too, naming the one meant: it would be dropped without a word', () => {
  const pool = { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release: () => {} }) };
  const cases: Array<[() => unknown, RegExp]> = [
    [() => new Agent('a', { model: echoModel(), sytem: 'Be brief.' } as never), /^Agent: unknown option "sytem"; did you mean system\?$/],
    [() => new FileStorage(os.tmpdir(), { fsnyc: false } as never), /^FileStorage: unknown option "fsnyc"; did you mean fsync\?$/],
    [() => postgresStorage(pool as never, { table_prefix: 'x_' } as never), /^postgresStorage: unknown option "table_prefix"; did you mean tablePrefix\?$/],
    [() => redisStorage({ sendCommand: async () => null } as never, { prefx: 'x:' } as never), /^redisStorage: unknown option "prefx"; did you mean prefix\?$/],
    [() => new HTTPTransport('http://127.0.0.1:1/agent', { timout: 5 } as never), /^HTTPTransport: unknown option "timout"; did you mean timeout\?$/],
    [() => openAIModel({ model: 'llama3.2', baseUrl: 'http://localhost:11434/v1' } as never), /^openAIModel: unknown option "baseUrl"; did you mean baseURL\?$/],
    [() => anthropicModel({ model: 'claude-haiku-4-5', apiKey: 'sk-ant-x', max_tokens: 100 } as never), /^anthropicModel: unknown option "max_tokens"; did you mean maxTokens\?$/],
  ];
  for (const [make, message] of cases) assert.throws(make, (error: unknown) => error instanceof TypeError && message.test(error.message));
  // A key Object.prototype has is unknown too, not taken for one of its members.
  assert.throws(() => new AgentRouter(new AgentRegistry(), { toString: 1 } as never), { name: 'TypeError', message: /^AgentRouter: unknown option "toString"/ });
  assert.throws(() => new Agent('a', { constructor: 1 } as never), { name: 'TypeError', message: /^Agent: unknown option "constructor"/ });
  // Their known options still pass, and an unknown one left undefined (a spread, an env-built object) is no setting.
  new Agent('a', { model: echoModel(), temperature: undefined } as never);
  new Agent('a', { model: echoModel(), system: 'Be brief.', storage: undefined, initialState: {}, lastMessages: 4 });
  new HTTPTransport('http://127.0.0.1:1/agent', { timeout: 5, maxConnections: 2, maxResponseSize: 10, headers: {}, fetch: undefined });
});

test('a config file uses the spec\'s snake_case names, plus port, host and data_dir', () => {
  const config = parseFileConfig(
    { idle_timeout: 30, max_agents: 100, enable_list_agents: true, shutdown_timeout: 2, keep_alive_timeout: 75, port: 9000, host: '0.0.0.0', data_dir: '/tmp/x' },
    'config file c.json',
  );
  assert.deepEqual(config, {
    server: { idleTimeout: 30, maxAgents: 100, enableListAgents: true, shutdownTimeout: 2, keepAliveTimeout: 75 },
    port: 9000,
    host: '0.0.0.0',
    dataDir: '/tmp/x',
  });
});

test('a config file may set router limits and CORS origins', () => {
  assert.deepEqual(parseFileConfig({ max_streams: 50, openapi: true, cors_origins: ['https://app.example.com'], body_limit: 2048 }, 'f').server, {
    maxStreams: 50,
    openapi: true,
    cors: { origins: ['https://app.example.com'] },
    bodyLimit: 2048,
  });
  assert.deepEqual(parseFileConfig({ cors_origins: '*' }, 'f').server, { cors: { origins: '*' } });
  assert.throws(() => parseFileConfig({ cors_origins: 'https://a.example' }, 'f'), { message: /cors_origins must be "\*" or a list of origins/ });
});

test('a config file error names the file and the key as written there', () => {
  assert.throws(() => parseFileConfig({ idleTimeout: 5 }, 'config file c.json'), { message: /config file c.json: unknown key "idleTimeout"; did you mean idle_timeout\?$/ });
  assert.throws(() => parseFileConfig({ max_agents: '10' }, 'config file c.json'), { message: /config file c.json: max_agents must be a whole number >= 1, got "10"/ });
  assert.throws(() => parseFileConfig({ port: 70000 }, 'config file c.json'), { message: /port must be a port number/ });
  assert.throws(() => parseFileConfig({ keep_alive_timeout: 80 , headers_timeout: 70 }, 'f'), { message: /headers_timeout \(70\) must be above keep_alive_timeout \(80\)/ });
  assert.throws(() => parseFileConfig([1], 'config file c.json'), { message: /must hold a JSON object/ });
});

test('a config key that Object.prototype has ("constructor", "__proto__") is an unknown key, named as written', () => {
  for (const key of ['constructor', '__proto__', 'toString']) {
    const data = JSON.parse(`{"${key}": 1}`) as unknown;
    assert.throws(() => parseFileConfig(data, 'config file c.json'), { name: 'TypeError', message: new RegExp(`^config file c.json: unknown key "${key}"; known keys: idle_timeout, `) }, key);
  }
  assert.throws(() => new AgentServer(new AgentRegistry(), { toString: 1 } as never), { message: /^AgentServer: unknown option "toString"; known options: / });
});

test('a config file saved with a byte order mark is read; one saved as UTF-16 is refused saying so', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-config-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const bom = path.join(dir, 'bom.json');
  await writeFile(bom, '\uFEFF{"max_agents": 5}');
  assert.deepEqual(await readConfigFile(bom), { server: { maxAgents: 5 } });
  const utf16 = path.join(dir, 'utf16.json');
  await writeFile(utf16, Buffer.from('\uFEFF{"max_agents": 5}', 'utf16le'));
  await assert.rejects(readConfigFile(utf16), { name: 'TypeError', message: `config file ${utf16} is saved as UTF-16 (as Windows PowerShell's > writes); save it as UTF-8` });
});

test('readConfigFile reads JSON, and says which file is missing or broken', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-config-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const good = path.join(dir, 'good.json');
  await writeFile(good, '{"max_agents": 5, "enable_list_agents": false}');
  assert.deepEqual(await readConfigFile(good), { server: { maxAgents: 5, enableListAgents: false } });
  const broken = path.join(dir, 'broken.json');
  await writeFile(broken, '{"max_agents": 5,}');
  await assert.rejects(readConfigFile(broken), { name: 'TypeError', message: new RegExp(`config file ${broken.replace(/[.\\]/g, '\\$&')} is not valid JSON`) });
  await assert.rejects(readConfigFile(path.join(dir, 'none.json')), { message: /cannot read config file .*none\.json: ENOENT/ });
  // A missing comma on line 3 of a longer file: the line and column, not only "at position 38".
  const comma = path.join(dir, 'comma.json');
  await writeFile(comma, '{\n  "max_agents": 5,\n  "idle_timeout": 60\n  "port": 8080\n}\n');
  await assert.rejects(readConfigFile(comma), { message: /is not valid JSON: .* \(line 4 column 3\)$/ });
});
