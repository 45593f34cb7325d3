/**
 * The SHiNE_DM v1 container (docs/protocol.md §3): encode, decode, verify, keys, pair consistency, body parsers.
 * Pure: no I/O. Signature checks take an injected verifier.
 */
import { concatBytes, utf8 } from './bytes.js';
import type { SignatureVerifier } from './ed25519.js';
import { nobleVerifier, signEd25519 } from './ed25519.js';
import { LOGIN_RE } from './login.js';
import type { CopyFields } from './ops.js';

export const MAGIC = utf8('SHiNE_DM');
export const FORMAT_VERSION = 1;
export const MAX_BODY = 65_536;
/** The largest container: header and signature around the largest body (docs/protocol.md §3). */
export const MAX_CONTAINER = MAX_BODY + 256;
const SIGNATURE_LENGTH = 64;

export const MessageType = {
  TextIncoming: 1,
  TextOutgoing: 2,
  ReceiptIncoming: 3,
  ReceiptOutgoing: 4,
  DeleteMessageIncoming: 5,
  DeleteMessageOutgoing: 6,
  DeleteConversationIncoming: 7,
  DeleteConversationOutgoing: 8,
} as const;
export type MessageType = 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8;

/** Body lengths of the fixed-layout types (receipts and tombstones). */
const FIXED_BODY: Record<number, number> = { 3: 20, 4: 20, 5: 13, 6: 13, 7: 8, 8: 8 };

/** The fields a client chooses; encode() adds magic, version, lengths and the signature. */
export interface ContainerFields {
  messageType: MessageType;
  fromLogin: string;
  toLogin: string;
  timeMs: number;
  nonce: number;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  body: Uint8Array;
}

export interface Container extends ContainerFields {
  signature: Uint8Array;
  /** The whole container as received or encoded. */
  bytes: Uint8Array;
  /** Bytes covered by the signature: bytes[0 .. signedLength). */
  signedLength: number;
}

export type ContainerErrorReason =
  | 'TOO_LARGE'
  | 'TRUNCATED'
  | 'BAD_MAGIC'
  | 'BAD_VERSION'
  | 'BAD_TYPE'
  | 'BAD_KIND'
  | 'BAD_LOGIN'
  | 'SAME_LOGIN'
  | 'BAD_INTEGER'
  | 'BAD_HASH'
  | 'BODY_TOO_LARGE'
  | 'BAD_BODY'
  | 'TRAILING_BYTES';

/** The codec's only error: decode() throws nothing else, whatever the input. */
export class ContainerError extends Error {
  constructor(
    readonly reason: ContainerErrorReason,
    message?: string,
  ) {
    super(message ?? reason);
    this.name = 'ContainerError';
  }
}

export function isOutgoingType(t: number): boolean {
  return t % 2 === 0;
}

/** The login whose copy this is: toLogin for odd (incoming) types, fromLogin for even. */
export function ownerOf(c: Pick<ContainerFields, 'messageType' | 'fromLogin' | 'toLogin'>): string {
  return isOutgoingType(c.messageType) ? c.fromLogin : c.toLogin;
}

/** The other party of the dialog, seen from the owner. */
export function peerOf(c: Pick<ContainerFields, 'messageType' | 'fromLogin' | 'toLogin'>): string {
  return isOutgoingType(c.messageType) ? c.toLogin : c.fromLogin;
}

/** A u64 field's value as a BigInt; only 0..2^53-1 round-trips through a JS number. */
export function u64(v: number): bigint {
  if (!Number.isSafeInteger(v) || v < 0) throw new ContainerError('BAD_INTEGER');
  return BigInt(v);
}

function u32(v: number): number {
  if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new ContainerError('BAD_INTEGER');
  return v;
}

function checkFields(f: ContainerFields): void {
  if (!Number.isInteger(f.messageType) || f.messageType < 1 || f.messageType > 8) throw new ContainerError('BAD_TYPE');
  if (!LOGIN_RE.test(f.fromLogin) || !LOGIN_RE.test(f.toLogin)) throw new ContainerError('BAD_LOGIN');
  if (f.fromLogin === f.toLogin) throw new ContainerError('SAME_LOGIN');
  for (const v of [f.timeMs, f.revisionTimeMs, f.reencryptedAtMs]) u64(v);
  u32(f.nonce);
  checkBody(f.messageType, f.body);
}

