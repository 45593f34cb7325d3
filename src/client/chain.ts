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
import type { OpAnswer } from '../protocol/ops.js';
import type { Identity } from './identity.js';

/**
 * The kind of a text post: a UTF-8 body, what the web client's Public log writes and shows and the CLI prints as
 * text (docs/protocol.md, decision 48). Other kinds are the application's to define.
 */
export const TEXT_POST_KIND = 1;

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

/** A block as given, or decoded from bytes or base64; the decoder's reason (or `not base64`) when it fails. */
function decodeItem(item: Block | Uint8Array | string): Block | { detail: string } {
  if (typeof item !== 'string' && !(item instanceof Uint8Array)) return item;
  const bytes = typeof item === 'string' ? fromBase64(item) : item;
  if (!bytes) return { detail: 'not base64' };
  try {
    return decodeBlock(bytes);
  } catch (e) {
    if (e instanceof ContainerError) return { detail: e.reason };
    throw e;
  }
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
  const walked = walk(blocks, publicKey, options);
  return { head: walked.blocks.at(-1) ?? options.after ?? null, problem: walked.problem };
}

/**
 * walkChain's checks, and any `more` (a reason, or null) after the signature; `after: 'any'` takes the first block
 * alone. Answers the blocks that passed, in order, and the first problem with its position in the list.
 */
function walk<R extends string = never>(
  items: readonly (Block | Uint8Array | string)[],
  publicKey: Uint8Array,
  options: Omit<WalkOptions, 'after'> & { after?: Block | null | 'any' },
  more?: (block: Block, position: number) => R | null,
): { blocks: Block[]; problem: { position: number; reason: WalkProblem | R; detail?: string } | null } {
  const verifier = options.verifier ?? nobleVerifier;
  const blocks: Block[] = [];
  let head = options.after ?? null;
  for (const [position, item] of items.entries()) {
    const fail = (reason: WalkProblem | R, detail?: string) => ({
      blocks,
      problem: detail === undefined ? { position, reason } : { position, reason, detail },
    });
    const block = decodeItem(item);
    if ('detail' in block) return fail('BAD_BLOCK', block.detail);
    if (options.login !== undefined && block.login !== options.login) return fail('LOGIN');
    const problem = head === 'any' ? null : chainProblem(head, block);
    if (problem) return fail(problem);
    if (!verifyBlock(block, publicKey, verifier)) return fail('BAD_SIGNATURE');
    const reason = more?.(block, position) ?? null;
    if (reason !== null) return fail(reason);
    blocks.push(block);
    head = block;
  }
  return { blocks, problem: null };
}

// ---- reading a chain from a server (GetChain pages) and following it (ChainEvent) ----

/** One item of a GetChain page (docs/protocol.md §14.2). */
export type ChainItem = OpAnswer<'GetChain'>['items'][number];

/**
 * Why a chain read from a server is not whole: a walkChain problem, an item whose index or blockHash is
 * not the block's own (ITEM_MISMATCH), fewer blocks than the server's head says (SHORT), or a last block
 * that is not the head the server named (HEAD_MISMATCH).
 */
export type ChainReadProblem = WalkProblem | 'ITEM_MISMATCH' | 'SHORT' | 'HEAD_MISMATCH';

/** A chain as a server gave it, checked block by block with the owner's key. */
export interface VerifiedChain {
  login: string;
  /** The head the server named (-1 and null for an empty chain). */
  headIndex: number;
  headHash: string | null;
  /** The blocks that passed every check, from fromIndex on, in order. */
  blocks: Block[];
  /** null: every block from fromIndex up to the server's head verified and links to the one before. */
  problem: { index: number; reason: ChainReadProblem; detail?: string } | null;
}

/** How a problem is worded: whose key (default: the owner's), and the apostrophe (a display may want ’). */
export interface ProblemWording {
  owner?: string;
  apostrophe?: string;
}

/**
 * What a chain problem says of its block, in words for a person (CLI, web client): "is not signed by the owner's
 * key", the decoder's detail in parentheses. Shown as it is, after "block 5 " or "it ".
 */
export function chainProblemWords(
  problem: Pick<NonNullable<VerifiedChain['problem']>, 'reason' | 'detail'>,
  wording: ProblemWording = {},
): string {
  const owner = wording.owner ?? 'the owner';
  const s = `${wording.apostrophe ?? "'"}s`;
  const words: Record<ChainReadProblem, string> = {
    BAD_BLOCK: 'does not decode as a SHiNE_BCH block',
    BAD_SIGNATURE: `is not signed by ${owner}${s} key`,
    LOGIN: 'belongs to another login',
    INDEX: 'is not at the next position',
    PREV_HASH: `does not link to the block before it (prevHash is not that block${s} hash)`,
    TIME: 'is dated before the block before it',
    ITEM_MISMATCH: 'is not the block the server said (index or hash differ)',
    SHORT: 'is missing: the server named a head further on but sent no more blocks',
    HEAD_MISMATCH: 'is not the head the server named',
  };
  const detail = problem.detail === undefined ? '' : ` (${problem.detail})`;
  return `${words[problem.reason]}${detail}`;
}

/** One sentence for a chain problem: "block 5 is not signed by the owner's key". */
export function describeChainProblem(problem: NonNullable<VerifiedChain['problem']>): string {
  return `block ${problem.index} ${chainProblemWords(problem)}`;
}

/**
 * Checks the items of a GetChain page after `head` (the last verified block; null: the page must start at
 * genesis; `any`: the first item is taken alone, as a head fetched by its index) and returns the blocks that
 * passed, in order, and the first problem.
 */
export function checkChainItems(
  items: readonly ChainItem[],
  publicKey: Uint8Array,
  login: string,
  head: Block | null | 'any',
  verifier: SignatureVerifier = nobleVerifier,
): { blocks: Block[]; problem: VerifiedChain['problem'] } {
  const { blocks, problem } = walk(
    items.map((item) => item.blockB64),
    publicKey,
    { after: head, login, verifier },
    (block, k): 'ITEM_MISMATCH' | null =>
      block.index !== items[k]!.index || blockHash(block) !== items[k]!.blockHash ? 'ITEM_MISMATCH' : null,
  );
  if (!problem) return { blocks, problem: null };
  const { position, ...why } = problem;
  return { blocks, problem: { index: items[position]!.index, ...why } };
}
