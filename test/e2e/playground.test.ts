// The playground page (AgentServer's `playground`) used as a person would, in a real Chromium:
// type, send, watch the reply arrive in pieces, see tool calls, call an action, read the state, see a 4xx.
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { after, before, test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { demoRegistry } from '../../src/cli/demo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentServer, type ServingAgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { launchChromium, type Chromium } from '../helpers/browser.ts';

let browser: Chromium;
let server: ServingAgentServer;
let release = (): void => {};
const held = new Promise<void>((resolve) => (release = resolve));

class SlowAgent extends Agent {
  constructor(id: string) {
    super(id, {
      model: scriptedModel(async function* () {
        yield 'The first piece';
        await held;
        yield ', then the rest.';
      }),
    });
  }
}

/** Its transfer waits for a person: step 1 calls it, step 2 says what the tool answered. */
class BankAgent extends Agent {
  static override tools = {
    transfer: {
      description: 'Moves money',
      parameters: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] },
      approval: true,
    },
  };
  constructor(id: string) {
    super(id, {
      model: scriptedModel((request) => {
        const last = request.messages.at(-1);
        if (last?.role === 'tool') return `Transfer done: ${last.content}`;
        return { text: 'Let me move that.', toolCalls: [{ id: 'tx1', name: 'transfer', arguments: { amount: 500 } }] };
      }),
    });
  }
  transfer({ amount }: { amount: number }) {
    return { moved: amount };
  }
}

before(async () => {
  const registry = demoRegistry({ storage: new MemoryStorage() });
  registry.register('slow-.*', SlowAgent);
  registry.register('bank-.*', BankAgent);
  const authorize = (req: { headers: Record<string, unknown> }): boolean => req.headers['authorization'] !== 'Bearer wrong';
  server = await new AgentServer(registry, { playground: true, enableListAgents: true, authorize, logger: { error: () => {} } }).serve(0);
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

test('the playground is off by default, a GET-only page with a strict CSP when on', async () => {
  const off = new AgentServer(demoRegistry({ storage: new MemoryStorage() }));
  const { url } = await off.serve(0);
  assert.equal((await fetch(`${url}/playground`)).status, 404);
  await off.close();
  const res = await fetch(`${server.url}/playground`);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
  const csp = res.headers.get('content-security-policy') ?? '';
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/=]+'(;|$)/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
  const html = await res.text();
  assert.doesNotMatch(html, /\b(src|href)=["']?(https?:)?\/\//, 'no external asset');
  const refused = await fetch(`${server.url}/playground`, { method: 'POST' });
  assert.equal(refused.status, 405);
  assert.equal(refused.headers.get('allow'), 'GET, HEAD');
  const head = await fetch(`${server.url}/playground/?agent=x`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(html)));
  assert.equal((await fetch(`${server.url}/playgroundx`)).status, 404);
});

test('a person chats (the reply arrives in pieces, tool calls shown), calls an action, reads state, sees a 4xx', async () => {
  const page = await browser.context.newPage();
  const violations: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy|Refused/i.test(message.text())) violations.push(message.text());
  });
  page.on('pageerror', (error) => violations.push(String(error)));
  await page.setViewportSize({ width: 1200, height: 860 });
  await page.goto(`${server.url}/playground`);

  // A reply that streams: the first piece shows while the turn still runs.
  await page.fill('#agent', 'slow-1');
  await page.fill('#message', 'Tell me something');
  await page.press('#message', 'Enter');
  await page.locator('.msg.assistant', { hasText: 'The first piece' }).waitFor();
  assert.equal(await page.locator('.msg.assistant').first().textContent(), 'The first piece');
  assert.equal(await page.locator('#send').isDisabled(), true, 'still streaming');
  release();
  await page.locator('.msg.assistant', { hasText: 'The first piece, then the rest.' }).waitFor();
  await page.locator('#send:not([disabled])').waitFor();
  assert.match(await page.locator('#events').textContent() ?? '', /turn\.started.*text\.delta.*turn\.finished/s);

  // Tool calls: the calculator's call and result appear between the texts.
  await page.fill('#agent', 'calc-1');
  await page.dispatchEvent('#agent', 'change');
  await page.fill('#message', 'What is 6*7?');
  await page.click('#send');
  await page.locator('.tool', { hasText: 'calculate -> 42' }).waitFor();
  await page.locator('.msg.assistant', { hasText: 'The answer is 42.' }).waitFor();

  // An action changes the state, and the state panel shows it.
  await page.fill('#agent', 'counter-1');
  await page.dispatchEvent('#agent', 'change');
  await page.fill('#method', 'increment');
  await page.fill('#params', '{"by": 5}');
  await page.click('#invoke');
  await page.locator('#result', { hasText: '5' }).waitFor();
  await page.locator('#state', { hasText: '"count": 5' }).waitFor();

  // A 4xx as the API gives it: an unknown action, then a token the authorize hook refuses.
  await page.fill('#method', 'explode');
  await page.click('#invoke');
  await page.locator('#error.shown', { hasText: 'HTTP 4' }).waitFor();
  const unknown = await page.locator('#error').textContent();
  assert.match(unknown ?? '', /HTTP 40\d \w+: /);
  await page.fill('#token', 'wrong');
  await page.click('#refresh');
  await page.fill('#message', 'hello');
  await page.click('#send');
  await page.locator('#error.shown', { hasText: 'HTTP 403' }).waitFor();

  // A finished chat to look at.
  await page.fill('#token', '');
  await page.fill('#agent', 'calc-1');
  await page.fill('#message', 'What is 1/0?');
  await page.click('#send');
  await page.locator('.tool.error', { hasText: 'division_by_zero' }).waitFor();
  await page.locator('#send:not([disabled])').waitFor();
  await page.click('#refresh');
  await mkdir('.build', { recursive: true });
  await page.screenshot({ path: '.build/playground.png', fullPage: true });
  assert.deepEqual(violations, []);
  await page.close();
});