function checkBody(type: number, body: Uint8Array): void {
  if (body.length > MAX_BODY) throw new ContainerError('BODY_TOO_LARGE');
  const fixed = FIXED_BODY[type];
  if (fixed === undefined) {
    if (body.length === 0) throw new ContainerError('BAD_BODY', 'empty text body');
    return;
  }
  if (body.length !== fixed) throw new ContainerError('BAD_BODY', `type ${type} body must be ${fixed} bytes`);
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  if (type <= 4) {
    if (
      view.getBigUint64(0) > BigInt(Number.MAX_SAFE_INTEGER) ||
      view.getBigUint64(8) > BigInt(Number.MAX_SAFE_INTEGER)
    ) {
      throw new ContainerError('BAD_INTEGER');
    }
  } else if (type <= 6) {
    if (view.getBigUint64(0) > BigInt(Number.MAX_SAFE_INTEGER)) throw new ContainerError('BAD_INTEGER');
    if (body[12]! > 1) throw new ContainerError('BAD_BODY', 'targetSender must be 0 or 1');
  } else if (view.getBigUint64(0) > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new ContainerError('BAD_INTEGER');
  }
}

/** The bytes the signature covers. */
export function encodeUnsigned(f: ContainerFields): Uint8Array {
  checkFields(f);
  const from = utf8(f.fromLogin);
  const to = utf8(f.toLogin);
  const head = new Uint8Array(8 + 1 + 1 + 1 + from.length + 1 + to.length + 8 + 4 + 8 + 8 + 4);
  const view = new DataView(head.buffer);
  let o = 0;
  head.set(MAGIC, o);
  o += 8;
  head[o++] = FORMAT_VERSION;
  head[o++] = f.messageType;
  head[o++] = from.length;
  head.set(from, o);
  o += from.length;
  head[o++] = to.length;
  head.set(to, o);
  o += to.length;
  view.setBigUint64(o, BigInt(f.timeMs));
  o += 8;
  view.setUint32(o, f.nonce);
  o += 4;
  view.setBigUint64(o, BigInt(f.revisionTimeMs));
  o += 8;
  view.setBigUint64(o, BigInt(f.reencryptedAtMs));
  o += 8;
  view.setUint32(o, f.body.length);
  return concatBytes([head, f.body]);
}

/** Signs encoded bytes with a 32-byte Ed25519 seed and appends the signature (containers and blocks alike). */
export function appendSignature(
  unsigned: Uint8Array,
  signSeed: Uint8Array,
): { signature: Uint8Array; bytes: Uint8Array; signedLength: number } {
  const signature = signEd25519(unsigned, signSeed);
  return { signature, bytes: concatBytes([unsigned, signature]), signedLength: unsigned.length };
}

/** Encodes and signs with the sender's 32-byte Ed25519 seed. */
export function encodeSigned(f: ContainerFields, signSeed: Uint8Array): Container {
  return Object.assign({}, f, { body: f.body.slice() }, appendSignature(encodeUnsigned(f), signSeed));
}

/**
 * Strict reads in byte order over one signed input, for the container and the chain block: each failure is the
 * ContainerError the decoding tables name (docs/protocol.md §3.3, §14.1).
 */
export class StrictReader {
  offset = 0;
  private readonly view: DataView;

