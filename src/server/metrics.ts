/**
 * GET /metrics through prom-client: the server's own metrics on a registry per server instance (tests run
 * several servers in one process), plus prom-client's default process metrics. A small facade keeps the
 * call shape the services use (`counter(name, help).inc(labels)`).
 */
import * as prom from 'prom-client';

export type Labels = Readonly<Record<string, string | number>>;

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

/** What a callback gauge reads at scrape time: one value, or one value per label set. */
export type GaugeReading = number | ReadonlyArray<readonly [Labels, number]>;

export const METRICS_CONTENT_TYPE = prom.Registry.PROMETHEUS_CONTENT_TYPE;

export class Metrics {
  private readonly registry = new prom.Registry();
  private readonly names = new Set<string>();
  /** Callback gauges, refreshed right before each scrape. */
  private readonly readers: (() => void)[] = [];

  constructor(private readonly prefix = 'shine_') {
    // The event-loop monitor measures from the first server's start on.
    processRegistry();
  }

  /**
   * A counter. prom-client fixes a metric's label names when it is made: give them in `labelNames` to
   * have the series from the start, else they are taken from the first inc().
   */
  counter(name: string, help: string, labelNames?: readonly string[]): Counter {
    const metric = this.lazy(
      name,
      labelNames,
      (n, l) => new prom.Counter(Object.assign({}, this.base(n, help), { labelNames: l })),
    );
    return { inc: (labels, by = 1) => void metric.for(labels).inc(labels ?? {}, by) };
  }

  /** A gauge; with `read`, its value (or values by label) is read when /metrics is scraped. */
  gauge(name: string, help: string, read?: () => GaugeReading, labelNames?: readonly string[]): Gauge {
    const metric = this.lazy(
      name,
      labelNames,
      (n, l) => new prom.Gauge(Object.assign({}, this.base(n, help), { labelNames: l })),
    );
    if (read) {
      this.readers.push(() => {
        const reading = read();
        const entries = typeof reading === 'number' ? [[{}, reading] as const] : reading;
        // Series whose label set is no longer read (a peer gone) disappear instead of keeping a stale value.
        metric.made()?.reset();
        for (const [labels, value] of entries) metric.for(labels).set(labels, value);
      });
    }
    return { set: (value, labels) => void metric.for(labels).set(labels ?? {}, value) };
  }

  histogram(
    name: string,
    help: string,
    buckets: readonly number[] = DEFAULT_BUCKETS,
    labelNames?: readonly string[],
  ): Histogram {
    const metric = this.lazy(
      name,
      labelNames,
      (n, l) => new prom.Histogram(Object.assign({}, this.base(n, help), { labelNames: l, buckets: [...buckets] })),
    );
    return { observe: (value, labels) => void metric.for(labels).observe(labels ?? {}, value) };
  }

  /** The Prometheus text exposition of this server's metrics and the process metrics. */
  async render(): Promise<string> {
    for (const read of this.readers) read();
    const [process, own] = await Promise.all([processMetrics(), this.registry.metrics()]);
    return `${process}\n${own}`;
  }

  private base(name: string, help: string) {
    return { name: this.prefix + name, help, registers: [this.registry] };
  }

  /**
   * Checks the name now (a typo fails at start, not at first use) and makes the prom-client metric with
   * `labelNames`, or at first use with the label names of that use; prom-client then refuses others.
   */
  private lazy<M>(
    name: string,
    labelNames: readonly string[] | undefined,
    make: (name: string, labelNames: string[]) => M,
  ): { for(labels: Labels | undefined): M; made(): M | undefined } {
    if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad metric name ${name}`);
    if (this.names.has(name)) throw new Error(`metric ${name} registered twice`);
    this.names.add(name);
    let metric = labelNames ? make(name, [...labelNames]) : undefined;
    return { for: (labels) => (metric ??= make(name, Object.keys(labels ?? {}))), made: () => metric };
  }
}

let processRegistryOnce: prom.Registry | undefined;
let processText: { at: number; text: Promise<string> } | undefined;

/** How long one rendering of the process metrics is served again. */
const PROCESS_METRICS_MAX_AGE_MS = 1000;

/**
 * prom-client's default metrics (CPU, heap, GC, event-loop lag, handles) describe the process, so every
 * server in it shares one registry: collectDefaultMetrics starts a GC observer and an event-loop monitor
 * that are never stopped, and one per server would pile up in a test process. Never the global registry.
 * Rendering them costs about a millisecond of CPU (reads under /proc, V8 heap statistics); Prometheus
 * scrapes every few seconds at most, so a burst of scrapes (tests polling, a misconfigured scraper)
 * gets the rendering of the last second. Real time on purpose: this is the cost of the real process,
 * and a test's manual clock must not freeze it.
 */
function processMetrics(): Promise<string> {
  const now = performance.now();
  if (!processText || now - processText.at > PROCESS_METRICS_MAX_AGE_MS) {
    processText = { at: now, text: processRegistry().metrics() };
  }
  return processText.text;
}

function processRegistry(): prom.Registry {
  if (!processRegistryOnce) {
    processRegistryOnce = new prom.Registry();
    prom.collectDefaultMetrics({ register: processRegistryOnce });
  }
  return processRegistryOnce;
}
