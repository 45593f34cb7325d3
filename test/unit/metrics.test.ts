import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Metrics } from '../../src/server/metrics.js';
import { parsePrometheusText } from '../helpers/prometheus.js';

const samples = async (m: Metrics, name: string) =>
  parsePrometheusText(await m.render())
    .get(name)
    ?.samples.map((s) => ({ ...s.labels, value: s.value })) ?? [];

describe('Metrics (prom-client facade)', () => {
  it('keeps servers in one process apart: same names, separate values', async () => {
    const [a, b] = [new Metrics(), new Metrics()];
    a.counter('ops_total', 'ops').inc({ op: 'X' }, 2);
    b.counter('ops_total', 'ops').inc({ op: 'X' });
    assert.deepEqual(await samples(a, 'shine_ops_total'), [{ op: 'X', value: 2 }]);
    assert.deepEqual(await samples(b, 'shine_ops_total'), [{ op: 'X', value: 1 }]);
  });

  it('declared label names give series from the start; otherwise the first use fixes them', async () => {
    const m = new Metrics();
    m.counter('declared_total', 'd', []);
    const lazy = m.counter('lazy_total', 'l');
    assert.deepEqual(await samples(m, 'shine_declared_total'), [{ value: 0 }]);
    assert.deepEqual(await samples(m, 'shine_lazy_total'), []);
    lazy.inc({ kind: 'a' });
    assert.throws(() => lazy.inc({ other: 'b' }), /not included in initial labelset/);
    assert.deepEqual(await samples(m, 'shine_lazy_total'), [{ kind: 'a', value: 1 }]);
  });

  it('refuses a bad or repeated name when the metric is declared, not at first use', () => {
    const m = new Metrics();
    m.gauge('g', 'g');
    assert.throws(() => m.counter('g', 'again'), /registered twice/);
    assert.throws(() => m.histogram('Bad-Name', 'b'), /bad metric name/);
  });

  it('reads callback gauges at each scrape; a label set no longer read disappears', async () => {
    const m = new Metrics();
    let open: [{ peer: string }, number][] = [
      [{ peer: 'a' }, 1],
      [{ peer: 'b' }, 3],
    ];
    m.gauge('calls_open', 'c', () => open);
    m.gauge('depth', 'd', () => open.length);
    assert.deepEqual(await samples(m, 'shine_calls_open'), [
      { peer: 'a', value: 1 },
      { peer: 'b', value: 3 },
    ]);
    open = [[{ peer: 'b' }, 0]];
    assert.deepEqual(await samples(m, 'shine_calls_open'), [{ peer: 'b', value: 0 }]);
    assert.deepEqual(await samples(m, 'shine_depth'), [{ value: 1 }]);
    open = [];
    assert.deepEqual(await samples(m, 'shine_calls_open'), []);
  });

  it('counts histogram observations into the default buckets', async () => {
    const m = new Metrics();
    const h = m.histogram('call_seconds', 'c');
    h.observe(0.003);
    h.observe(2);
    const family = parsePrometheusText(await m.render()).get('shine_call_seconds')!;
    const bucket = (le: string) => family.samples.find((s) => s.labels.le === le)?.value;
    assert.equal(bucket('0.001'), 0);
    assert.equal(bucket('0.005'), 1);
    assert.equal(bucket('1'), 1);
    assert.equal(bucket('5'), 2);
    assert.equal(bucket('+Inf'), 2);
    assert.equal(family.samples.find((s) => s.name === 'shine_call_seconds_sum')?.value, 2.003);
  });
});
