/**
 * Directory and session ops of docs/protocol.md §4 and §5.1 against a real server: RegisterUser, GetUserProfile,
 * AuthChallenge/AuthLogin and the static directory file. Each rejection leaves the directory and the
 * other sessions as they were.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { toBase64 } from '../../src/protocol/bytes.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import type { UserProfile } from '../../src/protocol/identity.js';
import { authSigningText, signDescriptor, signText } from '../../src/protocol/identity.js';
import type { OpResults } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import { startServer } from '../../src/server/app.js';
import { ManualClock } from '../../src/server/clock.js';
import { assertError } from '../helpers/assert.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import { TEST_DB_POOL_SIZE, freshTestDb, queryServerDb } from '../helpers/test-db.js';
import type { TestUser } from '../helpers/users.js';
import { assertSessionWorks, connectUser, login, makeUser, profileFor } from '../helpers/users.js';

/** The profile the server answers for login, or null on USER_NOT_FOUND. */
async function storedProfile(c: RawClient, loginName: string): Promise<UserProfile | null> {
  const answer = await c.request<OpResults['GetUserProfile']>('GetUserProfile', { login: loginName });
  if (!answer.ok && answer.error.code === 'USER_NOT_FOUND') return null;
  assert.ok(answer.ok, JSON.stringify(answer));
  return answer.payload.profile;
}

/** AuthLogin with an explicit signature over the socket's latest challenge (or none). */
async function loginWith(
  c: RawClient,
  loginName: string,
  challengeB64: string,
  seed: Uint8Array,
  deviceId = 'device-1',
  server = 'alpha',
) {
  const signatureB64 = signText(authSigningText({ server, challengeB64, login: loginName, deviceId }), seed);
  return c.request<OpResults['AuthLogin']>('AuthLogin', { login: loginName, deviceId, signatureB64 });
}

const challengeOf = (c: RawClient) => c.call<OpResults['AuthChallenge']>('AuthChallenge');

