/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), for tests: it refuses what
 * Prometheus would refuse or silently mangle, so a test that reads /metrics also checks its format.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  /** The sample's own name, e.g. `x_bucket` in family `x`. */
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: MetricType;
  help: string | undefined;
  samples: Sample[];
}

export class PrometheusFormatError extends Error {
  constructor(lineNo: number, reason: string, line: string) {
    super(`line ${lineNo}: ${reason}: ${JSON.stringify(line)}`);
  }
}

const TYPES = new Set<MetricType>(['counter', 'gauge', 'histogram', 'summary', 'untyped']);
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** What Go's strconv.ParseFloat takes (Prometheus uses it): NaN and Inf in any case; prom-client writes `Nan`. */
const FLOAT = /^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?|nan)$/i;
const TIMESTAMP = /^-?\d+$/;
/** The sample names a family of each type may have, as suffixes of the family name. */
const SUFFIXES: Record<MetricType, readonly string[]> = {
  counter: [''],
  gauge: [''],
  untyped: [''],
  histogram: ['_bucket', '_sum', '_count'],
  summary: ['', '_sum', '_count'],
};

/**
 * Families by name. Refuses: text not ending in a newline, malformed lines, bad names or escapes,
 * a sample without a preceding `# TYPE`, TYPE or HELP twice, a family split into
 * two groups, a duplicate series, and histograms whose buckets are not cumulative up to `+Inf` = `_count`.
 */
export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  if (text !== '' && !text.endsWith('\n')) throw new PrometheusFormatError(0, 'no newline at the end', '');
  const families = new Map<string, Draft>();
  const seriesSeen = new Set<string>();
  /** Families whose group has ended: one of their lines now would split them. */
  const closed = new Set<string>();
  let current: Draft | undefined;

  const enter = (family: Draft) => {
    if (current === family) return;
    if (closed.has(family.name)) throw new Error(`family ${family.name} split into two groups`);
    if (current) closed.add(current.name);
    current = family;
  };

  const lines = text.split('\n').slice(0, -1);
  for (const [i, line] of lines.entries()) {
    const fail = (reason: string): never => {
      throw new PrometheusFormatError(i + 1, reason, line);
    };
    try {
      if (line.trim() === '') continue;
      if (line.startsWith('#')) {
        const meta = /^#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?:[ \t]+(.*))?$/.exec(line);
        if (!meta) continue; // a plain comment
        const [, kind, name, rest = ''] = meta as unknown as [string, 'HELP' | 'TYPE', string, string | undefined];
        if (!METRIC_NAME.test(name)) fail('bad metric name');
        let family = families.get(name);
        if (!family) families.set(name, (family = { name, type: undefined, help: undefined, samples: [] }));
        enter(family);
        if (kind === 'TYPE') {
          if (!TYPES.has(rest as MetricType)) fail('unknown type');
          if (family.type !== undefined) fail('TYPE given twice');
          family.type = rest as MetricType;
        } else {
          if (family.help !== undefined) fail('HELP given twice');
          family.help = unescape(rest, false) ?? fail('bad escape in HELP');
        }
        continue;
      }
      const sample = parseSample(line) ?? fail('malformed sample');
      const family = familyOf(families, sample.name) ?? fail('sample without a # TYPE for its family');
      enter(family);
      const key = sample.name + JSON.stringify(Object.entries(sample.labels).sort(([a], [b]) => (a < b ? -1 : 1)));
      if (seriesSeen.has(key)) fail('duplicate series');
      seriesSeen.add(key);
      if (family.type === 'counter' && !(sample.value >= 0)) fail('counter below zero');
      if (family.type === 'histogram' && sample.name.endsWith('_bucket') && !('le' in sample.labels))
        fail('bucket without le');
      family.samples.push(sample);
    } catch (err) {
      if (err instanceof PrometheusFormatError) throw err;
      fail((err as Error).message);
    }
  }
  const done = new Map<string, MetricFamily>();
  for (const family of families.values()) {
    const { type } = family;
    if (type === undefined) throw new PrometheusFormatError(0, `family ${family.name} has no TYPE`, '');
    done.set(family.name, { ...family, type });
    if (type === 'histogram') checkHistogram(family);
  }
  return done;
}

/** A family while its lines are read: HELP may come before TYPE. */
interface Draft {
  name: string;
  type: MetricType | undefined;
  help: string | undefined;
  samples: Sample[];
}

