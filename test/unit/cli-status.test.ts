/** `shine status`'s line per peer server: how it tells connected, down and not answering apart. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PeerStatus } from '../../src/cli/commands/status.js';
import { describePeer } from '../../src/cli/commands/status.js';

const peer = (p: Partial<PeerStatus>): PeerStatus => ({
  serverLogin: 'beta',
  wsUrl: 'ws://beta.example/ws',
  connected: true,
  down: false,
  notAnswering: false,
  state: 'up',
  lastSuccessAtMs: null,
  consecutiveFailures: 0,
  lastError: null,
  dueRows: 0,
  ...p,
});

describe('shine status: a peer server', () => {
  it('says whether it is connected, down, or connected but not answering', () => {
    assert.equal(describePeer(peer({})), 'beta ws://beta.example/ws: connected, up, no success yet, 0 row(s) waiting');
    assert.match(
      describePeer(
        peer({ connected: false, down: true, state: 'failing', consecutiveFailures: 3, lastError: 'ECONNREFUSED' }),
      ),
      /^beta ws:\/\/beta\.example\/ws: down \(its last connection failed\), FAILING: 3 call\(s\) in a row, last error: ECONNREFUSED,/,
    );
    assert.match(
      describePeer(
        peer({
          notAnswering: true,
          state: 'failing',
          consecutiveFailures: 1,
          lastError: 'ReceiveIncomingMessage timed out',
          dueRows: 7,
        }),
      ),
      /^beta ws:\/\/beta\.example\/ws: connected but not answering \(one call at a time until one succeeds\), FAILING: 1 call\(s\) in a row, last error: ReceiveIncomingMessage timed out, no success yet, 7 row\(s\) waiting$/,
    );
    assert.match(describePeer(peer({ connected: false })), /: not connected, up,/);
  });
});
