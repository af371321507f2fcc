import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';
import { listen, type Listening } from './listen.ts';

/** Debian's Chromium (`apt-get install chromium`); playwright-core downloads no browser of its own. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Without the background-networking flags Chromium reaches for Google's
 * services at start, and on a closed network its own connections are then
 * refused; QUIC and the GPU are off for the same kind of reason.
 */
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

export interface Chromium {
  context: BrowserContext;
  /** Closes the browser (every page and process) and removes its profile. */
  close: () => Promise<void>;
}

/** Launches headless Chromium on a fresh, empty profile. */
export async function launchChromium(): Promise<Chromium> {
  const profile = await mkdtemp(path.join(os.tmpdir(), 'agent-router-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, timeout: 30_000 });
  } catch (error) {
    await rm(profile, { recursive: true, force: true });
    throw new Error(`Chromium did not start from ${CHROMIUM} (install it with: apt-get install -y chromium)`, { cause: error });
  }
  context.setDefaultTimeout(10_000);
  return {
    context,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/**
 * What a web chat page does with the router, as plain browser JavaScript:
 * `fetch`, `response.body.getReader()`, `AbortController`. Served as the
 * page's own script, so `page.evaluate` calls only these functions (tsx
 * rewrites named functions inside an evaluated callback with a helper the
 * page does not have).
 */
const PAGE_SCRIPT = String.raw`
// Every answer as the page sees it: status, body text and the response headers CORS lets it read.
window.send = async (url, init) => {
  try {
    const res = await fetch(url, init);
    return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
  } catch (error) {
    return { error: error.name, message: error.message };
  }
};

// Reads a chat stream chunk by chunk, telling the test (window.chunkSeen) what arrived so far;
// aborts once the text holds abortAfter, if given.
window.readStream = async (url, body, headers, abortAfter) => {
  const controller = new AbortController();
  let text = '';
  let status;
  try {
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: controller.signal });
    status = res.status;
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
      await window.chunkSeen(text);
      if (abortAfter !== undefined && text.includes(abortAfter)) controller.abort();
    }
    return { status, contentType: res.headers.get('content-type'), text };
  } catch (error) {
    return { status, text, error: error.name };
  }
};
`;

export const PAGE_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>chat</title></head>
<body><script>${PAGE_SCRIPT}</script></body></html>
`;

/** Serves the chat page (at every path) on its own origin: 127.0.0.1, port 0. */
export function servePage(): Promise<Listening> {
  return listen((req, res) => {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(PAGE_HTML);
  });
}

/** An answer as the page saw it, or the error its fetch rejected with. */
export type PageReply =
  | { status: number; headers: Record<string, string>; text: string; error?: undefined }
  | { error: string; message: string; status?: undefined };

/** A stream as the page read it: the raw SSE text, and the error that ended the reading, if any. */
export interface PageStream {
  status: number | undefined;
  contentType?: string | null;
  text: string;
  error?: string;
}

/** The functions PAGE_SCRIPT puts on `window`. */
export interface PageWindow {
  send(url: string, init: RequestInit): Promise<PageReply>;
  readStream(url: string, body: unknown, headers: Record<string, string>, abortAfter?: string): Promise<PageStream>;
}
