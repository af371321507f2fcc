/** Command-line flags of `npm run bench`, and the two presets (full, --quick). */

export const SCENARIOS = ['chat', 'state', 'sse', 'latency', 'streams', 'agents', 'proxy'] as const;
export type ScenarioId = (typeof SCENARIOS)[number];

export interface Settings {
  quick: boolean;
  /** Run even when the machine is busy (the report says so). */
  force: boolean;
  only: ReadonlySet<ScenarioId>;
  /** Rounds of A B C ... per scenario; medians are over rounds. */
  rounds: number;
  /** Seconds of load per contender per round (throughput scenarios). */
  seconds: number;
  /** Seconds of unmeasured load first (JIT warm-up), per contender per round. */
  warmup: number;
  /** Concurrent connections of the load generator. */
  connections: number;
  /** Sequential requests per contender per round (first-byte and proxy latency). */
  samples: number;
  /** Open streams of scenario 5. */
  streams: number;
  /** Seconds the open streams are held while measured. */
  hold: number;
  /** Probe requests while the streams are open. */
  probes: number;
  /** Agents driven through the pool in scenario 6. */
  agents: number;
  runner: 'build' | 'tsx';
  json: string | undefined;
  markdown: string | undefined;
}

const FULL = { rounds: 5, seconds: 3, warmup: 1, connections: 32, samples: 1000, streams: 10_000, hold: 5, probes: 200, agents: 10_000 };
const QUICK = { rounds: 1, seconds: 0.2, warmup: 0.1, connections: 8, samples: 30, streams: 100, hold: 1, probes: 10, agents: 200 };

export const USAGE = `Usage: npm run bench -- [options]

  --quick            every scenario briefly, small counts (seconds in total); never refuses to run
  --force            run even if the 1-minute load average is over 0.5 x cores (the report says so)
  --only=a,b         scenarios: ${SCENARIOS.join(', ')} (or their numbers 1-7)
  --rounds=N         rounds of A B A B per scenario (default ${FULL.rounds}; quick ${QUICK.rounds})
  --seconds=S        seconds of load per contender per round (default ${FULL.seconds})
  --warmup=S         unmeasured seconds before each (default ${FULL.warmup})
  --connections=N    load generator connections (default ${FULL.connections})
  --samples=N        sequential requests per contender per round, latency scenarios (default ${FULL.samples})
  --streams=N        open streams in scenario 5 (default ${FULL.streams})
  --hold=S           seconds the open streams are held and measured (default ${FULL.hold})
  --probes=N         probe streams while they are open (default ${FULL.probes})
  --agents=N         agents in scenario 6 (default ${FULL.agents})
  --runner=build|tsx contenders as tsc output (default) or through tsx
  --json=FILE        also write the results as JSON
  --markdown=FILE    also write the report as markdown
`;

export function parseSettings(argv: readonly string[]): Settings {
  const flags = new Map<string, string>();
  for (const arg of argv) {
    if (!arg.startsWith('--')) throw new TypeError(`bench: unexpected argument ${JSON.stringify(arg)}\n\n${USAGE}`);
    const equals = arg.indexOf('=');
    flags.set(equals === -1 ? arg.slice(2) : arg.slice(2, equals), equals === -1 ? '' : arg.slice(equals + 1));
  }
  const quick = flags.has('quick');
  const preset = quick ? QUICK : FULL;
  const number = (name: keyof typeof FULL): number => {
    const raw = flags.get(name);
    flags.delete(name);
    if (raw === undefined) return preset[name];
    const value = Number(raw);
    if (!Number.isFinite(value) || value <= 0) throw new TypeError(`bench: --${name} must be a positive number, got ${JSON.stringify(raw)}`);
    return value;
  };
  // Counts are rounded: checked after rounding, so --rounds=0.4 is refused instead of running no round at all.
  const count = (name: keyof typeof FULL): number => {
    const raw = flags.get(name);
    const value = Math.round(number(name));
    if (value < 1) throw new TypeError(`bench: --${name} must be a whole number above 0, got ${JSON.stringify(raw)}`);
    return value;
  };
  // A value the bench would otherwise drop without a word: --runner=tsc ran the default, --json wrote nothing.
  const runner = flags.get('runner') ?? 'build';
  if (runner !== 'build' && runner !== 'tsx') throw new TypeError(`bench: --runner takes build or tsx, got ${JSON.stringify(runner)}\n\n${USAGE}`);
  const file = (name: 'json' | 'markdown'): string | undefined => {
    const value = flags.get(name);
    if (value === '') throw new TypeError(`bench: --${name} needs a file, e.g. --${name}=out.${name === 'json' ? 'json' : 'md'}\n\n${USAGE}`);
    return value;
  };
  const settings: Settings = {
    quick,
    force: flags.has('force'),
    only: parseOnly(flags.get('only')),
    rounds: count('rounds'),
    seconds: number('seconds'),
    warmup: number('warmup'),
    connections: count('connections'),
    samples: count('samples'),
    streams: count('streams'),
    hold: number('hold'),
    probes: count('probes'),
    agents: count('agents'),
    runner,
    json: file('json'),
    markdown: file('markdown'),
  };
  for (const known of ['quick', 'force', 'only', 'runner', 'json', 'markdown', 'help']) flags.delete(known);
  if (flags.size > 0) throw new TypeError(`bench: unknown option --${[...flags.keys()][0]}\n\n${USAGE}`);
  return settings;
}

function parseOnly(value: string | undefined): ReadonlySet<ScenarioId> {
  if (value === undefined || value === '') return new Set(SCENARIOS);
  const chosen = new Set<ScenarioId>();
  for (const part of value.split(',')) {
    const name = /^[1-7]$/.test(part) ? SCENARIOS[Number(part) - 1] : SCENARIOS.find((id) => id === part);
    if (name === undefined) throw new TypeError(`bench: --only takes ${SCENARIOS.join(', ')} or 1-7, got ${JSON.stringify(part)}`);
    chosen.add(name);
  }
  return chosen;
}
