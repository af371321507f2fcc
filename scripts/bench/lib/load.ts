/**
 * Throughput measurement with autocannon, run in this (CPU 1) process.
 * Each connection uses its own agent ids, so no two connections queue on
 * one agent (turns on one agent run one at a time by design).
 */
import type { Contender } from './contender.ts';
import { busyBetween, cpuTimes } from './cpus.ts';
import { now } from './stats.ts';

interface AutocannonResult {
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  mismatches: number;
  requests: { total: number };
  latency: { p50: number; p99: number };
  '2xx': number;
}
interface AutocannonClient {
  setRequests(requests: Array<{ method: string; path: string; headers?: Record<string, string>; body?: string }>): void;
}
type Autocannon = (options: Record<string, unknown>) => Promise<AutocannonResult>;

let autocannon: Autocannon | undefined;

async function load(): Promise<Autocannon> {
  // autocannon ships no types (and the library must not depend on it).
  autocannon ??= ((await import('autocannon' as string)) as { default: Autocannon }).default;
  return autocannon;
}

export interface LoadShape {
  method: 'GET' | 'POST';
  /** The path below the contender's base for an agent id, e.g. `(id) => `/${id}/chat``. */
  path: (id: string) => string;
  /** Agent id `k` of connection `c`. */
  id: (connection: number, k: number) => string;
  body?: string | undefined;
  accept?: string | undefined;
}

export interface LoadResult {
  /** Successful (2xx) responses per second. */
  rate: number;
  /** Successful (2xx) responses in all. */
  requests: number;
  /**
   * Microseconds of the contender's CPU time per successful response. Unlike
   * req/s it barely moves when other processes steal the CPU, so its ratios
   * are the steadier comparison on a shared machine.
   */
  cpuPerRequest: number;
  /** Responses that were not 2xx, plus connection errors and timeouts. */
  failures: number;
  latencyP50: number;
  latencyP99: number;
  /** Share of one CPU the contender used during the run (1 = saturated). */
  serverCpu: number;
  /** Share of one CPU this process (the load generator) used. */
  clientCpu: number;
  /** Busy share of CPU 0 and CPU 1 (by anyone, kernel network work included) during the run. */
  cpu0Busy: number;
  cpu1Busy: number;
}

/** Ids each connection cycles through. */
const IDS_PER_CONNECTION = 16;

export async function runLoad(contender: Contender, shape: LoadShape, seconds: number, connections: number): Promise<LoadResult> {
  const run = await load();
  let next = 0;
  const headers: Record<string, string> = {};
  if (shape.body !== undefined) headers['content-type'] = 'application/json';
  if (shape.accept !== undefined) headers['accept'] = shape.accept;
  const setupClient = (client: AutocannonClient): void => {
    const connection = next++;
    const requests = [];
    for (let k = 0; k < IDS_PER_CONNECTION; k++) {
      const path = contender.prefix + shape.path(shape.id(connection, k));
      requests.push(shape.body === undefined ? { method: shape.method, path, headers } : { method: shape.method, path, headers, body: shape.body });
    }
    client.setRequests(requests);
  };
  const serverBefore = await contender.cpu();
  const clientBefore = process.cpuUsage();
  const cpusBefore = cpuTimes();
  const started = now();
  const result = await run({
    url: `http://127.0.0.1:${contender.port}`,
    connections,
    duration: seconds,
    method: shape.method,
    setupClient,
    timeout: 10,
    // autocannon stops on a sampling tick: the default of 1 s would stretch a 0.3 s run to 1 s.
    sampleInt: 100,
  });
  const wall = (now() - started) * 1000;
  const client = process.cpuUsage(clientBefore);
  const cpusAfter = cpuTimes();
  const serverAfter = await contender.cpu();
  return {
    rate: result['2xx'] / result.duration,
    requests: result['2xx'],
    cpuPerRequest: (serverAfter - serverBefore) / Math.max(1, result['2xx']),
    failures: result.non2xx + result.errors + result.timeouts,
    latencyP50: result.latency.p50,
    latencyP99: result.latency.p99,
    serverCpu: (serverAfter - serverBefore) / wall,
    clientCpu: (client.user + client.system) / wall,
    cpu0Busy: busyBetween(cpusBefore, cpusAfter, 0),
    cpu1Busy: busyBetween(cpusBefore, cpusAfter, 1),
  };
}