test('a person approves a tool call the turn paused on, then refuses one, and sees the turn go on', async () => {
  const page = await browser.context.newPage();
  const violations: string[] = [];
  page.on('console', (message) => {
    if (/Content Security Policy|Refused/i.test(message.text())) violations.push(message.text());
  });
  page.on('pageerror', (error) => violations.push(String(error)));
  await page.setViewportSize({ width: 1200, height: 860 });
  await page.goto(`${server.url}/playground`);
  await page.fill('#agent', 'bank-1');
  await page.dispatchEvent('#agent', 'change');
  await page.fill('#message', 'Send 500 to Bob');
  await page.click('#send');
  const pending = page.locator('.tool.pending', { hasText: 'transfer({"amount":500}) needs approval' });
  await pending.waitFor();
  await page.locator('#send:not([disabled])').waitFor();
  assert.match(await page.locator('#events').textContent() ?? '', /tool\.approval_required.*turn\.paused/s);
  assert.match(await page.locator('#turn').textContent() ?? '', /paused/);
  await mkdir('.build', { recursive: true });
  await page.screenshot({ path: '.build/playground-approval.png', fullPage: true });
  await pending.locator('button.approve').click();
  await page.locator('.tool', { hasText: 'transfer -> {"moved":500}' }).waitFor();
  await page.locator('.msg.assistant', { hasText: 'Transfer done: {"moved":500}' }).waitFor();
  await page.locator('#send:not([disabled])').waitFor();
  assert.equal(await page.locator('.decide').count(), 0);
  assert.match(await page.locator('#events').textContent() ?? '', /turn\.started.*tool\.result.*turn\.finished/s);

  // A refusal, with a reason: the model hears it as the tool's error.
  await page.fill('#message', 'Again');
  await page.click('#send');
  await page.locator('.tool.pending button.refuse').waitFor();
  await page.fill('.tool.pending .decide input', 'not today');
  await page.click('.tool.pending button.refuse');
  await page.locator('.tool.error', { hasText: 'tool_refused' }).waitFor();
  await page.locator('.msg.assistant', { hasText: 'not today' }).waitFor();
  await page.locator('#send:not([disabled])').waitFor();
  await page.screenshot({ path: '.build/playground-approved.png', fullPage: true });
  assert.deepEqual(violations, []);
  await page.close();
});
