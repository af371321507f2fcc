// A page follows a turn with EventSource, as docs/guide/turns.md shows, in a real Chromium: the
// connection is cut mid-turn, and the browser's own reconnect (Last-Event-ID) gets each event once.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { launchChromium } from '../helpers/browser.ts';
import { listen } from '../helpers/listen.ts';
import { Steps, wordsRouter } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three', ' four', ' five'];

/** The guide's `follow` function, as the page is told to paste it. */
function guideSnippet(): string {
  const guide = readFileSync(path.join(process.cwd(), 'docs/guide/turns.md'), 'utf8');
  const block = /```js\n(\/\/ Follows a turn[\s\S]*?)```/.exec(guide);
  assert.ok(block, 'docs/guide/turns.md has the follow() block');
  return block[1] as string;
}

/**
 * `page` (at /page.html) and the router on one origin, as a page served with its API would be, a Chromium to
 * open it, and a turn of `bot` started with a plain stream; `onRejoin` sees each rejoin request before the router.
 */
async function pageAndTurn(t: TestContext, listener: RequestListener, page: string, onRejoin: (req: IncomingMessage, res: ServerResponse) => void) {
  const origin = await listen((req: IncomingMessage, res: ServerResponse) => {
    if (req.url === '/page.html') return res.writeHead(200, { 'content-type': 'text/html' }).end(page);
    if (req.url?.includes('/turns/') === true) onRejoin(req, res);
    listener(req, res);
  });
  t.after(() => origin.close());
  const browser = await launchChromium();
  t.after(() => browser.close());
  const started = await fetch(`${origin.url}/bot/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"go"}' });
  return { origin, browser, started, turnId: started.headers.get('turn-id') as string };
}

test('EventSource follows a turn through a cut connection: the browser reconnects with Last-Event-ID and gets each event once, then closes at done', async (t) => {
  const steps = new Steps();
  const listener = wordsRouter(WORDS, { onDisconnect: 'continue' }, steps).router.toRequestListener();
  const rejoins: Array<{ lastEventId: string | undefined; res: ServerResponse }> = [];
  const { origin, browser, started, turnId } = await pageAndTurn(t, listener, `<script>${guideSnippet()}</script>`, (req, res) => {
    rejoins.push({ lastEventId: req.headers['last-event-id'] as string | undefined, res });
  });
  void started.body?.cancel(); // the first client leaves; the turn goes on (onDisconnect: 'continue')

  const page = await browser.context.newPage();
  const texts: string[] = [];
  let sawTwo!: () => void;
  const two = new Promise<void>((resolve) => (sawTwo = resolve));
  await page.exposeFunction('onText', (text: string) => {
    texts.push(text);
    if (texts.length === 2) sawTwo();
  });
  await page.goto(`${origin.url}/page.html`);
  const closed = page.evaluate(
    ([turn]) =>
      new Promise<number>((resolve) => {
        const w = window as unknown as { follow: Function; onText: (text: string) => void };
        const source = w.follow('bot', turn, undefined, w.onText) as EventSource;
        source.addEventListener('done', () => setTimeout(() => resolve(source.readyState), 0));
      }),
    [turnId] as const,
  );
  steps.release(2);
  await two;
  // The network drops the page's connection mid-turn.
  rejoins[0]?.res.socket?.destroy();
  steps.release();
  assert.equal(await closed, 2, 'closed at done (CLOSED), not left to reconnect');
  assert.deepEqual(texts, WORDS, 'each word once, in order');
  assert.deepEqual(rejoins.map((r) => r.lastEventId), [undefined, `${turnId}:2`], 'the browser reconnected once, from the last id it got');

  // A page that already has the first word (from its own chat stream) follows from there: the ended turn's replay.
  const rest = await page.evaluate(
    ([turn]) =>
      new Promise<string[]>((resolve) => {
        const got: string[] = [];
        const w = window as unknown as { follow: Function };
        const source = w.follow('bot', turn, `${turn}:1`, (text: string) => got.push(text)) as EventSource;
        source.addEventListener('done', () => resolve(got));
      }),
    [turnId] as const,
  );
  assert.deepEqual(rest, WORDS.slice(1));
});

test('an EventSource left open after done reconnects once, gets 204 for the ended turn, and stops (CLOSED)', async (t) => {
  const listener = wordsRouter(WORDS).router.toRequestListener();
  const asked: Array<{ lastEventId: string | undefined; status?: number }> = [];
  const { origin, browser, started, turnId } = await pageAndTurn(t, listener, '<p>plain EventSource</p>', (req, res) => {
    const entry: { lastEventId: string | undefined; status?: number } = { lastEventId: req.headers['last-event-id'] as string | undefined };
    asked.push(entry);
    res.once('finish', () => (entry.status = res.statusCode));
  });
  await started.text();
  const page = await browser.context.newPage();
  await page.goto(`${origin.url}/page.html`);
  const seen = await page.evaluate(
    ([turn]) =>
      new Promise<{ texts: string[]; state: number }>((resolve) => {
        const texts: string[] = [];
        // No close() at done: the browser reconnects when the stream ends.
        const source = new EventSource(`/bot/turns/${turn}/events`);
        source.onmessage = (event) => texts.push(event.data);
        source.onerror = () => {
          if (source.readyState === EventSource.CLOSED) resolve({ texts, state: source.readyState });
        };
      }),
    [turnId] as const,
  );
  assert.deepEqual(seen, { texts: WORDS, state: 2 });
  assert.deepEqual(asked, [{ lastEventId: undefined, status: 200 }, { lastEventId: `${turnId}:${WORDS.length + 1}`, status: 204 }]);
});