  /** Refuses what is not a Uint8Array (TRUNCATED) or is over MAX_CONTAINER bytes (TOO_LARGE), before parsing. */
  constructor(readonly bytes: Uint8Array) {
    if (!(bytes instanceof Uint8Array)) throw new ContainerError('TRUNCATED');
    if (bytes.length > MAX_CONTAINER) throw new ContainerError('TOO_LARGE');
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  need(n: number): void {
    if (this.offset + n > this.bytes.length) throw new ContainerError('TRUNCATED');
  }

  magic(expected: Uint8Array): void {
    this.need(expected.length);
    for (let i = 0; i < expected.length; i++) {
      if (this.bytes[this.offset + i] !== expected[i]) throw new ContainerError('BAD_MAGIC');
    }
    this.offset += expected.length;
  }

  u8(): number {
    this.need(1);
    return this.bytes[this.offset++]!;
  }

  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.offset);
    this.offset += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.offset);
    this.offset += 4;
    return v;
  }

  /** A u64 that must fit a JS number exactly (BAD_INTEGER above 2^53-1). */
  u64(): number {
    this.need(8);
    const v = this.view.getBigUint64(this.offset);
    this.offset += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new ContainerError('BAD_INTEGER');
    return Number(v);
  }

  /** n bytes as a view into the input. */
  take(n: number): Uint8Array {
    this.need(n);
    const out = this.bytes.subarray(this.offset, this.offset + n);
    this.offset += n;
    return out;
  }

  /** A u8 length and that many bytes, one character each, matching the login syntax (else BAD_LOGIN). */
  login(): string {
    const len = this.u8();
    this.need(len);
    let s = '';
    for (let i = 0; i < len; i++) s += String.fromCharCode(this.bytes[this.offset + i]!);
    this.offset += len;
    if (!LOGIN_RE.test(s)) throw new ContainerError('BAD_LOGIN');
    return s;
  }

  /** A bodyLength (BODY_TOO_LARGE over MAX_BODY, before looking for the body) and the body. */
  body(): Uint8Array {
    const length = this.u32();
    if (length > MAX_BODY) throw new ContainerError('BODY_TOO_LARGE');
    return this.take(length);
  }

  /** The 64-byte signature that must end the input (TRAILING_BYTES otherwise), and the length it covers. */
  signature(): { signature: Uint8Array; signedLength: number } {
    const signedLength = this.offset;
    const signature = this.take(SIGNATURE_LENGTH);
    if (this.offset !== this.bytes.length) throw new ContainerError('TRAILING_BYTES');
    return { signature, signedLength };
  }
}

/** Decodes strictly; throws ContainerError (and nothing else) for any malformed input. */
export function decodeContainer(bytes: Uint8Array): Container {
  const r = new StrictReader(bytes);
  r.magic(MAGIC);
  r.need(2);
  if (r.u8() !== FORMAT_VERSION) throw new ContainerError('BAD_VERSION');
  const messageType = r.u8();
  if (messageType < 1 || messageType > 8) throw new ContainerError('BAD_TYPE');
  const fromLogin = r.login();
  const toLogin = r.login();
  if (fromLogin === toLogin) throw new ContainerError('SAME_LOGIN');
  const timeMs = r.u64();
  const nonce = r.u32();
  const revisionTimeMs = r.u64();
  const reencryptedAtMs = r.u64();
  const body = r.body();
  checkBody(messageType, body);
  return {
    messageType: messageType as MessageType,
    fromLogin,
    toLogin,
    timeMs,
    nonce,
    revisionTimeMs,
    reencryptedAtMs,
    body,
    bytes,
    ...r.signature(),
  };
}

/** True when the signature is fromLogin's, given that login's 32-byte Ed25519 public key. */
export function verifyContainer(
  c: Container,
  publicKey: Uint8Array,
  verifier: SignatureVerifier = nobleVerifier,
): boolean {
  return verifier.verify(c.signature, signedBytesOf(c), publicKey);
}

/** The bytes a container's signature covers. */
export function signedBytesOf(c: Container): Uint8Array {
  return c.bytes.subarray(0, c.signedLength);
}

// ---- keys ----

type KeyFields = Pick<ContainerFields, 'fromLogin' | 'toLogin' | 'timeMs' | 'nonce'>;

/** `from|to|timeMs|nonce`: one logical message. */
export function baseKeyOf(c: KeyFields): string {
  return `${c.fromLogin}|${c.toLogin}|${c.timeMs}|${c.nonce}`;
}

/** `baseKey|type`: one copy. */
export function messageKeyOf(c: KeyFields & Pick<ContainerFields, 'messageType'>): string {
  return `${baseKeyOf(c)}|${c.messageType}`;
}

/** The partner key of a copy: the other type of the same pair. */
export function pairedKeyOf(c: KeyFields & Pick<ContainerFields, 'messageType'>): string {
  const other = isOutgoingType(c.messageType) ? c.messageType - 1 : c.messageType + 1;
  return `${baseKeyOf(c)}|${other}`;
}

