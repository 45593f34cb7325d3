/**
 * Import of an unknown user asks every known server at once under one deadline: peers that accept a
 * connection and then never answer must not hold up a SendMessagePair past SHINE_FIRST_ATTEMPT_WAIT_MS.
 */
import assert from 'node:assert/strict';
import type { AddressInfo, Server, Socket } from 'node:net';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';
import { startNetwork } from '../helpers/network.js';
import { textPair } from '../helpers/federation.js';
import { connectUser, makeUser } from '../helpers/users.js';

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
});
