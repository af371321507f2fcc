// A dependency-free metrics registry, written out in the Prometheus text format (exposition 0.0.4).

/** The Content-Type of `MetricsRegistry.text()`. */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

type Labels = Readonly<Record<string, string>>;

interface Metric {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  lines(out: string[]): void;
}

/** Label values escape `\`, `"` and newlines; a series' key is its labels written out. */
function labelText(labels: Labels | undefined, extra?: string): string {
  const parts: string[] = [];
  if (labels !== undefined) {
    for (const key of Object.keys(labels).sort()) parts.push(`${key}="${escapeLabel(labels[key] as string)}"`);
  }
  if (extra !== undefined) parts.push(extra);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function escapeHelp(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function number(value: number): string {
  if (value === Infinity) return '+Inf';
  if (value === -Infinity) return '-Inf';
  return Number.isNaN(value) ? 'NaN' : String(value);
}

export class Counter implements Metric {
  readonly type = 'counter';
  readonly #series = new Map<string, number>();
  readonly name: string;
  readonly help: string;
  constructor(name: string, help: string) {
    this.name = name;
    this.help = help;
  }

  inc(labels?: Labels, by = 1): void {
    const key = labelText(labels);
    this.#series.set(key, (this.#series.get(key) ?? 0) + by);
  }

  lines(out: string[]): void {
    for (const [key, value] of this.#series) out.push(`${this.name}${key} ${number(value)}`);
  }
}

/** A gauge read when scraped: no bookkeeping on the request path. */
export class Gauge implements Metric {
  readonly type = 'gauge';
  readonly name: string;
  readonly help: string;
  readonly read: () => number;
  constructor(name: string, help: string, read: () => number) {
    this.name = name;
    this.help = help;
    this.read = read;
  }

  lines(out: string[]): void {
    out.push(`${this.name} ${number(this.read())}`);
  }
}

export class Histogram implements Metric {
  readonly type = 'histogram';
  readonly #series = new Map<string, { labels: Labels | undefined; counts: number[]; sum: number; count: number }>();
  readonly name: string;
  readonly help: string;
  readonly buckets: readonly number[];
  constructor(name: string, help: string, buckets: readonly number[]) {
    this.name = name;
    this.help = help;
    this.buckets = buckets;
  }

  observe(value: number, labels?: Labels): void {
    const key = labelText(labels);
    let series = this.#series.get(key);
    if (series === undefined) this.#series.set(key, (series = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    const counts = series.counts;
    for (let i = 0; i < counts.length; i++) if (value <= (this.buckets[i] as number)) counts[i] = (counts[i] as number) + 1;
    series.sum += value;
    series.count++;
  }

  lines(out: string[]): void {
    for (const [key, { labels, counts, sum, count }] of this.#series) {
      this.buckets.forEach((le, i) => out.push(`${this.name}_bucket${labelText(labels, `le="${number(le)}"`)} ${counts[i]}`));
      out.push(`${this.name}_bucket${labelText(labels, 'le="+Inf"')} ${count}`);
      out.push(`${this.name}_sum${key} ${number(sum)}`);
      out.push(`${this.name}_count${key} ${count}`);
    }
  }
}

/** Seconds, for turn durations and queue waits: 5 ms to 5 min. */
export const SECONDS_BUCKETS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Holds metrics and writes them out, each with its `# HELP` and `# TYPE`. */
export class MetricsRegistry {
  readonly #metrics: Metric[] = [];

  counter(name: string, help: string): Counter {
    return this.#add(new Counter(name, help));
  }

  gauge(name: string, help: string, read: () => number): Gauge {
    return this.#add(new Gauge(name, help, read));
  }

  histogram(name: string, help: string, buckets: readonly number[] = SECONDS_BUCKETS): Histogram {
    return this.#add(new Histogram(name, help, buckets));
  }

  #add<M extends Metric>(metric: M): M {
    this.#metrics.push(metric);
    return metric;
  }

  /** The Prometheus text format (0.0.4), ending in a newline. */
  text(): string {
    const out: string[] = [];
    for (const metric of this.#metrics) {
      out.push(`# HELP ${metric.name} ${escapeHelp(metric.help)}`, `# TYPE ${metric.name} ${metric.type}`);
      metric.lines(out);
    }
    return `${out.join('\n')}\n`;
  }
}
