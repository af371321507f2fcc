/**
 * Scenario 7: one proxy hop through HTTPTransport. A backend router serves
 * the agents; a second router maps every id to the backend through an
 * HTTPTransport. One keep-alive connection to each, requests alternating
 * direct / proxied one at a time; the added latency is the median of the
 * pairwise differences.
 */
import { Contender } from '../lib/contender.ts';
import { RawConnection, requestBytes, type Timing } from '../lib/raw-http.ts';
import { BURST_PREFIX, CHAT_MESSAGE, SSE_CHUNKS, SSE_MESSAGE } from '../lib/protocol.ts';
import type { Row, ScenarioResult } from '../lib/report.ts';
import { median, percentile } from '../lib/stats.ts';
import { verifyChat, verifyStream } from '../lib/verify.ts';
import { firstLine, type Context } from './common.ts';
import { streamRequest } from './latency.ts';

interface Pairs {
  direct: number[];
  proxied: number[];
  added: number[];
}

const emptyPairs = (): Pairs => ({ direct: [], proxied: [], added: [] });

async function pairs(samples: number, direct: RawConnection, proxied: RawConnection, directRequest: Buffer, proxiedRequest: Buffer, pick: (timing: Timing) => number, into: Pairs): Promise<void> {
  for (let i = 0; i < samples; i++) {
    // Alternate which goes first, so neither always runs right after the other.
    const first = i % 2 === 0;
    const a = first ? await direct.request(directRequest) : await proxied.request(proxiedRequest);
    const b = first ? await proxied.request(proxiedRequest) : await direct.request(directRequest);
    const [d, p] = first ? [a, b] : [b, a];
    if (d.status !== 200 || p.status !== 200) throw new Error(`status ${d.status} direct, ${p.status} proxied: ${p.body.slice(0, 160)}`);
    into.direct.push(pick(d));
    into.proxied.push(pick(p));
    into.added.push(pick(p) - pick(d));
  }
}

export async function proxyScenario(context: Context): Promise<ScenarioResult> {
  const { rounds, samples } = context.settings;
  context.log(`proxy: ${rounds} rounds x ${samples} pairs (JSON chat, and SSE first chunk)`);
  const json = emptyPairs();
  const sse = emptyPairs();
  let error: string | undefined;
  for (let round = 0; round < rounds && error === undefined; round++) {
    let backend: Contender | undefined;
    let proxy: Contender | undefined;
    const connections: RawConnection[] = [];
    try {
      backend = await Contender.start(context.runtime, 'router');
      proxy = await Contender.start(context.runtime, 'proxy', { args: [`http://127.0.0.1:${backend.port}`] });
      await verifyChat(proxy, 'verify-1');
      await verifyStream(proxy, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS);
      const direct = await RawConnection.connect(backend.port);
      const proxied = await RawConnection.connect(proxy.port);
      connections.push(direct, proxied);
      const body = JSON.stringify({ message: CHAT_MESSAGE });
      const chat = (c: Contender): Buffer => requestBytes('POST', `${c.prefix}/proxy-chat/chat`, c.port, body);
      const warm = emptyPairs();
      await pairs(Math.max(10, samples / 5), direct, proxied, chat(backend), chat(proxy), (t) => t.total, warm);
      await pairs(samples, direct, proxied, chat(backend), chat(proxy), (t) => t.total, json);
      const stream = (c: Contender): Buffer => streamRequest(c, `${BURST_PREFIX}proxy`);
      await pairs(Math.max(10, samples / 5), direct, proxied, stream(backend), stream(proxy), (t) => t.firstChunk, warm);
      await pairs(samples, direct, proxied, stream(backend), stream(proxy), (t) => t.firstChunk, sse);
    } catch (caught) {
      error = `failed: ${firstLine(caught)}`;
      context.log(`  proxy: ${error}`);
    } finally {
      for (const connection of connections) connection.close();
      await proxy?.stop();
      await backend?.stop();
    }
  }
  const row = (name: string, data: Pairs): Row => ({
    contender: name,
    cells: error !== undefined && data.direct.length === 0
      ? { direct50: error }
      : {
          direct50: percentile(data.direct, 50),
          direct99: percentile(data.direct, 99),
          proxied50: percentile(data.proxied, 50),
          proxied99: percentile(data.proxied, 99),
          added50: median(data.added),
        },
  });
  return {
    id: 'proxy',
    title: '7. One proxy hop through HTTPTransport, against direct',
    columns: [
      { key: 'direct50', label: 'direct p50', format: 'ms' },
      { key: 'direct99', label: 'direct p99', format: 'ms' },
      { key: 'proxied50', label: 'proxied p50', format: 'ms' },
      { key: 'proxied99', label: 'proxied p99', format: 'ms' },
      { key: 'added50', label: 'added p50', format: 'ms' },
    ],
    rows: [row('JSON chat, whole response', json), row(`SSE ${SSE_CHUNKS}-chunk stream, first chunk`, sse)],
    notes: [
      // Its rounds stop at the first failure: the numbers above are then of fewer pairs than this note's next line says.
      ...(error === undefined ? [] : [`**${error}** after ${json.direct.length} JSON and ${sse.direct.length} SSE pairs; the numbers above are of those.`]),
      `${samples} pairs per round x ${rounds} rounds on one keep-alive connection each (the proxy keeps its own to the backend through fetch); backend and proxy are separate processes, both on CPU 0, so a proxied request also pays the second process's share of that CPU. Added p50 is the median of (proxied - direct) over pairs.`,
    ],
    required: ['direct50', 'proxied50', 'added50'],
  };
}
