/**
 * A user's chain in the SDK (docs/protocol.md §14.1): build and sign the block after a head, and walk a list of
 * blocks (decode, verify, link) to the first problem. Runs in Node and browsers.
 */
import type { Block, ChainProblem } from '../protocol/block.js';
import {
  ZERO_HASH,
  blockDigest,
  blockHash,
  chainProblem,
  decodeBlock,
  encodeSignedBlock,
  verifyBlock,
} from '../protocol/block.js';
import { fromBase64, toBase64 } from '../protocol/bytes.js';
import { ContainerError } from '../protocol/container.js';
import type { SignatureVerifier } from '../protocol/ed25519.js';
import { nobleVerifier } from '../protocol/ed25519.js';
import type { Identity } from './identity.js';

/** What signing a block needs of its owner; an Identity has it. */
export type ChainSigner = Pick<Identity, 'login' | 'signSeed'>;

/** The content of a block; timeMs defaults to now, but never before the head's timeMs. */
export interface BlockContent {
  kind: number;
  body: Uint8Array;
  timeMs?: number;
}

export interface BuiltBlock {
  block: Block;
  /** The block as AddBlock takes it. */
  blockB64: string;
  blockHash: string;
}

/**
 * The signed block after `head` (the genesis block when head is null). Throws a ContainerError for a field the
 * codec refuses, and an Error when the block could not follow the head (another login, or an explicit timeMs before
 * the head's).
 */
export function buildNextBlock(signer: ChainSigner, head: Block | null, content: BlockContent): BuiltBlock {
  const fields = {
    login: signer.login,
    index: head ? head.index + 1 : 0,
    prevHash: head ? blockDigest(head) : ZERO_HASH,
    timeMs: content.timeMs ?? Math.max(Date.now(), head?.timeMs ?? 0),
    kind: content.kind,
    body: content.body,
  };
  const problem = chainProblem(head, fields);
  if (problem) throw new Error(`the block cannot follow the head (${problem})`);
  const block = encodeSignedBlock(fields, signer.signSeed);
  return { block, blockB64: toBase64(block.bytes), blockHash: blockHash(block) };
}

/** A chain problem, or a block that does not decode (BAD_BLOCK) or whose signature is not the owner's. */
export type WalkProblem = ChainProblem | 'BAD_BLOCK' | 'BAD_SIGNATURE';

export interface ChainWalk {
  /** The last block that passed every check (`after` when the first one failed or the list is empty). */
  head: Block | null;
  /** null when every block passed. */
  problem: { position: number; reason: WalkProblem; detail?: string } | null;
}

export interface WalkOptions {
  /** A head already checked: the first block must follow it. Default: the first block must be the genesis block. */
  after?: Block | null;
  /** The chain's owner: every block must carry this login (a genesis block is otherwise bound to no login). */
  login?: string;
  verifier?: SignatureVerifier;
}

/**
 * Checks blocks in order — decoded (bytes or base64, as GetChain's blockB64), signed with publicKey, each following
 * the one before — and stops at the first problem, with its position in the list.
 */
export function walkChain(
  blocks: readonly (Block | Uint8Array | string)[],
  publicKey: Uint8Array,
  options: WalkOptions = {},
): ChainWalk {
  const verifier = options.verifier ?? nobleVerifier;
  let head = options.after ?? null;
  for (const [position, item] of blocks.entries()) {
    const fail = (reason: WalkProblem, detail?: string): ChainWalk => ({
      head,
      problem: detail === undefined ? { position, reason } : { position, reason, detail },
    });
    let block: Block;
    if (typeof item === 'string' || item instanceof Uint8Array) {
      const bytes = typeof item === 'string' ? fromBase64(item) : item;
      if (!bytes) return fail('BAD_BLOCK', 'not base64');
      try {
        block = decodeBlock(bytes);
      } catch (e) {
        if (e instanceof ContainerError) return fail('BAD_BLOCK', e.reason);
        throw e;
      }
    } else {
      block = item;
    }
    if (options.login !== undefined && block.login !== options.login) return fail('LOGIN');
    const problem = chainProblem(head, block);
    if (problem) return fail(problem);
    if (!verifyBlock(block, publicKey, verifier)) return fail('BAD_SIGNATURE');
    head = block;
  }
  return { head, problem: null };
}
