/** Test users: keys, signed profiles, and the AuthChallenge/AuthLogin handshake over a raw socket. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { toBase64 } from '../../src/protocol/bytes.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import type { UnsignedProfile, UserProfile } from '../../src/protocol/identity.js';
import { authSigningText, signProfile, signText } from '../../src/protocol/identity.js';
import type { OpResults } from '../../src/protocol/ops.js';
import type { RawClient } from './raw-client.js';
import { connectRaw } from './raw-client.js';

export interface TestUser {
  login: string;
  seed: Uint8Array;
  signKeyB64: string;
  /** The latest profile made with profileFor (version 1 at first). */
  profile: UserProfile;
}

/** A user with a fresh key (or `seed`) and a signed version-1 profile naming accessServers. */
export function makeUser(
  login: string,
  accessServers: string[],
  seed: Uint8Array = new Uint8Array(randomBytes(32)),
): TestUser {
  const signKeyB64 = toBase64(ed25519PublicKey(seed));
  const user: TestUser = { login, seed, signKeyB64, profile: undefined as unknown as UserProfile };
  user.profile = profileFor(user, { accessServers, version: 1 });
  return user;
}

/** A new signed profile of the user: the current one with `changes` applied (the user is not modified). */
export function profileFor(user: TestUser, changes: Partial<UnsignedProfile> = {}): UserProfile {
  const base: UnsignedProfile = user.profile
    ? { ...user.profile }
    : {
        login: user.login,
        signKeyB64: user.signKeyB64,
        encKeyB64: toBase64(new Uint8Array(32).fill(7)),
        accessServers: [],
        version: 1,
        updatedAtMs: 1_774_700_000_000,
      };
  const { signatureB64: _drop, ...unsigned } = { ...base, ...changes, signatureB64: '' };
  return signProfile(unsigned, user.seed);
}

/** AuthChallenge + AuthLogin on the socket; resolves with the raw AuthLogin answer. */
export async function login(client: RawClient, user: TestUser, deviceId = 'device-1') {
  const challenge = await client.call<OpResults['AuthChallenge']>('AuthChallenge');
  const signatureB64 = signText(
    authSigningText({
      server: challenge.serverLogin,
      challengeB64: challenge.challengeB64,
      login: user.login,
      deviceId,
    }),
    user.seed,
  );
  return client.request<OpResults['AuthLogin']>('AuthLogin', { login: user.login, deviceId, signatureB64 });
}

/** Opens a socket, registers the user (idempotent) and logs in; the socket is then a user session. */
export async function connectUser(wsUrl: string, user: TestUser, deviceId = 'device-1'): Promise<RawClient> {
  const client = await connectRaw(wsUrl);
  await client.call('RegisterUser', { profile: user.profile });
  const answer = await login(client, user, deviceId);
  if (!answer.ok) throw new Error(`login of ${user.login} failed: ${answer.error.code} ${answer.error.message}`);
  return client;
}

/** Asserts that a logged-in session is still open and still answers a user op. */
export async function assertSessionWorks(client: RawClient): Promise<void> {
  assert.ok(client.isOpen, 'session socket is still open');
  const answer = await client.request('GetConversations', {});
  assert.equal(answer.status, 200, `GetConversations answered ${JSON.stringify(answer)}`);
}
