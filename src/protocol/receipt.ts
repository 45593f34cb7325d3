/**
 * Delivery receipts (docs/protocol.md §13.1): the recipient's server signs what it stored, so the sender,
 * the sender's other server and the sender's devices can check "delivered" without trusting the sending
 * server. The signing text is UTF-8 lines joined by '\n' with no trailing newline, like the texts of
 * ./identity.ts.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { fromBase64, toBase64 } from './bytes.js';
import type { SignatureVerifier } from './ed25519.js';
import { verifyText } from './identity.js';
import { isValidLogin } from './login.js';

export interface DeliveryReceipt {
  /** The recipient's server that stored the copy and signed this. */
  serverLogin: string;
  /** The stored (incoming) copy's messageKey. */
  messageKey: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  /** When the signing server stored the copy (its clock). */
  storedAtMs: number;
  /** sha256 of the exact container bytes stored, standard padded base64. */
  containerSha256B64: string;
  signatureB64: string;
}

export type UnsignedReceipt = Omit<DeliveryReceipt, 'signatureB64'>;

export function receiptSigningText(r: UnsignedReceipt): string {
  return [
    'SHiNE-DELIVERY-v1',
    `server=${r.serverLogin}`,
    `key=${r.messageKey}`,
    `revision=${r.revisionTimeMs}:${r.reencryptedAtMs}`,
    `stored=${r.storedAtMs}`,
    `sha256=${r.containerSha256B64}`,
  ].join('\n');
}

/** sha256 of a container's bytes as receipts name it (standard padded base64). */
export function containerSha256B64(containerBytes: Uint8Array): string {
  return toBase64(sha256(containerBytes));
}

/** Signs a receipt with a signer of signing texts (the server's key: src/server/keys.ts). */
export function signReceipt(r: UnsignedReceipt, sign: (text: string) => string): DeliveryReceipt {
  return Object.assign({}, r, { signatureB64: sign(receiptSigningText(r)) });
}

/** True when the receipt's signature verifies against the signing server's key. */
export function verifyReceipt(r: DeliveryReceipt, serverSignKeyB64: string, verifier?: SignatureVerifier): boolean {
  return verifyText(receiptSigningText(r), r.signatureB64, serverSignKeyB64, verifier);
}

/** What a receipt must name to prove the delivery of one copy. */
export interface ReceiptExpectation {
  messageKey: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  containerSha256B64: string;
  /** The servers whose receipt counts (the recipient's access servers); omitted = any. */
  serverLogins?: readonly string[];
}

/** The first way the receipt does not match the copy (not its signature), or null. */
export function receiptMismatch(r: DeliveryReceipt, want: ReceiptExpectation): string | null {
  if (want.serverLogins && !want.serverLogins.includes(r.serverLogin)) return 'SERVER';
  if (r.messageKey !== want.messageKey) return 'KEY';
  if (r.revisionTimeMs !== want.revisionTimeMs || r.reencryptedAtMs !== want.reencryptedAtMs) return 'REVISION';
  if (r.containerSha256B64 !== want.containerSha256B64) return 'SHA256';
  return null;
}

const MAX_MESSAGE_KEY = 256;

/** Shape checks of a receipt from the wire (not its signature); returns a reason or null. */
export function receiptShapeProblem(x: unknown): string | null {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) return 'receipt must be an object';
  const o = x as Record<string, unknown>;
  if (!isValidLogin(o.serverLogin)) return 'bad serverLogin';
  if (typeof o.messageKey !== 'string' || o.messageKey === '' || o.messageKey.length > MAX_MESSAGE_KEY)
    return 'bad messageKey';
  for (const k of ['revisionTimeMs', 'reencryptedAtMs', 'storedAtMs'] as const) {
    const v = o[k];
    if (!Number.isSafeInteger(v) || (v as number) < 0) return `${k} must be a non-negative integer`;
  }
  const hash = typeof o.containerSha256B64 === 'string' ? fromBase64(o.containerSha256B64) : null;
  if (!hash || hash.length !== 32) return 'containerSha256B64 must be 32 bytes of base64';
  const sig = typeof o.signatureB64 === 'string' ? fromBase64(o.signatureB64) : null;
  if (!sig || sig.length !== 64) return 'signatureB64 must be 64 bytes of base64';
  return null;
}

/** The receipt's fields only (drops anything else a peer sent along). */
export function pickReceipt(o: DeliveryReceipt): DeliveryReceipt {
  return {
    serverLogin: o.serverLogin,
    messageKey: o.messageKey,
    revisionTimeMs: o.revisionTimeMs,
    reencryptedAtMs: o.reencryptedAtMs,
    storedAtMs: o.storedAtMs,
    containerSha256B64: o.containerSha256B64,
    signatureB64: o.signatureB64,
  };
}
