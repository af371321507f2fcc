/**
 * The benchmark suite: our router against a bare node:http server and the
 * frameworks, as ratios measured in one run. `npm run bench` (full, about
 * 12 minutes) or `npm run bench -- --quick` (every scenario briefly; the
 * test suite runs it so the benchmark never rots). BENCHMARKS.md explains
 * what runs, how, and what the numbers do not measure.
 *
 * Each contender is a child process pinned to CPU 0 (`taskset`); this
 * process pins itself to CPU 1 and generates the load (autocannon in-process,
 * raw sockets for latency and open streams). Contenders alternate (A B A B,
 * every round in a rotated order, each round in fresh processes) and the
 * tables report medians. A busy machine (1-minute load average over
 * 0.5 x cores) makes it refuse to run, unless --force (or --quick).
 */
import { accessSync, constants, writeFileSync } from 'node:fs';
import path from 'node:path';
import { compile, tsxRuntime } from './lib/build.ts';
import { currentLoad, inspectMachine, type Machine } from './lib/machine.ts';
import { renderScenario, type ScenarioResult } from './lib/report.ts';
import { parseSettings, USAGE, type ScenarioId, type Settings } from './lib/settings.ts';
import { agentsScenario } from './scenarios/agents.ts';
import type { Context } from './scenarios/common.ts';
import { latencyScenario } from './scenarios/latency.ts';
import { proxyScenario } from './scenarios/proxy.ts';
import { sseScenario } from './scenarios/sse.ts';
import { streamsScenario } from './scenarios/streams.ts';
import { throughputScenarios } from './scenarios/throughput.ts';

const root = path.resolve(import.meta.dirname, '../..');

/** Each runner produces the results of the scenarios it is listed with (chat and state share their processes). */
const RUNNERS: Array<[ScenarioId[], (context: Context, ids: ScenarioId[]) => Promise<ScenarioResult[]>]> = [
  [['chat', 'state'], (context, ids) => throughputScenarios(context, ids as Array<'chat' | 'state'>)],
  [['sse'], async (context) => [await sseScenario(context)]],
  [['latency'], async (context) => [await latencyScenario(context)]],
  [['streams'], async (context) => [await streamsScenario(context)]],
  [['agents'], async (context) => [await agentsScenario(context)]],
  [['proxy'], async (context) => [await proxyScenario(context)]],
];

function log(line: string): void {
  process.stderr.write(`${line}\n`);
}

function header(settings: Settings, machine: Machine, runtimeNote: string, loadAfter: number, forced: boolean): string {
  const mode = settings.quick
    ? '`--quick` (smoke run: tiny counts, numbers are not comparable to a full run)'
    : `full: ${settings.rounds} rounds, ${settings.seconds} s per contender per round after ${settings.warmup} s warm-up, ${settings.connections} connections`;
  const lines = [
    `- Date: ${new Date().toISOString()}`,
    `- Machine: ${machine.cores} CPUs (\`nproc\`), ${machine.model}; Node ${machine.node}; ${process.platform} ${process.arch}`,
    `- Mode: ${mode}`,
    `- 1-minute load average: ${machine.loadBefore.toFixed(2)} before, ${loadAfter.toFixed(2)} after (busy above ${machine.loadLimit.toFixed(2)})`,
    machine.pinned
      ? '- Pinning: contenders on CPU 0 (`taskset -a -cp 0`, once listening), load generator (this process: autocannon in-process, raw sockets) on CPU 1 (`taskset -a -cp 1`)'
      : '- Pinning: **none** (see warnings)',
    `- Contenders: ${runtimeNote}`,
  ];
  if (forced) lines.push(`- **Taken under load**: the load average (${machine.loadBefore.toFixed(2)}) was over the limit; run with --force. Other processes shared the CPUs: read the ratios, not the absolute numbers, and rerun on a quiet machine.`);
  for (const warning of machine.warnings) lines.push(`- Warning: ${warning}`);
  return lines.join('\n');
}

function goals(results: ScenarioResult[]): string {
  const lines = ['| Scenario | Contender | Goal |', '|---|---|---|'];
  for (const result of results) {
    for (const row of result.rows) {
      const goal = row.cells['goal'];
      if (typeof goal === 'string' && goal !== '') lines.push(`| ${result.title.replace(/ \(.*\)$/, '')} | ${row.contender} | ${goal} |`);
    }
  }
  return lines.join('\n');
}

