/**
 * A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text
 * exposition format for GET /metrics. One registry per server instance (tests run several in-process).
 */

export type Labels = Readonly<Record<string, string | number>>;

interface Metric {
  readonly name: string;
  render(): string[];
}

/** A monotonically increasing count. */
export interface Counter {
  inc(labels?: Labels, by?: number): void;
}

/** A value that goes up and down; either set directly or read at scrape time. */
export interface Gauge {
  set(value: number, labels?: Labels): void;
}

/** Observations counted into fixed buckets (e.g. latencies in seconds). */
export interface Histogram {
  observe(value: number, labels?: Labels): void;
}

export const DEFAULT_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10] as const;

export class Metrics {
  private readonly metrics = new Map<string, Metric>();

  constructor(private readonly prefix = 'shine_') {}

  counter(name: string, help: string): Counter {
    const values = new Map<string, number>();
    this.register(name, help, 'counter', () => [...values].map(([l, v]) => `${this.prefix}${name}${l} ${v}`));
    return {
      inc: (labels, by = 1) => {
        const key = labelText(labels);
        values.set(key, (values.get(key) ?? 0) + by);
      },
    };
  }

  /** A gauge; with `collect`, its value (or values by label) is read when /metrics is scraped. */
  gauge(name: string, help: string, collect?: () => number | ReadonlyArray<[Labels, number]>): Gauge {
    const values = new Map<string, number>();
    this.register(name, help, 'gauge', () => {
      const collected = collect?.();
      const entries =
        collected === undefined
          ? [...values]
          : typeof collected === 'number'
            ? [['', collected] as const]
            : collected.map(([l, v]) => [labelText(l), v] as const);
      return entries.map(([l, v]) => `${this.prefix}${name}${l} ${v}`);
    });
    return { set: (value, labels) => void values.set(labelText(labels), value) };
  }

  histogram(name: string, help: string, buckets: readonly number[] = DEFAULT_BUCKETS): Histogram {
    const series = new Map<string, { labels: Labels | undefined; counts: number[]; sum: number; count: number }>();
    this.register(name, help, 'histogram', () =>
      [...series.values()].flatMap((s) => [
        ...buckets.map((b, i) => `${this.prefix}${name}_bucket${labelText({ ...s.labels, le: b })} ${s.counts[i]}`),
        `${this.prefix}${name}_bucket${labelText({ ...s.labels, le: '+Inf' })} ${s.count}`,
        `${this.prefix}${name}_sum${labelText(s.labels)} ${s.sum}`,
        `${this.prefix}${name}_count${labelText(s.labels)} ${s.count}`,
      ]),
    );
    return {
      observe: (value, labels) => {
        const key = labelText(labels);
        let s = series.get(key);
        if (!s) series.set(key, (s = { labels, counts: buckets.map(() => 0), sum: 0, count: 0 }));
        buckets.forEach((b, i) => {
          if (value <= b) s.counts[i]!++;
        });
        s.sum += value;
        s.count++;
      },
    };
  }

  /** The Prometheus text exposition of every metric. */
  render(): string {
    return [...this.metrics.values()].flatMap((m) => m.render()).join('\n') + '\n';
  }

  private register(name: string, help: string, type: string, lines: () => string[]): void {
    if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad metric name ${name}`);
    if (this.metrics.has(name)) throw new Error(`metric ${name} registered twice`);
    const full = this.prefix + name;
    this.metrics.set(name, { name, render: () => [`# HELP ${full} ${help}`, `# TYPE ${full} ${type}`, ...lines()] });
  }
}

function labelText(labels: Labels | undefined): string {
  if (!labels) return '';
  const parts = Object.entries(labels).map(
    ([k, v]) => `${k}="${String(v).replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : '\\' + c))}"`,
  );
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}
