/** A user's key material (docs/protocol.md §4) and the signed profile made from it. Runs in Node and browsers. */
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { fromBase64, toBase64 } from '../protocol/bytes.js';
import type { UserProfile } from '../protocol/identity.js';
import { signProfile } from '../protocol/identity.js';
import { isValidLogin } from '../protocol/login.js';

/** One user's keys: Ed25519 for signatures, X25519 for end-to-end encryption. */
export interface Identity {
  login: string;
  /** 32-byte Ed25519 seed (the signing secret). */
  signSeed: Uint8Array;
  signPublicKey: Uint8Array;
  /** 32-byte X25519 secret key. */
  encSecretKey: Uint8Array;
  encPublicKey: Uint8Array;
}

/** What an identity file holds; public keys are stored too so a corrupted file is caught on load. */
export interface IdentityFile {
  format: 'shine-identity-v1';
  login: string;
  signSeedB64: string;
  signKeyB64: string;
  encSecretKeyB64: string;
  encKeyB64: string;
}

/** Creates fresh keys for login. */
export function createIdentity(login: string): Identity {
  if (!isValidLogin(login)) throw new Error(`invalid login: ${login}`);
  const sign = ed25519.keygen();
  const enc = x25519.keygen();
  return {
    login,
    signSeed: sign.secretKey,
    signPublicKey: sign.publicKey,
    encSecretKey: enc.secretKey,
    encPublicKey: enc.publicKey,
  };
}

/** Serialises an identity for storage (it contains secrets: store it private). */
export function identityToJson(identity: Identity): string {
  const file: IdentityFile = {
    format: 'shine-identity-v1',
    login: identity.login,
    signSeedB64: toBase64(identity.signSeed),
    signKeyB64: toBase64(identity.signPublicKey),
    encSecretKeyB64: toBase64(identity.encSecretKey),
    encKeyB64: toBase64(identity.encPublicKey),
  };
  return JSON.stringify(file, null, 2) + '\n';
}

/** Parses an identity file; throws when it is malformed or its public keys do not match its secrets. */
export function identityFromJson(text: string): Identity {
  const o = JSON.parse(text) as Partial<Record<keyof IdentityFile, unknown>>;
  if (o.format !== 'shine-identity-v1') throw new Error('not a shine-identity-v1 file');
  if (!isValidLogin(o.login)) throw new Error('identity file: bad login');
  const key = (name: keyof IdentityFile): Uint8Array => {
    const v = o[name];
    const raw = typeof v === 'string' ? fromBase64(v) : null;
    if (!raw || raw.length !== 32) throw new Error(`identity file: ${name} must be 32 bytes of base64`);
    return raw;
  };
  const identity: Identity = {
    login: o.login,
    signSeed: key('signSeedB64'),
    signPublicKey: key('signKeyB64'),
    encSecretKey: key('encSecretKeyB64'),
    encPublicKey: key('encKeyB64'),
  };
  if (
    toBase64(ed25519.getPublicKey(identity.signSeed)) !== o.signKeyB64 ||
    toBase64(x25519.getPublicKey(identity.encSecretKey)) !== o.encKeyB64
  ) {
    throw new Error('identity file: public keys do not match the secret keys');
  }
  return identity;
}

/** The signed profile to register: version must grow with every change (docs/protocol.md §4). */
export function makeProfile(
  identity: Identity,
  accessServers: readonly string[],
  version: number,
  updatedAtMs: number,
): UserProfile {
  return signProfile(
    {
      login: identity.login,
      signKeyB64: toBase64(identity.signPublicKey),
      encKeyB64: toBase64(identity.encPublicKey),
      accessServers: [...accessServers],
      version,
      updatedAtMs,
    },
    identity.signSeed,
  );
}
