// The ai package's Chat with DefaultChatTransport, bundled by Bun and run in Chromium, against ?stream=ui:
// what a React app's useChat does in a browser.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { UIMessage } from 'ai';
import { demoRegistry } from '../../src/cli/demo.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { launchChromium } from '../helpers/browser.ts';
import { listen } from '../helpers/listen.ts';

type ChatOnce = (api: string, text: string) => Promise<{ status: string; error: string | undefined; messages: UIMessage[] }>;

test("Chromium: the ai package's Chat reads an agent's UI stream, text and tool parts", async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-ai-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const bundle = path.join(dir, 'ai.js');
  const built = spawnSync(path.join(process.cwd(), 'node_modules/.bin/bun'), ['build', 'test/helpers/ai-browser-entry.ts', '--target', 'browser', '--outfile', bundle], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(built.status, 0, built.stderr);
  const script = await readFile(bundle);
  const router = new AgentRouter(demoRegistry({ storage: new MemoryStorage() }), { prefix: '/agent' });
  const handle = router.toRequestListener();
  const { url, close } = await listen((req, res) => {
    if (req.url === '/ai.js') return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    if (req.url === '/') return void res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><script src="/ai.js"></script>');
    handle(req, res);
  });
  t.after(close);
  const browser = await launchChromium();
  t.after(() => browser.close());
  const page = await browser.context.newPage();
  await page.goto(url);
  await page.waitForFunction(() => typeof (window as unknown as { chatOnce?: unknown }).chatOnce === 'function');
  const run = (api: string, text: string) => page.evaluate(([a, b]) => (window as unknown as { chatOnce: ChatOnce }).chatOnce(a as string, b as string), [api, text]);

  const calc = await run('/agent/calc-1/chat?stream=ui', 'What is 6*7?');
  assert.equal(calc.status, 'ready', calc.error);
  const reply = calc.messages[1] as UIMessage;
  const tool = reply.parts.find((p) => p.type === 'dynamic-tool') as { toolName: string; state: string; output: unknown };
  assert.deepEqual([tool.toolName, tool.state, tool.output], ['calculate', 'output-available', 42]);
  assert.equal(reply.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text).join(''), 'Let me calculate that. The answer is 42.');

  const refused = await run('/agent/calc-1/chat?stream=bogus', 'hi');
  assert.equal(refused.status, 'error');
  assert.match(refused.error ?? '', /bad_query|stream must be/);
});