/** The incoming key of a pair, from its outgoing key (`…|2` → `…|1`). */
export function incomingKeyOf(outgoingKey: string): string {
  const cut = outgoingKey.lastIndexOf('|');
  return `${outgoingKey.slice(0, cut)}|${Number(outgoingKey.slice(cut + 1)) - 1}`;
}

/** The outgoing key of the pair a well-formed key belongs to (an outgoing key is its own); null otherwise. */
export function outgoingKeyOf(messageKey: string): string | null {
  const parsed = parseMessageKey(messageKey);
  if (!parsed) return null;
  return isOutgoingType(parsed.messageType) ? messageKey : pairedKeyOf(parsed);
}

/** `primaryMessageKey:revisionTimeMs:reencryptedAtMs`: the ACK token of one revision. */
export function syncIdOf(primaryMessageKey: string, revisionTimeMs: number, reencryptedAtMs: number): string {
  return `${primaryMessageKey}:${revisionTimeMs}:${reencryptedAtMs}`;
}

/** Decimal as the key builders write it: no sign, no leading zero, at most 2^53-1; else null. */
function canonicalInt(text: string): number | null {
  if (!/^(0|[1-9]\d{0,15})$/.test(text)) return null;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : null;
}

/** Parses a syncId; the message key itself never contains ':'. */
export function parseSyncId(
  syncId: string,
): { primaryMessageKey: string; revisionTimeMs: number; reencryptedAtMs: number } | null {
  const m = /^([^:]+):(\d+):(\d+)$/.exec(syncId);
  if (!m) return null;
  const revisionTimeMs = canonicalInt(m[2]!);
  const reencryptedAtMs = canonicalInt(m[3]!);
  if (revisionTimeMs === null || reencryptedAtMs === null) return null;
  return { primaryMessageKey: m[1]!, revisionTimeMs, reencryptedAtMs };
}

/** Parses `from|to|timeMs|nonce|type`; null when it is not a well-formed message key. */
export function parseMessageKey(
  key: string,
): { fromLogin: string; toLogin: string; timeMs: number; nonce: number; messageType: MessageType } | null {
  const parts = key.split('|');
  if (parts.length !== 5) return null;
  const [fromLogin, toLogin, t, n, ty] = parts as [string, string, string, string, string];
  if (!LOGIN_RE.test(fromLogin) || !LOGIN_RE.test(toLogin) || fromLogin === toLogin || !/^[1-8]$/.test(ty)) return null;
  const timeMs = canonicalInt(t);
  const nonce = canonicalInt(n);
  if (timeMs === null || nonce === null || nonce > 0xffffffff) return null;
  return { fromLogin, toLogin, timeMs, nonce, messageType: Number(ty) as MessageType };
}

/** The identifying fields of a copy, as history items and events carry them. */
export function copyFieldsOf(c: ContainerFields): CopyFields {
  return {
    messageKey: messageKeyOf(c),
    baseKey: baseKeyOf(c),
    messageType: c.messageType,
    fromLogin: c.fromLogin,
    toLogin: c.toLogin,
    timeMs: c.timeMs,
    revisionTimeMs: c.revisionTimeMs,
    reencryptedAtMs: c.reencryptedAtMs,
  };
}

/** Compares revisions: negative when a is older than b. */
export function compareRevision(
  a: { revisionTimeMs: number; reencryptedAtMs: number },
  b: { revisionTimeMs: number; reencryptedAtMs: number },
): number {
  return a.revisionTimeMs - b.revisionTimeMs || a.reencryptedAtMs - b.reencryptedAtMs;
}

// ---- pairs ----

export type PairProblem = 'TYPES' | 'FIELDS' | 'BODIES';

