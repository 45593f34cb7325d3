import { ed25519 } from '@noble/curves/ed25519.js';

/** Ed25519 verification; the server injects a faster native one, clients use the pure default. */
export interface SignatureVerifier {
  verify(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}

/** Pure-JS Ed25519 (works in Node and browsers). */
export const nobleVerifier: SignatureVerifier = {
  verify(signature, message, publicKey) {
    if (signature.length !== 64 || publicKey.length !== 32) return false;
    try {
      return ed25519.verify(signature, message, publicKey);
    } catch {
      return false;
    }
  },
};

/** Signs with a 32-byte Ed25519 seed. */
export function signEd25519(message: Uint8Array, seed: Uint8Array): Uint8Array {
  return ed25519.sign(message, seed);
}

export function ed25519PublicKey(seed: Uint8Array): Uint8Array {
  return ed25519.getPublicKey(seed);
}