describe('directory: RegisterUser and GetUserProfile', () => {
  let net: TestNetwork;
  let server: RunningServer;
  let bystander: RawClient;
  let c: RawClient;

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    server = net.servers[0]!;
    bystander = await connectUser(server.wsUrl, makeUser('bystander', ['alpha']));
    c = await connectRaw(server.wsUrl);
  });
  after(async () => {
    await c.close();
    await bystander.close();
    await net.close();
  });

  it('registers a new user, and the identical profile again is a success', async () => {
    const alice = makeUser('alice', ['alpha', 'beta']);
    const first = await c.call<OpResults['RegisterUser']>('RegisterUser', { profile: alice.profile });
    assert.deepEqual(first.profile, alice.profile);
    const again = await c.call<OpResults['RegisterUser']>('RegisterUser', { profile: alice.profile });
    assert.deepEqual(again.profile, alice.profile);
    assert.deepEqual(await storedProfile(c, 'alice'), alice.profile);
  });

  it('accepts a higher version with the same key, and the user can log in with it', async () => {
    const user = makeUser('upgrader', ['alpha']);
    await c.call('RegisterUser', { profile: user.profile });
    user.profile = profileFor(user, { version: 2, accessServers: ['beta', 'alpha'], updatedAtMs: 1_774_700_100_000 });
    await c.call('RegisterUser', { profile: user.profile });
    assert.deepEqual(await storedProfile(c, 'upgrader'), user.profile);
    await using s = await connectUser(server.wsUrl, user);
    await assertSessionWorks(s);
  });

  it('answers BAD_FIELDS to a malformed profile and stores nothing', async () => {
    const user = makeUser('shapeless', ['alpha']);
    const bad: Record<string, unknown>[] = [
      { ...user.profile, login: 'No Caps' },
      { ...user.profile, accessServers: [] },
      { ...user.profile, accessServers: ['alpha', 'beta', 'gamma'] },
      { ...user.profile, accessServers: ['alpha', 'alpha'] },
      { ...user.profile, signKeyB64: toBase64(new Uint8Array(31)) },
      { ...user.profile, version: 0 },
      { ...user.profile, version: 1.5 },
      { ...user.profile, version: '1' },
    ];
    for (const profile of bad) assertError(await c.request('RegisterUser', { profile }), 400, 'BAD_FIELDS');
    assertError(await c.request('RegisterUser', {}), 400, 'BAD_FIELDS');
    assert.equal(await storedProfile(c, 'shapeless'), null);
    await assertSessionWorks(bystander);
  });

  it('answers BAD_SIGNATURE to a profile whose signature does not verify, and stores nothing', async () => {
    const user = makeUser('forged', ['alpha']);
    const tampered = { ...user.profile, encKeyB64: toBase64(new Uint8Array(32).fill(9)) };
    assertError(await c.request('RegisterUser', { profile: tampered }), 400, 'BAD_SIGNATURE');
    const otherKey = makeUser('forged', ['alpha']);
    assertError(
      await c.request('RegisterUser', { profile: { ...otherKey.profile, signKeyB64: user.signKeyB64 } }),
      400,
      'BAD_SIGNATURE',
    );
    assert.equal(await storedProfile(c, 'forged'), null);
    await assertSessionWorks(bystander);
  });

  it('answers LOCAL_SERVER_NOT_ACCESS_SERVER to a profile that does not name this server', async () => {
    const user = makeUser('elsewhere', ['beta']);
    assertError(await c.request('RegisterUser', { profile: user.profile }), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
    assert.equal(await storedProfile(c, 'elsewhere'), null);
    await assertSessionWorks(bystander);
  });

  it('answers PROFILE_CONFLICT to a known login with another key, keeping the stored profile', async () => {
    const owner = makeUser('taken', ['alpha']);
    await c.call('RegisterUser', { profile: owner.profile });
    const squatter = makeUser('taken', ['alpha']);
    assertError(await c.request('RegisterUser', { profile: squatter.profile }), 409, 'PROFILE_CONFLICT');
    assertError(
      await c.request('RegisterUser', { profile: profileFor(squatter, { version: 9 }) }),
      409,
      'PROFILE_CONFLICT',
    );
    assert.deepEqual(await storedProfile(c, 'taken'), owner.profile);
    await using s = await connectUser(server.wsUrl, owner);
    await assertSessionWorks(s);
    await assertSessionWorks(bystander);
  });

  it('answers PROFILE_CONFLICT to the same or a lower version, keeping the stored profile', async () => {
    const user = makeUser('versioned', ['alpha']);
    const v1 = user.profile;
    const v2 = profileFor(user, { version: 2 });
    await c.call('RegisterUser', { profile: v2 });
    assertError(
      await c.request('RegisterUser', { profile: profileFor(user, { version: 2, updatedAtMs: 1_774_700_999_000 }) }),
      409,
      'PROFILE_CONFLICT',
    );
    assertError(await c.request('RegisterUser', { profile: v1 }), 409, 'PROFILE_CONFLICT');
    assert.deepEqual(await storedProfile(c, 'versioned'), v2);
    await assertSessionWorks(bystander);
  });

  it('serialises concurrent registrations of one login: one key wins, the other conflicts', async () => {
    const a = makeUser('racer', ['alpha']);
    const b = makeUser('racer', ['alpha']);
    const answers = await Promise.all([
      c.request('RegisterUser', { profile: a.profile }),
      c.request('RegisterUser', { profile: b.profile }),
    ]);
    assert.deepEqual(answers.map((x) => x.status).sort(), [200, 409]);
    const winner = answers[0]!.ok ? a : b;
    assert.deepEqual(await storedProfile(c, 'racer'), winner.profile);
  });

  it('answers USER_NOT_FOUND (404) for an unknown or malformed login', async () => {
    assertError(await c.request('GetUserProfile', { login: 'nobody' }), 404, 'USER_NOT_FOUND');
    assertError(await c.request('GetUserProfile', { login: 'Not A Login' }), 404, 'USER_NOT_FOUND');
    assert.ok(await storedProfile(c, 'bystander'));
    await assertSessionWorks(bystander);
  });
});