/** Why two decoded copies are not one consistent pair, or null when they are (signatures aside). */
export function pairProblem(incoming: ContainerFields, outgoing: ContainerFields): PairProblem | null {
  if (incoming.messageType % 2 !== 1 || outgoing.messageType !== incoming.messageType + 1) return 'TYPES';
  if (
    incoming.fromLogin !== outgoing.fromLogin ||
    incoming.toLogin !== outgoing.toLogin ||
    incoming.timeMs !== outgoing.timeMs ||
    incoming.nonce !== outgoing.nonce ||
    incoming.revisionTimeMs !== outgoing.revisionTimeMs ||
    incoming.reencryptedAtMs !== outgoing.reencryptedAtMs
  ) {
    return 'FIELDS';
  }
  if (incoming.messageType >= 3) {
    if (incoming.body.length !== outgoing.body.length) return 'BODIES';
    for (let i = 0; i < incoming.body.length; i++) if (incoming.body[i] !== outgoing.body[i]) return 'BODIES';
  }
  return null;
}

// ---- bodies ----

export interface ReceiptBody {
  readAtMs: number;
  targetTimeMs: number;
  targetNonce: number;
}
export interface DeleteMessageBody {
  targetTimeMs: number;
  targetNonce: number;
  /** 0 = the container's fromLogin sent the target, 1 = its toLogin did. */
  targetSender: 0 | 1;
}
export interface DeleteConversationBody {
  deleteBeforeMs: number;
}

function bodyView(c: Pick<ContainerFields, 'messageType' | 'body'>, types: readonly number[]): DataView {
  if (!types.includes(c.messageType)) throw new ContainerError('BAD_TYPE');
  checkBody(c.messageType, c.body);
  return new DataView(c.body.buffer, c.body.byteOffset, c.body.byteLength);
}

export function parseReceiptBody(c: Pick<ContainerFields, 'messageType' | 'body'>): ReceiptBody {
  const v = bodyView(c, [3, 4]);
  return { readAtMs: Number(v.getBigUint64(0)), targetTimeMs: Number(v.getBigUint64(8)), targetNonce: v.getUint32(16) };
}

export function encodeReceiptBody(b: ReceiptBody): Uint8Array {
  const out = new Uint8Array(20);
  const v = new DataView(out.buffer);
  v.setBigUint64(0, u64(b.readAtMs));
  v.setBigUint64(8, u64(b.targetTimeMs));
  v.setUint32(16, u32(b.targetNonce));
  return out;
}

export function parseDeleteMessageBody(c: Pick<ContainerFields, 'messageType' | 'body'>): DeleteMessageBody {
  const v = bodyView(c, [5, 6]);
  return {
    targetTimeMs: Number(v.getBigUint64(0)),
    targetNonce: v.getUint32(8),
    targetSender: v.getUint8(12) as 0 | 1,
  };
}

export function encodeDeleteMessageBody(b: DeleteMessageBody): Uint8Array {
  const out = new Uint8Array(13);
  const v = new DataView(out.buffer);
  v.setBigUint64(0, u64(b.targetTimeMs));
  v.setUint32(8, u32(b.targetNonce));
  if (b.targetSender !== 0 && b.targetSender !== 1) throw new ContainerError('BAD_BODY', 'targetSender must be 0 or 1');
  v.setUint8(12, b.targetSender);
  return out;
}

export function parseDeleteConversationBody(c: Pick<ContainerFields, 'messageType' | 'body'>): DeleteConversationBody {
  const v = bodyView(c, [7, 8]);
  return { deleteBeforeMs: Number(v.getBigUint64(0)) };
}

export function encodeDeleteConversationBody(b: DeleteConversationBody): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, u64(b.deleteBeforeMs));
  return out;
}

/** The baseKey of the text message a receipt (3/4) points at: sent by the receipt's toLogin. */
export function receiptTargetBaseKey(c: ContainerFields): string {
  const b = parseReceiptBody(c);
  return `${c.toLogin}|${c.fromLogin}|${b.targetTimeMs}|${b.targetNonce}`;
}

/** The baseKey of the message a delete (5/6) names. */
export function deleteTargetBaseKey(c: ContainerFields): string {
  const b = parseDeleteMessageBody(c);
  return b.targetSender === 0
    ? `${c.fromLogin}|${c.toLogin}|${b.targetTimeMs}|${b.targetNonce}`
    : `${c.toLogin}|${c.fromLogin}|${b.targetTimeMs}|${b.targetNonce}`;
}
