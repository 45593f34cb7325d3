/**
 * The SHiNE_BCH v1 block of a user chain (docs/protocol.md §14.1): encode, decode, hash, verify, and the link
 * between two neighbouring blocks. Pure: no I/O. Errors are the DM codec's ContainerError (docs/protocol.md §3.3).
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesEqual, concatBytes, toHex, utf8 } from './bytes.js';
import { ContainerError, MAX_BODY, MAX_CONTAINER, StrictReader, appendSignature, u64 } from './container.js';
import type { SignatureVerifier } from './ed25519.js';
import { nobleVerifier } from './ed25519.js';
import { LOGIN_RE } from './login.js';

export const BLOCK_MAGIC = utf8('SHiNE_BCH');
export const BLOCK_FORMAT_VERSION = 1;
/** The largest body and the largest block: the DM container's limits (docs/protocol.md §14.1). */
export const MAX_BLOCK_BODY = MAX_BODY;
export const MAX_BLOCK = MAX_CONTAINER;
export const HASH_LENGTH = 32;
/** The prevHash of a genesis block. */
export const ZERO_HASH: Uint8Array = new Uint8Array(HASH_LENGTH);
const MAX_KIND = 0xffff;

/** The fields a client chooses; encodeSignedBlock() adds magic, version, lengths and the signature. */
export interface BlockFields {
  /** The chain's owner and signer. */
  login: string;
  /** 0 for the genesis block, then +1. */
  index: number;
  /** SHA-256 of the previous block's whole bytes; ZERO_HASH at index 0. */
  prevHash: Uint8Array;
  timeMs: number;
  /** 1..65 535, opaque to the server. */
  kind: number;
  body: Uint8Array;
}

export interface Block extends BlockFields {
  signature: Uint8Array;
  /** The whole block as received or encoded. */
  bytes: Uint8Array;
  /** Bytes covered by the signature: bytes[0 .. signedLength). */
  signedLength: number;
}

/** Why `next` cannot follow `prev` in one chain (docs/protocol.md §14.1). */
export type ChainProblem = 'LOGIN' | 'INDEX' | 'PREV_HASH' | 'TIME';

function checkFields(f: BlockFields): void {
  if (!LOGIN_RE.test(f.login)) throw new ContainerError('BAD_LOGIN');
  u64(f.index);
  if (!(f.prevHash instanceof Uint8Array) || f.prevHash.length !== HASH_LENGTH) throw new ContainerError('BAD_HASH');
  u64(f.timeMs);
  if (!Number.isInteger(f.kind) || f.kind < 1 || f.kind > MAX_KIND) throw new ContainerError('BAD_KIND');
  if (f.body.length > MAX_BLOCK_BODY) throw new ContainerError('BODY_TOO_LARGE');
}

/** The bytes the signature covers; throws ContainerError for fields the decoder would reject. */
export function encodeUnsignedBlock(f: BlockFields): Uint8Array {
  checkFields(f);
  const login = utf8(f.login);
  const head = new Uint8Array(9 + 1 + 1 + login.length + 8 + HASH_LENGTH + 8 + 2 + 4);
  const view = new DataView(head.buffer);
  let o = 0;
  head.set(BLOCK_MAGIC, o);
  o += BLOCK_MAGIC.length;
  head[o++] = BLOCK_FORMAT_VERSION;
  head[o++] = login.length;
  head.set(login, o);
  o += login.length;
  view.setBigUint64(o, BigInt(f.index));
  o += 8;
  head.set(f.prevHash, o);
  o += HASH_LENGTH;
  view.setBigUint64(o, BigInt(f.timeMs));
  o += 8;
  view.setUint16(o, f.kind);
  o += 2;
  view.setUint32(o, f.body.length);
  return concatBytes([head, f.body]);
}

/** Encodes and signs with the owner's 32-byte Ed25519 seed. */
export function encodeSignedBlock(f: BlockFields, signSeed: Uint8Array): Block {
  const signed = appendSignature(encodeUnsignedBlock(f), signSeed);
  return Object.assign({}, f, { prevHash: f.prevHash.slice(), body: f.body.slice() }, signed);
}

/** Decodes strictly; throws ContainerError (and nothing else) for any malformed input. */
export function decodeBlock(bytes: Uint8Array): Block {
  const r = new StrictReader(bytes);
  r.magic(BLOCK_MAGIC);
  if (r.u8() !== BLOCK_FORMAT_VERSION) throw new ContainerError('BAD_VERSION');
  const login = r.login();
  const index = r.u64();
  const prevHash = r.take(HASH_LENGTH);
  const timeMs = r.u64();
  const kind = r.u16();
  if (kind === 0) throw new ContainerError('BAD_KIND');
  const body = r.body();
  return { login, index, prevHash, timeMs, kind, body, bytes, ...r.signature() };
}

/** SHA-256 of the block's whole bytes, signature included: what the next block's prevHash holds. */
export function blockDigest(block: Pick<Block, 'bytes'>): Uint8Array {
  return sha256(block.bytes);
}

/** blockDigest as the wire writes it (`blockHash`, `headHash`): 64 lowercase hex digits. */
export function blockHash(block: Pick<Block, 'bytes'>): string {
  return toHex(blockDigest(block));
}

/** True when the signature is the owner's, given that login's 32-byte Ed25519 public key. */
export function verifyBlock(block: Block, publicKey: Uint8Array, verifier: SignatureVerifier = nobleVerifier): boolean {
  return verifier.verify(block.signature, block.bytes.subarray(0, block.signedLength), publicKey);
}

/**
 * Why `next` cannot follow `prev` (null: it can; `prev` null: `next` must be a genesis block), signatures aside.
 * Checked in the order LOGIN, INDEX, PREV_HASH, TIME (docs/protocol.md §14.1, decision 41).
 */
export function chainProblem(prev: Block | null, next: BlockFields): ChainProblem | null {
  if (prev === null) {
    if (next.index !== 0) return 'INDEX';
    return bytesEqual(next.prevHash, ZERO_HASH) ? null : 'PREV_HASH';
  }
  if (next.login !== prev.login) return 'LOGIN';
  if (next.index !== prev.index + 1) return 'INDEX';
  if (!bytesEqual(next.prevHash, blockDigest(prev))) return 'PREV_HASH';
  if (next.timeMs < prev.timeMs) return 'TIME';
  return null;
}
