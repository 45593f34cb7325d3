import { ed25519 } from '@noble/curves/ed25519.js';
import { sha512 } from '@noble/hashes/sha2.js';

/** Ed25519 verification; the server injects a faster native one, clients use the pure default. */
export interface SignatureVerifier {
  verify(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}

const { Point } = ed25519;
const L = Point.Fn.ORDER;

function numberLE(bytes: Uint8Array): bigint {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]!);
  return n;
}

const P = 2n ** 255n - 19n;
const Y_MASK = 2n ** 255n - 1n;

/**
 * The y coordinates of the eight points of small order (the curve's 8-torsion), in every 255-bit
 * encoding: y, and y + p where that still fits (as libsodium's blocklist has them). They come from the
 * torsion part Q − [8⁻¹ mod L]([8]Q) of the first point Q (by y = 2, 3, …) where it has order 8;
 * found on first use, not when the module loads.
 */
let smallOrderY: ReadonlySet<bigint> | null = null;
const smallOrderYs = (): ReadonlySet<bigint> => (smallOrderY ??= findSmallOrderYs());

function findSmallOrderYs(): ReadonlySet<bigint> {
  const inv8 = modInverse(8n, L);
  for (let y = 2n; ; y++) {
    let q;
    try {
      q = Point.fromBytes(leBytes(y), false);
    } catch {
      continue; // y is not on the curve
    }
    const t = q.subtract(q.clearCofactor().multiplyUnsafe(inv8));
    if (t.double().double().is0()) continue; // its torsion part has order below 8
    const ys = new Set<bigint>();
    for (let k = 0, p = Point.ZERO; k < 8; k++, p = p.add(t)) {
      const torsionY = numberLE(p.toBytes()) & Y_MASK;
      ys.add(torsionY);
      if (torsionY + P <= Y_MASK) ys.add(torsionY + P);
    }
    return ys;
  }
}

function modInverse(a: bigint, m: bigint): bigint {
  let [r0, r1, s0, s1] = [a % m, m, 1n, 0n];
  while (r1 !== 0n) {
    const q = r0 / r1;
    [r0, r1, s0, s1] = [r1, r0 - q * r1, s1, s0 - q * s1];
  }
  return ((s0 % m) + m) % m;
}

function leBytes(n: bigint): Uint8Array {
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++, n >>= 8n) out[i] = Number(n & 255n);
  return out;
}

/** True when 32 bytes encode a point of small order, in any encoding (sign bit set or not, y ≥ p). */
export function isSmallOrderEncoding(point: Uint8Array): boolean {
  return point.length === 32 && smallOrderYs().has(numberLE(point) & Y_MASK);
}

/** libsodium's rule for a public key: refused unless its y is canonical (below p) and not of small order. */
export function isWeakKeyEncoding(key: Uint8Array): boolean {
  if (key.length !== 32) return true;
  const y = numberLE(key) & Y_MASK;
  return y >= P || smallOrderYs().has(y);
}

/**
 * Pure-JS Ed25519 (works in Node and browsers) with libsodium's rules, so a client and the server
 * always agree (docs/protocol.md, decision 10): canonical encodings of S, R and the key; no key and no
 * R of small order; the cofactorless equation [S]B = R + [k]A.
 */
export const nobleVerifier: SignatureVerifier = {
  verify(signature, message, publicKey) {
    if (signature.length !== 64 || publicKey.length !== 32) return false;
    try {
      const r = signature.subarray(0, 32);
      const s = numberLE(signature.subarray(32));
      if (s >= L) return false;
      const A = Point.fromBytes(publicKey, false);
      const R = Point.fromBytes(r, false);
      if (A.isSmallOrder() || R.isSmallOrder()) return false;
      const digest = sha512.create().update(r).update(publicKey).update(message).digest();
      const k = numberLE(digest) % L;
      return Point.BASE.multiplyUnsafe(s).equals(R.add(A.multiplyUnsafe(k)));
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
