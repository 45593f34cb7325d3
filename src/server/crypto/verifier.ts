/**
 * Native Ed25519 verifiers for the server. Both honour the SignatureVerifier contract of
 * src/protocol/ed25519.ts: a boolean for any input, never an exception.
 */
import { createPublicKey, verify as nodeVerify } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { createRequire } from 'node:module';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { isSmallOrderEncoding, isWeakKeyEncoding } from '../../protocol/ed25519.js';

const SIGNATURE_BYTES = 64;
const PUBLIC_KEY_BYTES = 32;

/** The part of sodium-native this module uses (the package ships no type declarations). */
interface SodiumSign {
  crypto_sign_verify_detached(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  crypto_sign_seed_keypair(publicKey: Uint8Array, secretKey: Uint8Array, seed: Uint8Array): void;
  crypto_sign_detached(signature: Uint8Array, message: Uint8Array, secretKey: Uint8Array): void;
}

const sodium = createRequire(import.meta.url)('sodium-native') as SodiumSign;

/**
 * libsodium's crypto_sign_verify_detached. Lengths are checked here because sodium-native asserts
 * (throws) on a short signature or a wrong-sized key and silently reads the first 64 bytes of a longer
 * signature. libsodium also rejects small-order public keys and non-canonical encodings.
 */
export const sodiumVerifier: SignatureVerifier = {
  verify(signature, message, publicKey) {
    if (signature.length !== SIGNATURE_BYTES || publicKey.length !== PUBLIC_KEY_BYTES) return false;
    try {
      return sodium.crypto_sign_verify_detached(signature, message, publicKey);
    } catch {
      return false;
    }
  },
};

/**
 * libsodium's crypto_sign_detached for one 32-byte seed: the signer of the server's own key
 * (src/server/keys.ts). Ed25519 is deterministic, so it signs exactly as the pure-JS signer does.
 */
export function sodiumSigner(seed: Uint8Array): (message: Uint8Array) => Uint8Array {
  if (seed.length !== PUBLIC_KEY_BYTES) throw new Error('an Ed25519 seed is 32 bytes');
  const publicKey = Buffer.alloc(PUBLIC_KEY_BYTES);
  const secretKey = Buffer.alloc(2 * PUBLIC_KEY_BYTES);
  sodium.crypto_sign_seed_keypair(publicKey, secretKey, Buffer.from(seed));
  return (message) => {
    const signature = Buffer.alloc(SIGNATURE_BYTES);
    sodium.crypto_sign_detached(signature, message, secretKey);
    return new Uint8Array(signature.buffer, signature.byteOffset, SIGNATURE_BYTES);
  };
}

/** DER SubjectPublicKeyInfo header for an Ed25519 key (RFC 8410); the 32 raw key bytes follow it. */
const ED25519_SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);
const KEY_CACHE_LIMIT = 1024;
// Building a KeyObject costs about as much as a verification, and a server sees few distinct senders.
const keyCache = new Map<string, KeyObject>();

function keyObjectFor(publicKey: Uint8Array): KeyObject {
  const id = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('latin1');
  const hit = keyCache.get(id);
  if (hit) {
    // Re-insert so the Map's insertion order is least-recently-used first.
    keyCache.delete(id);
    keyCache.set(id, hit);
    return hit;
  }
  const spki = new Uint8Array(ED25519_SPKI_PREFIX.length + PUBLIC_KEY_BYTES);
  spki.set(ED25519_SPKI_PREFIX);
  spki.set(publicKey, ED25519_SPKI_PREFIX.length);
  const key = createPublicKey({ key: Buffer.from(spki.buffer), format: 'der', type: 'spki' });
  if (keyCache.size >= KEY_CACHE_LIMIT) {
    const oldest = keyCache.keys().next().value;
    if (oldest !== undefined) keyCache.delete(oldest);
  }
  keyCache.set(id, key);
  return key;
}

/**
 * OpenSSL's Ed25519 through node:crypto, with a bounded per-key cache of KeyObjects. OpenSSL accepts a
 * key or an R of small order and a key whose y is not canonical; they are refused here first, so that
 * it answers as libsodium does.
 */
export const nodeCryptoVerifier: SignatureVerifier = {
  verify(signature, message, publicKey) {
    if (signature.length !== SIGNATURE_BYTES || publicKey.length !== PUBLIC_KEY_BYTES) return false;
    if (isWeakKeyEncoding(publicKey) || isSmallOrderEncoding(signature.subarray(0, PUBLIC_KEY_BYTES))) return false;
    try {
      return nodeVerify(null, message, keyObjectFor(publicKey), signature);
    } catch {
      return false;
    }
  },
};
