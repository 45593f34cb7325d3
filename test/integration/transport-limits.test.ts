/**
 * Abuse limits of docs/protocol.md §5 against real sockets, time on a ManualClock: a socket that has not
 * logged in within SHINE_AUTH_TIMEOUT_MS is closed with 1008; connections and AuthChallenges per source
 * address and requests per login across its sessions are limited (HTTP 429 / 429 RATE_LIMITED).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { RunningServer } from '../../src/server/app.js';
import { ManualClock } from '../../src/server/clock.js';
import { authSigningText, signText } from '../../src/protocol/identity.js';
import type { OpResults } from '../../src/protocol/ops.js';
import { assertError } from '../helpers/assert.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import { assertSessionWorks, connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

describe('transport limits', () => {
  const clock = new ManualClock();
  let net: TestNetwork;
  let server: RunningServer;

  before(async () => {
    net = await startNetwork({
      clock,
      servers: [
        {
          serverLogin: 'alpha',
          authTimeoutMs: 10_000,
          maxConnectionsPerAddress: 6,
          challengeLimit: '1,3',
          loginRateLimit: '1,4',
        },
      ],
    });
    server = net.servers[0]!;
  });
  after(() => net.close());

  /** Closes the sockets and waits until the server has counted them out (a new one is let in). */
  async function closeAll(sockets: RawClient[]): Promise<void> {
    await Promise.all(sockets.map((s) => s.close()));
    await waitUntil(() => server.ctx.hub.size === 0, 10_000, 'the server to see the sockets closed');
  }

  it('closes a socket that has not logged in within authTimeoutMs with 1008; a logged-in one stays', async () => {
    clock.advance(60_000); // fresh challenge buckets
    const idle = await connectRaw(server.wsUrl);
    const user = await connectUser(server.wsUrl, makeUser('dora', ['alpha']));
    clock.advance(9_999);
    assertError(await idle.request('GetUserProfile', { login: 'nobody' }), 404, 'USER_NOT_FOUND');
    assert.ok(idle.isOpen);
    clock.advance(1);
    assert.deepEqual(await idle.closed, { code: 1008, reason: 'not authenticated in time' });
    await assertSessionWorks(user);
    await closeAll([user]);
  });

  it('refuses an upgrade over maxConnectionsPerAddress with HTTP 429, and lets one in once a socket closes', async () => {
    const open: RawClient[] = [];
    for (let i = 0; i < 6; i++) open.push(await connectRaw(server.wsUrl));
    await assert.rejects(connectRaw(server.wsUrl), /Unexpected server response: 429/);
    // The open ones are untouched.
    assertError(await open[0]!.request('GetUserProfile', { login: 'nobody' }), 404, 'USER_NOT_FOUND');
    await open.pop()!.close();
    let next: RawClient | undefined;
    await waitUntil(
      async () => (next = await connectRaw(server.wsUrl).catch(() => undefined)) !== undefined,
      10_000,
      'a connection to be let in again',
    );
    await closeAll([...open, next!]);
  });

  it('answers AuthChallenge over the per-address limit with 429 RATE_LIMITED, changing nothing; it refills', async () => {
    clock.advance(60_000);
    const erin = makeUser('erin', ['alpha']);
    const a = await connectRaw(server.wsUrl);
    const b = await connectRaw(server.wsUrl);
    await a.call('RegisterUser', { profile: erin.profile });
    const challenge = await a.call<OpResults['AuthChallenge']>('AuthChallenge');
    await b.call('AuthChallenge');
    await b.call('AuthChallenge');
    // The fourth of a burst of 3 from this address, on another socket: refused, and a's challenge stays.
    assertError(await a.request('AuthChallenge'), 429, 'RATE_LIMITED');
    const signatureB64 = signText(
      authSigningText({ server: 'alpha', challengeB64: challenge.challengeB64, login: 'erin', deviceId: 'd1' }),
      erin.seed,
    );
    assert.ok((await a.request('AuthLogin', { login: 'erin', deviceId: 'd1', signatureB64 })).ok);
    assertError(await b.request('AuthChallenge'), 429, 'RATE_LIMITED');
    clock.advance(1_000);
    await b.call('AuthChallenge');
    assertError(await b.request('AuthChallenge'), 429, 'RATE_LIMITED');
    await closeAll([a, b]);
  });

  it('limits the requests of one login across its sessions; another login is not affected', async () => {
    clock.advance(60_000);
    const fay = makeUser('fay', ['alpha']);
    const phone = await connectUser(server.wsUrl, fay, 'phone');
    const laptop = await connectUser(server.wsUrl, fay, 'laptop');
    const other = await connectUser(server.wsUrl, makeUser('gus', ['alpha']));
    for (const s of [phone, laptop, phone, laptop]) assert.ok((await s.request('GetConversations', {})).ok);
    assertError(await phone.request('GetConversations', {}), 429, 'RATE_LIMITED');
    assertError(await laptop.request('GetConversations', {}), 429, 'RATE_LIMITED');
    assert.ok((await other.request('GetConversations', {})).ok);
    clock.advance(1_000);
    assert.ok((await laptop.request('GetConversations', {})).ok);
    await closeAll([phone, laptop, other]);
  });
});
