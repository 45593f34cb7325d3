import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ShineError } from '../../src/protocol/errors.js';
import { ManualClock } from '../../src/server/clock.js';
import { PeerUnavailableError } from '../../src/server/federation/peer-client.js';
import { DeliveryTrouble } from '../../src/server/delivery/trouble.js';
import { createLogger } from '../../src/server/log.js';
import { waitUntil } from '../helpers/wait.js';

function setup() {
  const clock = new ManualClock();
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('info', (line) => lines.push(JSON.parse(line) as Record<string, unknown>));
  const trouble = new DeliveryTrouble({
    clock,
    log,
    urlOf: (server) => Promise.resolve(server === 'beta' ? 'ws://beta.example/ws' : null),
    summaryEveryMs: 300_000,
  });
  return { clock, lines, trouble };
}

describe('delivery trouble', () => {
  it('logs the first failure, not the next ones, a summary per period, and the recovery', async () => {
    const { clock, lines, trouble } = setup();
    trouble.start();
    assert.equal(trouble.succeeded('beta'), false, 'not a recovery');
    assert.equal(lines.length, 0, 'a working server is not news');
    for (let i = 0; i < 50; i++) {
      trouble.failed('beta', new Error('beta: Error: connect ECONNREFUSED 10.0.0.2:443'));
      clock.advance(1000);
    }
    await waitUntil(() => lines.length === 1);
    assert.deepEqual(
      { ...lines[0], time: undefined },
      {
        time: undefined,
        level: 'warn',
        msg: 'delivery to server failing',
        peer: 'beta',
        url: 'ws://beta.example/ws',
        cause: 'Error: connect ECONNREFUSED 10.0.0.2:443',
        lastSuccessAtMs: clock.now() - 50_000,
      },
    );
    trouble.failed('beta', new Error('beta: unreachable (backing off)'));
    assert.equal(trouble.get('beta')!.lastError, 'Error: connect ECONNREFUSED 10.0.0.2:443', 'the real cause stays');
    clock.advance(300_000);
    await waitUntil(() => lines.length === 2);
    assert.equal(lines[1]!.msg, 'delivery to server still failing');
    assert.equal(lines[1]!.failedSinceLastSummary, 51);
    assert.equal(lines[1]!.consecutiveFailures, 51);
    assert.equal(trouble.succeeded('beta'), true, 'a recovery: the delivery engine wakes the server’s rows');
    await waitUntil(() => lines.length === 3);
    assert.equal(lines[2]!.level, 'info');
    assert.equal(lines[2]!.msg, 'delivery to server works again');
    assert.equal(lines[2]!.failedCalls, 51);
    clock.advance(300_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(lines.length, 3, 'no summary while all servers work');
    assert.equal(trouble.get('beta')!.state, 'up');
    trouble.close();
  });

  it('names an unknown URL as unknown and keeps servers apart', async () => {
    const { lines, trouble } = setup();
    trouble.failed('gamma', new Error('gamma: no known address'));
    trouble.succeeded('beta');
    await waitUntil(() => lines.length === 1);
    assert.equal(lines[0]!.url, 'unknown');
    assert.deepEqual(
      trouble.snapshot().map((r) => [r.serverLogin, r.state, r.consecutiveFailures]),
      [
        ['gamma', 'failing', 1],
        ['beta', 'up', 0],
      ],
    );
  });

  it('a server not answering gets one call at a time, the probe, until a call succeeds', () => {
    const { trouble } = setup();
    assert.equal(trouble.admit('beta'), 'call', 'a server never called');
    // Failures that say nothing of its work: a connection that failed, a per-message refusal.
    trouble.failed('beta', new PeerUnavailableError('beta', 'closed while connecting'));
    trouble.failed('beta', new ShineError('USER_NOT_FOUND', 'beta: no such user'));
    assert.deepEqual([trouble.admit('beta'), trouble.admit('beta')], ['call', 'call']);
    assert.equal(trouble.get('beta')!.notAnswering, false);

    // No answer on a connection that stayed up.
    trouble.failed('beta', new PeerUnavailableError('beta', 'ReceiveIncomingMessage timed out', true));
    assert.equal(trouble.get('beta')!.notAnswering, true);
    assert.deepEqual([trouble.admit('beta'), trouble.admit('beta'), trouble.admit('gamma')], ['probe', 'skip', 'call']);
    // The probe gets a 5xx answer: still not answering, and the next call is the next probe.
    trouble.failed('beta', new ShineError('OVERLOADED', 'beta: the database is stuck'), true);
    assert.equal(trouble.get('beta')!.notAnswering, true);
    assert.deepEqual([trouble.admit('beta'), trouble.admit('beta')], ['probe', 'skip']);
    // The probe succeeds: a recovery, and every call goes again.
    assert.equal(trouble.succeeded('beta', true), true);
    assert.deepEqual([trouble.admit('beta'), trouble.admit('beta')], ['call', 'call']);
    assert.equal(trouble.get('beta')!.notAnswering, false);

    // A call unanswered for as long as a sender waits: not answering, though nothing failed yet.
    trouble.unanswered('beta');
    assert.deepEqual(
      [trouble.get('beta')!.state, trouble.admit('beta'), trouble.admit('beta')],
      ['up', 'probe', 'skip'],
    );
    assert.equal(trouble.succeeded('beta', true), true, 'a recovery: calls were not made meanwhile');
    assert.equal(trouble.admit('beta'), 'call');

    // Any answer that is not a 5xx shows it does the work again.
    trouble.failed('beta', new ShineError('INTERNAL', 'beta: oops'));
    assert.equal(trouble.admit('beta'), 'probe');
    trouble.failed('beta', new Error('BAD_RECEIPT: wrong signer'), true);
    assert.deepEqual([trouble.admit('beta'), trouble.admit('beta')], ['call', 'call']);
  });
});
