/** The pure parts of WebPush (docs/protocol.md §5.5): answers' verdicts, Retry-After, endpoint and key spellings. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { verdictOf } from '../../src/server/push/service.js';
import { retryAfterMs } from '../../src/server/push/sender.js';
import { checkEndpoint, decodeAnyBase64 } from '../../src/server/push/subscription.js';

describe('push answers', () => {
  it('2xx sent, 404/410 gone, 429/5xx/no answer retried, other 4xx failed', () => {
    const v = (status: number | 'network' | 'timeout' | 'invalid') => verdictOf({ status, retryAfterMs: null });
    assert.deepEqual([v(200), v(201), v(204)], ['sent', 'sent', 'sent']);
    assert.deepEqual([v(404), v(410)], ['gone', 'gone']);
    assert.deepEqual([v(429), v(500), v(503), v('network'), v('timeout')], Array(5).fill('retry'));
    assert.deepEqual([v(400), v(401), v(403), v(413), v(301), v('invalid')], Array(6).fill('failed'));
  });

  it('reads Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-12-02T12:00:00Z');
    assert.equal(retryAfterMs('120', now), 120_000);
    assert.equal(retryAfterMs(' 0 ', now), 0);
    assert.equal(retryAfterMs('Wed, 02 Dec 2026 12:01:30 GMT', now), 90_000);
    assert.equal(retryAfterMs('Wed, 02 Dec 2026 11:00:00 GMT', now), 0, 'a past date means now');
    assert.equal(retryAfterMs(null, now), null);
    assert.equal(retryAfterMs('soon', now), null);
    assert.equal(retryAfterMs('-5', now), null);
  });
});

describe('push subscriptions', () => {
  it('normalises accepted endpoints; allows loopback http only when insecure', () => {
    assert.equal(checkEndpoint('https://Push.Example.com/a?b=1', false), 'https://push.example.com/a?b=1');
    assert.equal(checkEndpoint('https://fcm.googleapis.com./x', false), 'https://fcm.googleapis.com./x');
    assert.equal(checkEndpoint('http://127.0.0.1:8080/p', true), 'http://127.0.0.1:8080/p');
    for (const bad of [
      'http://127.0.0.1:8080/p',
      'https://2130706433/x',
      'https://[::ffff:7f00:1]/x',
      'https://a.b.123/x',
    ])
      assert.throws(() => checkEndpoint(bad, false), /BAD_FIELDS|endpoint/, bad);
    assert.throws(() => checkEndpoint('http://10.0.0.1/p', true), /endpoint/, 'only 127.0.0.1 when insecure');
  });

  it('takes base64 in either alphabet, padded or not, but one spelling per value', () => {
    const bytes = Buffer.from([0xfb, 0xff, 0xbf, 1]);
    for (const text of ['+/+/AQ==', '+/+/AQ', '-_-_AQ', '-_-_AQ=='])
      assert.deepEqual(decodeAnyBase64(text), bytes, text);
    for (const text of ['+_+/AQ', '+/+/AQ=', '+/+/AR', 'A', 'AQ===', 'A Q', ''])
      assert.equal(decodeAnyBase64(text)?.length ?? null, text === '' ? 0 : null, text);
  });
});
