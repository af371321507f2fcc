/** Scenario results and their markdown tables. */

export type Format = 'int' | 'ratio' | 'ms' | 'seconds' | 'decimal' | 'bytes' | 'pct' | 'text';
export type Cell = number | string | undefined;

export interface Column {
  key: string;
  label: string;
  format: Format;
}

export interface Row {
  contender: string;
  cells: Record<string, Cell>;
}

export interface ScenarioResult {
  id: string;
  title: string;
  columns: Column[];
  rows: Row[];
  notes: string[];
  /** The cells that must hold a finite number for the scenario to count as measured (the --quick smoke test checks them). */
  required: string[];
}

function format(value: Cell, kind: Format): string {
  if (value === undefined) return '–';
  if (typeof value === 'string') return value;
  if (!Number.isFinite(value)) return '–';
  switch (kind) {
    case 'int':
      return Math.round(value).toLocaleString('en-US');
    case 'ratio':
      return `${value.toFixed(2)}×`;
    case 'ms':
      return value < 10 ? `${value.toFixed(2)} ms` : `${value.toFixed(1)} ms`;
    case 'seconds':
      return `${value.toFixed(1)} s`;
    case 'decimal':
      return value.toFixed(2);
    case 'bytes':
      return Math.abs(value) >= 1024 ? `${(value / 1024).toFixed(2)} KB` : `${Math.round(value)} B`;
    case 'pct':
      return `${Math.round(value * 100)}%`;
    default:
      return String(value);
  }
}

/** One scenario as a markdown section: a heading, the table, the notes. */
export function renderScenario(result: ScenarioResult): string {
  const header = `| Contender | ${result.columns.map((column) => column.label).join(' | ')} |`;
  const rule = `|---|${result.columns.map((column) => (column.format === 'text' ? '---' : '---:')).join('|')}|`;
  const lines = result.rows.map((row) => `| ${row.contender} | ${result.columns.map((column) => format(row.cells[column.key], column.format)).join(' | ')} |`);
  const notes = result.notes.map((note) => `- ${note}`);
  return [`### ${result.title}`, '', header, rule, ...lines, ...(notes.length > 0 ? ['', ...notes] : [])].join('\n');
}

/** "met" / "missed" against a goal, for the goal column. */
export function verdict(ok: boolean | undefined, goal: string): string {
  if (ok === undefined) return `– (goal ${goal})`;
  return ok ? `met (${goal})` : `**missed** (${goal})`;
}
