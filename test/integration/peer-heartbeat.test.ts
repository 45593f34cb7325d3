/**
 * Heartbeats on the outgoing peer connection: alpha reaches beta through a relay that turns the open
 * connection half-open (nothing passes, nothing closes). The silent connection must be found and
 * replaced within the heartbeat bound, calls waiting on it must fail before their own timeout, and the
 * next attempt must go through a fresh connection. Without heartbeats every later call rides the dead
 * socket until it times out, forever.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createIdentity } from '../../src/client/index.js';
import type { DirectMessageEvent } from '../../src/protocol/ops.js';
import { HEARTBEATS_PER_TIMEOUT } from '../../src/server/federation/peer-client.js';
import { createLogger } from '../../src/server/log.js';
import { connectIdentity } from '../helpers/federated-processes.js';
import { FAST } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { freePort } from '../helpers/server-process.js';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';

const S2S_TIMEOUT_MS = 3000;
/** A silent connection is dropped at the second heartbeat after it went silent. */
const DETECTION_BOUND_MS = (2 * S2S_TIMEOUT_MS) / HEARTBEATS_PER_TIMEOUT;

describe('peer connection heartbeats', () => {
  it('a half-open connection to a peer is replaced; calls on it fail before their timeout, later ones succeed', async () => {
    const [portA, portB] = await Promise.all([freePort(), freePort()]);
    await using relay = await startWsProxy(`ws://127.0.0.1:${portB}/ws`);
    const alphaLog: { msg: string }[] = [];
    const common = {
      ...FAST,
      s2sTimeoutMs: S2S_TIMEOUT_MS,
      // The worker's attempt 2 comes after the detection bound, attempt 3 much later.
      retryScheduleMs: `0,${DETECTION_BOUND_MS + 1500},60000,120000,180000`,
    };
    await using net = await startNetwork({
      servers: [
        {
          ...common,
          serverLogin: 'alpha',
          port: portA,
          peers: `beta=ws://127.0.0.1:${portB}/ws`,
          log: createLogger('debug', (line) => alphaLog.push(JSON.parse(line) as { msg: string })),
        },
        // Peers dial beta at the relay: its descriptor names the relay's URL.
        {
          ...common,
          serverLogin: 'beta',
          port: portB,
          publicWsUrl: relay.wsUrl,
          peers: `alpha=ws://127.0.0.1:${portA}/ws`,
        },
      ],
    });
    const [alpha, beta] = [net.servers[0]!, net.servers[1]!];
    await using ca = await connectIdentity(alpha.wsUrl, createIdentity('alice'), ['alpha'], 'laptop');
    await using cb = await connectIdentity(beta.wsUrl, createIdentity('bob'), ['beta'], 'phone');
    const received: string[] = [];
    cb.on('DirectMessage', (e: DirectMessageEvent) => received.push(e.messageKey));

    const first = await ca.sendText('bob', 'through the relay');
    assert.equal(first.deliveryState, 'delivered');
    assert.equal(relay.connections, 1);

    relay.blackholeOpen();
    const started = Date.now();
    const second = await ca.sendText('bob', 'after the path went silent');
    const answeredAfterMs = Date.now() - started;
    assert.equal(second.deliveryState, 'accepted', 'the silent connection delivered nothing');
    assert.ok(
      answeredAfterMs < S2S_TIMEOUT_MS,
      `the calls on the silent connection failed when it was dropped (${answeredAfterMs} ms), not at their timeout`,
    );
    assert.ok(alphaLog.some((e) => e.msg === 'peer connection silent: replacing it'));

    await waitUntil(() => received.includes(second.incomingKey), 10_000, 'the retry delivered over a new connection');
    assert.equal(relay.connections, 2, 'alpha dialled beta again');
  });
});
