import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Metrics } from '../../src/server/metrics.js';
import { parsePrometheusText, PrometheusFormatError } from '../helpers/prometheus.js';

const VALID = `# HELP req_total Requests, by "op".\\nSecond line.
# TYPE req_total counter
req_total{op="Send",status="200"} 3
req_total{op="a\\"b\\\\c\\nd",status="500",} 1 1700000000000

# TYPE lag gauge
lag NaN
# A plain comment
# TYPE t_seconds histogram
t_seconds_bucket{op="x",le="0.1"} 1
t_seconds_bucket{op="x",le="1"} 2
t_seconds_bucket{op="x",le="+Inf"} 2
t_seconds_sum{op="x"} 0.55
t_seconds_count{op="x"} 2
`;

describe('strict Prometheus text parser (test helper)', () => {
  it('reads families, escapes, NaN, timestamps and histograms', () => {
    const f = parsePrometheusText(VALID);
    assert.deepEqual([...f.keys()], ['req_total', 'lag', 't_seconds']);
    assert.equal(f.get('req_total')!.help, 'Requests, by "op".\nSecond line.');
    assert.deepEqual(f.get('req_total')!.samples[1], {
      name: 'req_total',
      labels: { op: 'a"b\\c\nd', status: '500' },
      value: 1,
    });
    assert.ok(Number.isNaN(f.get('lag')!.samples[0]!.value));
    assert.equal(f.get('t_seconds')!.samples.length, 5);
  });

  const refusals: [string, string, RegExp][] = [
    ['no TYPE before a sample', 'x 1\n', /without a # TYPE/],
    ['a HELP-only family', '# HELP x help\n', /no TYPE/],
    ['duplicate series', '# TYPE x counter\nx{a="1",b="2"} 1\nx{b="2",a="1"} 2\n', /duplicate series/],
    ['TYPE twice', '# TYPE x counter\n# TYPE x counter\nx 1\n', /TYPE given twice/],
    ['HELP twice', '# HELP x a\n# HELP x b\n# TYPE x gauge\n', /HELP given twice/],
    ['unknown type', '# TYPE x meter\n', /unknown type/],
    ['split family', '# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\nx{a="b"} 2\n', /split/],
    ['unterminated labels', '# TYPE x gauge\nx{a="b} 1\n', /malformed/],
    ['unquoted label value', '# TYPE x gauge\nx{a=b} 1\n', /malformed/],
    ['bad escape', '# TYPE x gauge\nx{a="\\t"} 1\n', /malformed/],
    ['duplicate label', '# TYPE x gauge\nx{a="1",a="2"} 1\n', /malformed/],
    ['reserved label', '# TYPE x gauge\nx{__name__="y"} 1\n', /malformed/],
    ['value not a float', '# TYPE x gauge\nx 1,5\n', /malformed/],
    ['trailing garbage', '# TYPE x gauge\nx 1 2 3\n', /malformed/],
    ['no space before the value', '# TYPE x gauge\nx{a="b"}1\n', /malformed/],
    ['no newline at the end', '# TYPE x gauge\nx 1', /no newline/],
    ['negative counter', '# TYPE x counter\nx -1\n', /below zero/],
    ['suffix the type does not have', '# TYPE x counter\nx_sum 1\n', /without a # TYPE/],
    ['histogram without +Inf', '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 1\nh_count 1\n', /no \+Inf bucket/],
    [
      'histogram counts decreasing',
      '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',
      /decrease/,
    ],
    ['histogram +Inf not _count', '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n', /not _count/],
  ];
  for (const [what, text, reason] of refusals) {
    it(`refuses ${what}`, () => {
      assert.throws(
        () => parsePrometheusText(text),
        (err: unknown) => err instanceof PrometheusFormatError && reason.test(err.message),
      );
    });
  }

  it('accepts what the server renders, label values with quotes and newlines included', async () => {
    const m = new Metrics();
    m.counter('c_total', 'a "help"\nwith a newline \\').inc({ v: 'say "hi"\nback\\slash' });
    m.histogram('h_seconds', 'h', undefined, ['op']).observe(0.2, { op: 'x' });
    m.gauge('g', 'g', () => [
      [{ peer: 'a' }, 1],
      [{ peer: 'b' }, 2],
    ]);
    const f = parsePrometheusText(await m.render());
    assert.deepEqual(f.get('shine_c_total')!.samples[0]!.labels, { v: 'say "hi"\nback\\slash' });
    assert.equal(f.get('shine_c_total')!.help, 'a "help"\nwith a newline \\');
    assert.deepEqual(
      f.get('shine_g')!.samples.map((s) => [s.labels.peer, s.value]),
      [
        ['a', 1],
        ['b', 2],
      ],
    );
    assert.ok(f.has('nodejs_eventloop_lag_seconds'), 'process metrics are there too');
  });
});