/** Rows whose required cells hold no number: a contender that could not start, answered wrongly or failed. */
function unmeasured(result: ScenarioResult): string[] {
  const missing: string[] = [];
  for (const row of result.rows) {
    const absent = result.required.filter((key) => !(typeof row.cells[key] === 'number' && Number.isFinite(row.cells[key])));
    if (absent.length > 0) missing.push(`${row.contender} (${absent.join(', ')})`);
  }
  return missing;
}

async function main(): Promise<number> {
  let settings: Settings;
  try {
    if (process.argv.includes('--help')) {
      process.stdout.write(USAGE);
      return 0;
    }
    settings = parseSettings(process.argv.slice(2));
    // Written only at the end: a folder that is not there would otherwise fail the run after its 12 minutes.
    for (const [name, file] of [['json', settings.json], ['markdown', settings.markdown]] as const) {
      if (file === undefined) continue;
      try {
        accessSync(path.dirname(path.resolve(file)), constants.W_OK);
      } catch (error) {
        throw new TypeError(`bench: --${name}=${file}: cannot write there (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
      }
    }
  } catch (error) {
    log((error as Error).message);
    return 2;
  }
  const machine = inspectMachine();
  const busy = machine.loadBefore > machine.loadLimit;
  if (busy && !settings.force && !settings.quick) {
    log(
      `bench: refusing to run: the 1-minute load average is ${machine.loadBefore.toFixed(2)}, over ${machine.loadLimit.toFixed(2)} (0.5 x ${machine.cores} CPUs). ` +
        'Other processes would share the CPUs and skew the ratios. Wait for a quiet machine (`uptime`), or pass --force (the report then says it was taken under load).',
    );
    return 3;
  }
  if (busy) log(`bench: warning: load average ${machine.loadBefore.toFixed(2)} is over ${machine.loadLimit.toFixed(2)}; numbers will be noisy`);
  for (const warning of machine.warnings) log(`bench: warning: ${warning}`);
  const build = settings.runner === 'tsx' ? tsxRuntime(root, machine.pinned, 'run through tsx (--runner=tsx)') : compile(root, machine.pinned);
  log(`bench: ${build.note}`);
  // Ctrl-C or a kill skips the `finally` below: the compiled copy would stay in node_modules/.cache. (The
  // contenders end themselves when this process goes: see contenders/ipc.ts.)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      build.cleanup();
      process.exit(130);
    });
  }
  const context: Context = { settings, runtime: build.runtime, machine, log };
  const results: ScenarioResult[] = [];
  let failed = false;
  const started = Date.now();
  try {
    for (const [group, runner] of RUNNERS) {
      const ids = group.filter((id) => settings.only.has(id));
      if (ids.length === 0) continue;
      const scenarioStarted = Date.now();
      try {
        for (const result of await runner(context, ids)) {
          results.push(result);
          const missing = unmeasured(result);
          if (missing.length > 0) {
            failed = true;
            log(`bench: scenario ${result.id} has no numbers for ${missing.join('; ')}`);
          }
        }
        log(`bench: ${ids.join(' + ')} took ${((Date.now() - scenarioStarted) / 1000).toFixed(1)} s`);
      } catch (error) {
        failed = true;
        log(`bench: scenario ${ids.join(' + ')} failed: ${(error as Error).stack ?? String(error)}`);
      }
    }
  } finally {
    build.cleanup();
  }
  const loadAfter = currentLoad();
  const markdown = [
    '## Results',
    '',
    header(settings, machine, build.note, loadAfter, busy && !settings.quick),
    '',
    '### Goals',
    '',
    goals(results),
    '',
    ...results.flatMap((result) => [renderScenario(result), '']),
  ].join('\n');
  process.stdout.write(`${markdown}\n`);
  log(`bench: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  if (settings.markdown !== undefined) writeFileSync(settings.markdown, `${markdown}\n`);
  if (settings.json !== undefined) {
    const json = { settings: { ...settings, only: [...settings.only] }, machine, loadAfter, runtime: build.note, scenarios: results };
    writeFileSync(settings.json, `${JSON.stringify(json, null, 2)}\n`);
  }
  return failed ? 1 : 0;
}

process.exitCode = await main();
