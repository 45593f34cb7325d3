/**
 * End-to-end encryption of container bodies and setting values (SHiNE E2E v1).
 *
 * Each copy is sealed on its own to one X25519 public key (the recipient's encKey for the incoming
 * copy, type 1; the sender's own encKey for the outgoing copy, type 2), in the style of ECIES/HPKE base mode:
 *
 *   eph       = fresh random X25519 secret key, ephPub = X25519(eph, basepoint)
 *   shared    = X25519(eph, ownerEncKey)                   (low-order public keys are rejected)
 *   key       = HKDF-SHA256(ikm = shared, salt = ephPub ‖ ownerEncKey, info = "SHiNE-E2E-v1", L = 32)
 *   nonce     = 24 random bytes
 *   aad       = UTF-8 "SHiNE-E2E-v1|msg|" + baseKey + "|" + messageType     (that is, the copy's messageKey)
 *             | UTF-8 "SHiNE-E2E-v1|setting|" + ownerLogin + "|" + settingKey (user settings)
 *   body      = 0x01 ‖ ephPub (32) ‖ nonce (24) ‖ XChaCha20-Poly1305(key, nonce, aad).seal(plaintext)
 *
 * Overhead is 73 bytes (1 + 32 + 24 + 16-byte tag). Text plaintext is UTF-8. The AAD makes a body
 * decrypt only in the container it was made for: moved to another message (other baseKey) or to the
 * other copy (other messageType), decryption fails. Both keys enter the HKDF salt so the key is bound
 * to this recipient. Authenticity of the sender comes from the container's Ed25519 signature, which
 * clients check before decrypting; the AEAD only proves the body was made for this container.
 */
import { x25519 } from '@noble/curves/ed25519.js';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { hkdf } from '@noble/hashes/hkdf.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes } from '@noble/hashes/utils.js';
import { concatBytes, utf8 } from '../protocol/bytes.js';
import type { ContainerFields } from '../protocol/container.js';
import { messageKeyOf } from '../protocol/container.js';

export const E2E_VERSION = 1;
const LABEL = 'SHiNE-E2E-v1';
const NONCE_LENGTH = 24;
const HEADER_LENGTH = 1 + 32 + NONCE_LENGTH;
/** Bytes an encrypted body adds to its plaintext. */
export const E2E_OVERHEAD = HEADER_LENGTH + 16;

/** A body that cannot be opened: malformed, another version, wrong key, moved or tampered. */
export class E2eError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'E2eError';
  }
}

/** The AAD of a container body: binds it to its baseKey and messageType. */
export function messageAad(
  c: Pick<ContainerFields, 'fromLogin' | 'toLogin' | 'timeMs' | 'nonce' | 'messageType'>,
): Uint8Array {
  return utf8(`${LABEL}|msg|${messageKeyOf(c)}`);
}

/** The AAD of a call payload: binds it to its sender, its callee and the call. */
export function callAad(fromLogin: string, toLogin: string, callId: string): Uint8Array {
  return utf8(`${LABEL}|call|${fromLogin}|${toLogin}|${callId}`);
}

/** The AAD of a user-setting value: binds it to its owner and key. */
export function settingAad(ownerLogin: string, key: string): Uint8Array {
  return utf8(`${LABEL}|setting|${ownerLogin}|${key}`);
}

function deriveKey(shared: Uint8Array, ephPub: Uint8Array, ownerPub: Uint8Array): Uint8Array {
  return hkdf(sha256, shared, concatBytes([ephPub, ownerPub]), utf8(LABEL), 32);
}

/** Seals plaintext to the owner's X25519 public key. */
export function encryptBody(plaintext: Uint8Array, ownerEncKey: Uint8Array, aad: Uint8Array): Uint8Array {
  const eph = x25519.keygen();
  const key = deriveKey(x25519.getSharedSecret(eph.secretKey, ownerEncKey), eph.publicKey, ownerEncKey);
  const nonce = randomBytes(NONCE_LENGTH);
  const sealed = xchacha20poly1305(key, nonce, aad).encrypt(plaintext);
  return concatBytes([Uint8Array.of(E2E_VERSION), eph.publicKey, nonce, sealed]);
}

/** Opens a body with the owner's X25519 secret key; throws E2eError when it does not authenticate. */
export function decryptBody(body: Uint8Array, ownerEncSecret: Uint8Array, aad: Uint8Array): Uint8Array {
  if (body.length < E2E_OVERHEAD) throw new E2eError('body too short');
  if (body[0] !== E2E_VERSION) throw new E2eError(`unknown body version ${body[0]}`);
  const ephPub = body.subarray(1, 33);
  const nonce = body.subarray(33, HEADER_LENGTH);
  try {
    const key = deriveKey(x25519.getSharedSecret(ownerEncSecret, ephPub), ephPub, x25519.getPublicKey(ownerEncSecret));
    return xchacha20poly1305(key, nonce, aad).decrypt(body.subarray(HEADER_LENGTH));
  } catch (cause) {
    throw new E2eError('body does not decrypt with this key in this container', { cause });
  }
}
