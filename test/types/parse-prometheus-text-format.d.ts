// The parser ships no types: what the metrics tests read of its output.
declare module 'parse-prometheus-text-format' {
  interface ParsedFamily {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    metrics: any[];
  }
  export default function parsePrometheusTextFormat(text: string): ParsedFamily[];
}