describe('directory: AuthChallenge and AuthLogin', () => {
  const clock = new ManualClock();
  let net: TestNetwork;
  let server: RunningServer;
  let bystander: RawClient;
  let dataDir: string;
  // Known to alpha through the static directory file: dave is alpha's user, carol is beta's.
  const dave = makeUser('dave', ['alpha']);
  const carol = makeUser('carol', ['beta']);
  const betaSeed = new Uint8Array(randomBytes(32));
  const betaDescriptor = signDescriptor(
    { serverLogin: 'beta', wsUrl: 'ws://beta.invalid:9/ws', signKeyB64: toBase64(ed25519PublicKey(betaSeed)) },
    betaSeed,
  );

  before(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'shine-dir-'));
    const directoryFile = join(dataDir, 'directory.json');
    await writeFile(directoryFile, JSON.stringify({ servers: [betaDescriptor], users: [dave.profile, carol.profile] }));
    // The expiry test waits out a challenge's 60 s unauthenticated: past the default login deadline.
    net = await startNetwork({ clock, servers: [{ serverLogin: 'alpha', directoryFile, authTimeoutMs: 600_000 }] });
    server = net.servers[0]!;
    bystander = await connectUser(server.wsUrl, makeUser('bystander', ['alpha']));
  });
  after(async () => {
    await bystander.close();
    await net.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('issues a 32-byte challenge valid for 60 s, naming this server', async () => {
    await using c = await connectRaw(server.wsUrl);
    const ch = await challengeOf(c);
    assert.equal(ch.serverLogin, 'alpha');
    assert.equal(Buffer.from(ch.challengeB64, 'base64').length, 32);
    assert.equal(ch.expiresAtMs, clock.now() + 60_000);
    assert.notEqual((await challengeOf(c)).challengeB64, ch.challengeB64);
  });

  it('logs in and answers {login, deviceId, sessionId}; the session is bound in the hub', async () => {
    const user = makeUser('logger', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    await c.call('RegisterUser', { profile: user.profile });
    const answer = await login(c, user, 'laptop_1');
    assert.ok(answer.ok, JSON.stringify(answer));
    assert.equal(answer.payload.login, 'logger');
    assert.equal(answer.payload.deviceId, 'laptop_1');
    assert.equal(typeof answer.payload.sessionId, 'string');
    assert.deepEqual(
      server.ctx.hub.sessionsOf('logger').map((s) => s.id),
      [answer.payload.sessionId],
    );
    assertError(await login(c, user), 403, 'FORBIDDEN');
    await assertSessionWorks(c);
  });

  it('lets a static-file user of this server log in', async () => {
    await using c = await connectRaw(server.wsUrl);
    assert.equal((await login(c, dave)).status, 200);
    assert.deepEqual(await storedProfile(c, 'dave'), dave.profile);
  });

  it('answers AUTH_FAILED to an unknown login, and the socket stays unauthenticated', async () => {
    const ghost = makeUser('ghost', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    assertError(await login(c, ghost), 401, 'AUTH_FAILED');
    // A login that could not be anybody's is unknown too (docs/protocol.md §5.1), not a schema error.
    for (const badLogin of ['', 'x'.repeat(65), 'Not A Login']) {
      await c.call('AuthChallenge', {});
      assertError(
        await c.request('AuthLogin', {
          login: badLogin,
          deviceId: 'device-1',
          signatureB64: toBase64(new Uint8Array(64)),
        }),
        401,
        'AUTH_FAILED',
      );
    }
    assertError(await c.request('GetConversations', {}), 401, 'NOT_AUTHENTICATED');
    assert.equal(server.ctx.hub.sessionsOf('ghost').length, 0);
    await assertSessionWorks(bystander);
  });

  it('answers AUTH_FAILED to a bad signature: another key, another device, another server', async () => {
    const user = makeUser('signer', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    await c.call('RegisterUser', { profile: user.profile });
    const impostor = makeUser('signer', ['alpha']);
    assertError(await loginWith(c, 'signer', (await challengeOf(c)).challengeB64, impostor.seed), 401, 'AUTH_FAILED');
    const ch = await challengeOf(c);
    const forOtherDevice = signText(
      authSigningText({ server: 'alpha', challengeB64: ch.challengeB64, login: 'signer', deviceId: 'other' }),
      user.seed,
    );
    assertError(
      await c.request('AuthLogin', { login: 'signer', deviceId: 'device-1', signatureB64: forOtherDevice }),
      401,
      'AUTH_FAILED',
    );
    assertError(
      await loginWith(c, 'signer', (await challengeOf(c)).challengeB64, user.seed, 'device-1', 'beta'),
      401,
      'AUTH_FAILED',
    );
    assertError(await c.request('GetConversations', {}), 401, 'NOT_AUTHENTICATED');
    assert.equal((await login(c, user)).status, 200);
    await assertSessionWorks(bystander);
  });

  it('answers AUTH_FAILED without a challenge, to a reused one, and to another socket’s', async () => {
    const user = makeUser('reuser', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    await c.call('RegisterUser', { profile: user.profile });
    assertError(await loginWith(c, 'reuser', toBase64(new Uint8Array(32)), user.seed), 401, 'AUTH_FAILED');
    // A failed attempt uses the challenge up: the right signature over it no longer works.
    const ch = await challengeOf(c);
    assertError(
      await loginWith(c, 'reuser', ch.challengeB64, user.seed, 'wrong-device-signed', 'beta'),
      401,
      'AUTH_FAILED',
    );
    assertError(await loginWith(c, 'reuser', ch.challengeB64, user.seed), 401, 'AUTH_FAILED');
    // Only the latest challenge of a socket counts, and only on that socket.
    const older = await challengeOf(c);
    await challengeOf(c);
    assertError(await loginWith(c, 'reuser', older.challengeB64, user.seed), 401, 'AUTH_FAILED');
    await using other = await connectRaw(server.wsUrl);
    const foreign = await challengeOf(other);
    await challengeOf(c);
    assertError(await loginWith(c, 'reuser', foreign.challengeB64, user.seed), 401, 'AUTH_FAILED');
    assert.equal(server.ctx.hub.sessionsOf('reuser').length, 0);
    assert.equal((await login(c, user)).status, 200);
    await assertSessionWorks(bystander);
  });

  it('answers AUTH_FAILED to an expired challenge (injected clock)', async () => {
    const user = makeUser('sleeper', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    await c.call('RegisterUser', { profile: user.profile });
    const ch = await challengeOf(c);
    clock.advance(60_001);
    assertError(await loginWith(c, 'sleeper', ch.challengeB64, user.seed), 401, 'AUTH_FAILED');
    const fresh = await challengeOf(c);
    clock.advance(60_000);
    assert.equal((await loginWith(c, 'sleeper', fresh.challengeB64, user.seed)).status, 200);
    await assertSessionWorks(bystander);
  });

  it('answers LOCAL_SERVER_NOT_ACCESS_SERVER to a known user of another server', async () => {
    await using c = await connectRaw(server.wsUrl);
    assertError(await login(c, carol), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
    assertError(await c.request('GetConversations', {}), 401, 'NOT_AUTHENTICATED');
    assert.equal(server.ctx.hub.sessionsOf('carol').length, 0);
    // GetUserProfile answers any user the directory knows, not only local ones.
    assert.deepEqual(await storedProfile(c, 'carol'), carol.profile);
    await assertSessionWorks(bystander);
  });

  it('stores the static file’s servers', async () => {
    const record = await server.ctx.directory.lookupServer('beta');
    assert.equal(record?.source, 'static');
    assert.deepEqual(record?.descriptor, betaDescriptor);
    assert.equal((await server.ctx.directory.lookupServer('alpha'))?.source, 'self');
  });

  it('sees a descriptor another process pinned in the shared database within the cache’s 10 s', async () => {
    const moved = signDescriptor({ ...betaDescriptor, wsUrl: 'ws://beta-moved.invalid:9/ws' }, betaSeed);
    assert.deepEqual((await server.ctx.directory.lookupServer('beta'))?.descriptor, betaDescriptor);
    await queryServerDb(server, 'UPDATE servers SET ws_url = ?, descriptor_json = ? WHERE server_login = ?', [
      moved.wsUrl,
      JSON.stringify(moved),
      'beta',
    ]);
    // Cached: each delivery's receipt check asks for its signer's key, so the read is not repeated.
    assert.deepEqual((await server.ctx.directory.lookupServer('beta'))?.descriptor, betaDescriptor);
    clock.advance(10_001);
    assert.deepEqual((await server.ctx.directory.lookupServer('beta'))?.descriptor, moved);
    assert.deepEqual(await server.ctx.directory.pinnedServer('beta'), moved);
  });
});

describe('directory: static file validation', () => {
  async function startWith(users: unknown[], servers: unknown[] = []) {
    const dir = await mkdtemp(join(tmpdir(), 'shine-dir-'));
    const directoryFile = join(dir, 'directory.json');
    await writeFile(directoryFile, JSON.stringify({ servers, users }));
    const db = await freshTestDb(dir);
    try {
      const server = await startServer({
        serverLogin: 'alpha',
        port: 0,
        dataDir: dir,
        db: db.url,
        dbPoolSize: TEST_DB_POOL_SIZE,
        directoryFile,
        logLevel: 'silent',
      });
      await server.close();
    } finally {
      await db.drop();
      await rm(dir, { recursive: true, force: true });
    }
  }

  it('refuses to start on a profile whose signature does not verify', async () => {
    const user: TestUser = makeUser('eve', ['alpha']);
    await assert.rejects(startWith([{ ...user.profile, version: 7 }]), /users\[0\].*signature/);
  });

  it('refuses to start on a malformed profile or descriptor', async () => {
    await assert.rejects(startWith([{ login: 'eve' }]), /users\[0\]/);
    await assert.rejects(
      startWith([], [{ serverLogin: 'beta', wsUrl: 'http://x', signKeyB64: '', signatureB64: '' }]),
      /servers\[0\]/,
    );
  });

  it('starts on a well-formed file', async () => {
    await startWith([makeUser('eve', ['alpha']).profile]);
  });
});