/** The family a sample name belongs to: declared, and with a suffix its type allows. */
function familyOf(families: Map<string, Draft>, name: string): Draft | undefined {
  for (const suffix of ['', '_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const family = families.get(name.slice(0, name.length - suffix.length));
    if (family?.type !== undefined && SUFFIXES[family.type].includes(suffix)) return family;
  }
  return undefined;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$/;
/** One `name="value"` and what follows it: a comma, or the end of the label list. */
const LABEL = /[ \t]*([^=\s]+)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,[ \t]*|$)/y;

/** `name{a="x",b="y"} value [timestamp]`, or undefined when anything is off. */
function parseSample(line: string): Sample | undefined {
  const m = SAMPLE.exec(line);
  if (!m) return undefined;
  const [, name, list, value, timestamp] = m as unknown as [string, string, string | undefined, string, string?];
  if (!FLOAT.test(value) || (timestamp !== undefined && !TIMESTAMP.test(timestamp))) return undefined;
  const labels: Record<string, string> = {};
  if (list !== undefined) {
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < list.length) {
      const l = LABEL.exec(list);
      if (!l) return undefined;
      const [, labelName, raw] = l as unknown as [string, string, string];
      if (!LABEL_NAME.test(labelName) || labelName.startsWith('__') || labelName in labels) return undefined;
      const text = unescape(raw, true);
      if (text === undefined) return undefined;
      labels[labelName] = text;
    }
  }
  return { name, labels, value: parseFloatValue(value) };
}

/** The format's escapes: `\\` and `\n` everywhere, `\"` in label values only. */
function unescape(raw: string, quoteAllowed: boolean): string | undefined {
  let out = '';
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] !== '\\') {
      out += raw[i];
      continue;
    }
    const next = raw[++i];
    if (next === '\\') out += '\\';
    else if (next === 'n') out += '\n';
    else if (next === '"' && quoteAllowed) out += '"';
    else return undefined;
  }
  return out;
}

function parseFloatValue(text: string): number {
  if (/inf/i.test(text)) return text.startsWith('-') ? -Infinity : Infinity;
  return /nan/i.test(text) ? NaN : Number(text);
}

/** Per label set: buckets ascending by le, counts not decreasing, a +Inf bucket equal to _count, a _sum. */
function checkHistogram(family: Draft): void {
  const series = new Map<string, { buckets: [number, number][]; count?: number; sum?: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort(([a], [b]) => (a < b ? -1 : 1)));
    let entry = series.get(key);
    if (!entry) series.set(key, (entry = { buckets: [] }));
    if (s.name.endsWith('_bucket')) {
      if (le === undefined || !FLOAT.test(le)) throw new PrometheusFormatError(0, `${family.name}: bad le`, String(le));
      entry.buckets.push([parseFloatValue(le), s.value]);
    } else if (s.name.endsWith('_count')) entry.count = s.value;
    else entry.sum = s.value;
  }
  for (const [key, { buckets, count, sum }] of series) {
    const where = `${family.name}${key}`;
    if (count === undefined || sum === undefined)
      throw new PrometheusFormatError(0, `${where}: _count or _sum missing`, '');
    for (let i = 1; i < buckets.length; i++) {
      if (!(buckets[i]![0] > buckets[i - 1]![0]))
        throw new PrometheusFormatError(0, `${where}: buckets not in ascending le order`, '');
      if (buckets[i]![1] < buckets[i - 1]![1])
        throw new PrometheusFormatError(0, `${where}: bucket counts decrease`, '');
    }
    const last = buckets.at(-1);
    if (!last || last[0] !== Infinity) throw new PrometheusFormatError(0, `${where}: no +Inf bucket`, '');
    if (last[1] !== count)
      throw new PrometheusFormatError(0, `${where}: +Inf bucket ${last[1]} is not _count ${count}`, '');
  }
}

/** GET /metrics of a server, parsed strictly; rejects when the answer is not the text format. */
export async function scrape(httpUrl: string): Promise<Map<string, MetricFamily>> {
  const res = await fetch(`${httpUrl}/metrics`);
  const type = res.headers.get('content-type') ?? '';
  if (res.status !== 200 || !type.startsWith('text/plain; version=0.0.4'))
    throw new Error(`/metrics answered ${res.status} ${type}`);
  return parsePrometheusText(await res.text());
}
