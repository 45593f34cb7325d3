/** Signed test containers with fixed keys, for store and service tests. */
import type { Container, ContainerFields, MessageType } from '../../src/protocol/container.js';
import { encodeSigned } from '../../src/protocol/container.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';

/** A deterministic signing seed per login. */
export function seedOf(login: string): Uint8Array {
  const seed = new Uint8Array(32);
  for (let i = 0; i < login.length; i++) seed[i % 32]! ^= login.charCodeAt(i);
  seed[31] = 7;
  return seed;
}

export const publicKeyOf = (login: string): Uint8Array => ed25519PublicKey(seedOf(login));

export interface PairSpec {
  type?: 1 | 3 | 5 | 7;
  from: string;
  to: string;
  timeMs: number;
  nonce?: number;
  revisionTimeMs?: number;
  reencryptedAtMs?: number;
  body?: Uint8Array;
  /** Different bodies per copy (text only); defaults to body for both. */
  outgoingBody?: Uint8Array;
}

/** Builds a signed, consistent pair (incoming, outgoing). */
export function testPair(spec: PairSpec): { incoming: Container; outgoing: Container } {
  const type = spec.type ?? 1;
  const fields: Omit<ContainerFields, 'messageType'> = {
    fromLogin: spec.from,
    toLogin: spec.to,
    timeMs: spec.timeMs,
    nonce: spec.nonce ?? 1,
    revisionTimeMs: spec.revisionTimeMs ?? 0,
    reencryptedAtMs: spec.reencryptedAtMs ?? 0,
    body: spec.body ?? new TextEncoder().encode(`msg-${spec.timeMs}`),
  };
  const seed = seedOf(spec.from);
  return {
    incoming: encodeSigned({ ...fields, messageType: type as MessageType }, seed),
    outgoing: encodeSigned(
      { ...fields, body: spec.outgoingBody ?? fields.body, messageType: (type + 1) as MessageType },
      seed,
    ),
  };
}
