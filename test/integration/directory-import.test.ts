/**
 * Import of an unknown user asks every known server at once; the request waits one deadline: peers that accept a
 * connection and then never answer must not hold up a SendMessagePair past SHINE_FIRST_ATTEMPT_WAIT_MS.
 */
import assert from 'node:assert/strict';
import type { AddressInfo, Server, Socket } from 'node:net';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';
import { startNetwork } from '../helpers/network.js';
import { textPair } from '../helpers/federation.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';
import { freePort } from '../helpers/server-process.js';

/** A loopback TCP server that accepts connections and never says a word. */
async function blackHole(): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, sockets };
}

describe('directory: importing an unknown user', () => {
  it('asks every known server in parallel and answers within firstAttemptWaitMs though none of them answers', async () => {
    const holes = await Promise.all([blackHole(), blackHole(), blackHole()]);
    try {
      const firstAttemptWaitMs = 600;
      const s2sTimeoutMs = 4_000;
      await using net = await startNetwork({
        servers: [
          {
            serverLogin: 'alpha',
            peers: holes.map((h, i) => `silent${i}=ws://127.0.0.1:${h.port}/ws`).join(','),
            firstAttemptWaitMs,
            s2sTimeoutMs,
          },
        ],
      });
      const alice = makeUser('alice', ['alpha']);
      await using session = await connectUser(net.servers[0]!.wsUrl, alice);
      const pair = textPair(alice, 'zed');
      const started = Date.now();
      const answer = await session.request('SendMessagePair', {
        incomingBlobB64: pair.incomingBlobB64,
        outgoingBlobB64: pair.outgoingBlobB64,
      });
      const tookMs = Date.now() - started;
      assert.equal(answer.ok ? 'ok' : answer.error.code, 'USER_NOT_FOUND');
      // One deadline for all of them (plus slack for a loaded machine), far below one call's timeout.
      assert.ok(tookMs < firstAttemptWaitMs + 1_000, `answered after ${tookMs} ms`);
      assert.ok(tookMs >= firstAttemptWaitMs - 50, `gave the servers their time (${tookMs} ms)`);
      for (const [i, h] of holes.entries()) assert.ok(h.sockets.size > 0, `silent${i} was asked`);
      assert.equal(await net.servers[0]!.ctx.store.directory.getUser('zed'), null, 'nothing stored');
    } finally {
      for (const h of holes) {
        for (const s of h.sockets) s.destroy();
        h.server.close();
      }
    }
  });

  it('imports a profile that comes after the deadline, so the next request finds the user', async () => {
    // alpha reaches beta through a relay (the address in beta's descriptor).
    const [betaPort, alphaPort] = [await freePort(), await freePort()];
    await using proxy = await startWsProxy(`ws://127.0.0.1:${betaPort}/ws`);
    await using netB = await startNetwork({
      servers: [
        {
          serverLogin: 'beta',
          port: betaPort,
          publicWsUrl: proxy.wsUrl,
          peers: `alpha=ws://127.0.0.1:${alphaPort}/ws`,
        },
      ],
    });
    const bob = makeUser('bob', ['beta']);
    await (await connectUser(netB.servers[0]!.wsUrl, bob)).close();
    // beta answers alpha's profile question only when the test lets the question through.
    let asked = 0;
    proxy.filter = (frame) => (frame?.op === 'GetUserProfile' ? (asked++, 'hold') : 'pass');
    await using netA = await startNetwork({
      servers: [
        {
          serverLogin: 'alpha',
          port: alphaPort,
          peers: `beta=ws://127.0.0.1:${betaPort}/ws`,
          firstAttemptWaitMs: 300,
          s2sTimeoutMs: 20_000,
        },
      ],
    });
    const alpha = netA.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const send = async (text: string) => {
      const pair = textPair(alice, 'bob', { body: text });
      const answer = await session.request('SendMessagePair', {
        incomingBlobB64: pair.incomingBlobB64,
        outgoingBlobB64: pair.outgoingBlobB64,
      });
      return answer.ok ? 'ok' : answer.error.code;
    };
    assert.equal(await send('first'), 'USER_NOT_FOUND', 'no profile within the deadline');
    // The question is on its way (connecting and ServerAuth may outlast the deadline): beta holds it.
    await waitUntil(() => asked === 1, 10_000, 'beta asked');
    assert.equal(await alpha.ctx.store.directory.getUser('bob'), null);

    assert.equal(proxy.releaseHeld(), 1);
    await waitUntil(async () => (await alpha.ctx.store.directory.getUser('bob')) !== null, 10_000, 'bob imported');
    assert.equal(await send('second'), 'ok', 'the next request finds bob, without waiting out a miss');
    assert.equal(asked, 1, 'and beta was not asked again');
  });
});
