import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import * as library from '../../src/index.ts';

const root = process.cwd();

/** The public surface: changing it is a decision, so it is spelled out here. */
const RUNTIME_EXPORTS = [
  'Agent',
  'AgentNotFoundError',
  'AgentPool',
  'AgentRegistry',
  'AgentRouter',
  'AgentRouterError',
  'AgentServer',
  'FileStorage',
  'HTTPTransport',
  'LockLostError',
  'ModelProviderError',
  'MemoryStorage',
  'StorageUnavailableError',
  'UpstreamError',
  'VersionConflictError',
  'createSSEParser',
  'echoModel',
  'isAgentRouterError',
  'continueListener',
  'isTransport',
  'modelFromEnv',
  'openAIModel',
  'postgresStorage',
  'postgresStorageDDL',
  'redisStorage',
  'anthropicModel',
  'readConfigFile',
  'readSSE',
  'scriptedModel',
];

test('src/index.ts exports exactly the public surface', () => {
  assert.deepEqual(Object.keys(library).sort(), [...RUNTIME_EXPORTS].sort());
});

test('src/index.ts holds named re-exports only', () => {
  const source = readFileSync(path.join(root, 'src/index.ts'), 'utf8');
  for (const line of source.split('\n')) {
    if (line.trim() === '' || line.startsWith('//')) continue;
    assert.match(line, /^export (type )?\{ [^}]+ \} from '\.\/[\w/-]+\.ts';$/, line);
  }
});

test('package.json has no runtime dependencies', () => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  assert.equal(pkg.dependencies, undefined);
  assert.equal(pkg.peerDependencies, undefined);
  assert.equal(pkg.optionalDependencies, undefined);
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.engines.node, '^20.19.0 || >=22.12.0', 'the versions whose require() loads ES modules');
  // npm runs these when the published package is installed, and a reviewer where dependencies are forbidden flags them.
  for (const script of ['preinstall', 'install', 'postinstall']) assert.equal(pkg.scripts[script], undefined, script);
  // Runs only on installs from a git URL or a folder, and on npm pack: it builds dist/ there.
  assert.equal(pkg.scripts.prepare, 'node scripts/prepare.mjs');
  // Emptied before tsc writes it: a file left from a source since removed would ship.
  assert.match(pkg.scripts.build, /^node -e "require\('node:fs'\)\.rmSync\('dist', \{recursive: true, force: true\}\)" && tsc -p scripts\/tsconfig\.build\.json$/);
});

test('every subpath export has its types under typesVersions too, for TypeScript\'s legacy node10 resolution', () => {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const subpaths = Object.entries(pkg.exports as Record<string, { types?: string }>).filter(([key, value]) => key !== '.' && value.types !== undefined);
  assert.ok(subpaths.length >= 3);
  for (const [key, value] of subpaths) assert.deepEqual(pkg.typesVersions['*'][key.slice(2)], [value.types], key);
});

/** A consumer's strict TypeScript project: skipLibCheck off (TypeScript's default), so every published .d.ts is checked. */
const CONSUMER = `import http2 from 'node:http2';
import { Agent, AgentRegistry, AgentRouter, AgentServer, HTTPTransport, echoModel } from 'agent-router';
import { toExpress } from 'agent-router/express';
import { toKoa } from 'agent-router/koa';
import { toFastify } from 'agent-router/fastify';
class Counter extends Agent<{ count: number }> {}
const registry = new AgentRegistry();
registry.register('c-.*', Counter);
registry.register('r-.*', new HTTPTransport('http://127.0.0.1:1/agent'));
const router = new AgentRouter(registry);
void [toExpress(router), toKoa(router), toFastify(router), new AgentServer(new Counter('x', { model: echoModel() }))];
// Both listeners serve node:http2's compatibility API, and say so in their types.
void [http2.createSecureServer({ allowHTTP1: true }, router.toRequestListener()), http2.createSecureServer({ allowHTTP1: true }, new AgentServer(registry).listener)];
`;

test('the built library imports nothing but node: modules and its own files, and its types compile in a strict project without skipLibCheck', () => {
  const project = mkdtempSync(path.join(tmpdir(), 'agent-router-dist-'));
  const out = path.join(project, 'node_modules/agent-router/dist');
  try {
    execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', 'scripts/tsconfig.build.json', '--outDir', out], { cwd: root });
    const files = readdirSync(out, { recursive: true }).map(String).filter((f) => f.endsWith('.js'));
    assert.ok(files.includes('index.js'));
    const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
    const targets: string[] = [pkg.main, pkg.types, ...Object.values(pkg.bin as Record<string, string>)];
    for (const entry of Object.values(pkg.exports as Record<string, string | Record<string, string>>)) {
      if (typeof entry === 'object') targets.push(...Object.values(entry));
    }
    for (const target of targets) {
      // bin without "./": npm publish warns that it "was invalid and removed" (it normalizes it, but says so).
      const relative = target.replace(/^\.\//, '');
      assert.ok(relative.startsWith('dist/'), `${target} is under dist/`);
      assert.ok(existsSync(path.join(out, relative.slice('dist/'.length))), `package.json points at ${target}, which the build emits`);
    }
    for (const file of files) {
      const code = readFileSync(path.join(out, file), 'utf8');
      const specifiers = [...code.matchAll(/^\s*(?:import|export)\b[^'"*]*?from\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]|[=(\s]import\(\s*['"]([^'"]+)['"]\s*\)/gm)]
        .map((m) => m[1] ?? m[2] ?? m[3] ?? '');
      for (const specifier of specifiers) {
        assert.ok(specifier.startsWith('node:') || specifier.startsWith('./') || specifier.startsWith('../'), `${file} imports ${specifier}`);
        assert.ok(!specifier.endsWith('.ts'), `${file} imports ${specifier} (a .ts extension survived the build)`);
      }
    }

    // stripInternal drops what is tagged @internal: a member left behind that names it breaks every consumer.
    copyFileSync(path.join(root, 'package.json'), path.join(project, 'node_modules/agent-router/package.json'));
    writeFileSync(path.join(project, 'package.json'), '{"type": "module"}');
    writeFileSync(path.join(project, 'use.ts'), CONSUMER);
    const compilerOptions = {
      strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true,
      skipLibCheck: false, types: ['node'], typeRoots: [path.join(root, 'node_modules/@types')],
    };
    writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions, include: ['use.ts'] }));
    try {
      execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: project, encoding: 'utf8' });
    } catch (error) {
      assert.fail(`the published types do not compile:\n${(error as { stdout?: string }).stdout ?? String(error)}`);
    }
  } finally {
    rmSync(project, { recursive: true, force: true });
  }
});
