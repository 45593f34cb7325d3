/**
 * What a stored copy does, decided without a database (docs/protocol.md §3, §5.2, §7). Both dialects
 * gather the facts a decision needs inside their transaction, call these functions, and apply the plan
 * they return; so the rules (tombstones win, the latest revision wins, receipts set readAt on their
 * target, deletes remove their targets, outbox rows follow copies) are written once.
 */
import { ZERO_HASH } from '../../protocol/block.js';
import { compareBytes, toHex } from '../../protocol/bytes.js';
import type { Container } from '../../protocol/container.js';
import {
  baseKeyOf,
  compareRevision,
  deleteTargetBaseKey,
  messageKeyOf,
  incomingKeyOf,
  ownerOf,
  parseDeleteConversationBody,
  parseMessageKey,
  parseSyncId,
  parseReceiptBody,
  peerOf,
  receiptTargetBaseKey,
  syncIdOf,
} from '../../protocol/container.js';
import { sha256 } from '../crypto/sha256.js';
import type {
  ChainBlockInput,
  ChainHead,
  ChainLink,
  CopyResult,
  DigestBucket,
  OutboxPolicy,
  OutboxRow,
  TimeRange,
} from './types.js';

/** The revision a stored row carries. */
export interface StoredRevision {
  revisionTimeMs: number;
  reencryptedAtMs: number;
}

/** What a dialect must look up (in its transaction) before planCopy decides. */
export interface CopyLookups {
  owner: string;
  peer: string;
  baseKey: string;
  messageKey: string;
  /** Look up the conversation tombstone of (owner, peer). */
  conversationTombstone: boolean;
  /** Look up whether (owner, baseKey) has a message tombstone. */
  messageTombstone: boolean;
  /** Look up the earliest readAt among owner's receipts that name baseKey (a receipt may come first). */
  earliestReceipt: boolean;
}

export function copyLookups(c: Container): CopyLookups {
  const t = c.messageType;
  return {
    owner: ownerOf(c),
    peer: peerOf(c),
    baseKey: baseKeyOf(c),
    messageKey: messageKeyOf(c),
    conversationTombstone: t <= 6,
    messageTombstone: t <= 2,
    earliestReceipt: t <= 2,
  };
}

/** The answers to CopyLookups (fields not asked for are null / false). */
export interface CopyFacts {
  /** delete_before_ms of the (owner, peer) conversation tombstone. */
  conversationDeleteBeforeMs: number | null;
  messageTombstoned: boolean;
  /** The stored row of this messageKey. */
  existing: (StoredRevision & { storedAtMs: number }) | null;
  earliestReceiptReadAtMs: number | null;
}

/** The signed_messages row to insert, or the columns to update on the existing one. */
export interface CopyRow {
  messageKey: string;
  baseKey: string;
  owner: string;
  peer: string;
  messageType: number;
  timeMs: number;
  nonce: number;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  /** created_at_ms and stored_at_ms of an insert; stored_at_ms of an update. */
  nowMs: number;
  /** read_at_ms: a receipt's readAtMs, or a text copy's earliest known read (inserts only). */
  readAtMs: number | null;
  /** target_base_key: the message a receipt or delete names. */
  targetBaseKey: string | null;
  replay: boolean;
  originDevice: string | null;
  blob: Uint8Array;
}

/** What storing the copy does to other rows of the same owner. */
export type CopyEffect =
  /** Set read_at_ms of owner's copy targetMessageKey to readAtMs where it is null or later. */
  | { kind: 'markRead'; owner: string; targetMessageKey: string; readAtMs: number }
  /**
   * Insert the (owner, 'message', targetBaseKey) tombstone if missing, then delete owner's copies
   * `${targetBaseKey}|1`, `${targetBaseKey}|2` and owner's receipts naming targetBaseKey, with their outbox rows.
   */
  | { kind: 'deleteMessage'; owner: string; targetBaseKey: string }
  /**
   * Upsert the (owner, 'conversation', peer) tombstone keeping the larger deleteBeforeMs, then delete
   * owner's copies with that peer, type ≤ 6 and time_ms ≤ deleteBeforeMs, with their outbox rows.
   */
  | { kind: 'deleteConversation'; owner: string; peer: string; deleteBeforeMs: number };

export type CopyPlan =
  | { write: null; result: CopyResult }
  | { write: 'insert' | 'update'; row: CopyRow; effect: CopyEffect | null; result: CopyResult };

/** Decides what storing c does, given the facts copyLookups(c) asked for. */
export function planCopy(
  c: Container,
  facts: CopyFacts,
  opts: { nowMs: number; replay: boolean; originDevice: string | null },
): CopyPlan {
  const { owner, peer, baseKey, messageKey } = copyLookups(c);
  const t = c.messageType;
  // Tombstones win: a deleted conversation or message never comes back.
  if (t <= 6 && facts.conversationDeleteBeforeMs !== null && facts.conversationDeleteBeforeMs >= c.timeMs) {
    return { write: null, result: { messageKey, outcome: 'tombstoned', storedAtMs: 0 } };
  }
  if (t <= 2 && facts.messageTombstoned)
    return { write: null, result: { messageKey, outcome: 'tombstoned', storedAtMs: 0 } };
  // The latest revision wins; an equal or older one changes nothing.
  if (facts.existing && compareRevision(c, facts.existing) <= 0) {
    return { write: null, result: { messageKey, outcome: 'unchanged', storedAtMs: facts.existing.storedAtMs } };
  }
  let targetBaseKey: string | null = null;
  let readAtMs: number | null = null;
  let effect: CopyEffect | null = null;
  if (t === 3 || t === 4) {
    targetBaseKey = receiptTargetBaseKey(c);
    readAtMs = parseReceiptBody(c).readAtMs;
    // A type 3 copy belongs to the original sender (its type 2 copy); a type 4 to the reader (type 1).
    effect = { kind: 'markRead', owner, targetMessageKey: `${targetBaseKey}|${t === 3 ? 2 : 1}`, readAtMs };
  } else if (t === 5 || t === 6) {
    targetBaseKey = deleteTargetBaseKey(c);
    effect = { kind: 'deleteMessage', owner, targetBaseKey };
  } else if (t === 7 || t === 8) {
    effect = { kind: 'deleteConversation', owner, peer, deleteBeforeMs: parseDeleteConversationBody(c).deleteBeforeMs };
  } else {
    readAtMs = facts.earliestReceiptReadAtMs;
  }
  const row: CopyRow = {
    messageKey,
    baseKey,
    owner,
    peer,
    messageType: t,
    timeMs: c.timeMs,
    nonce: c.nonce,
    revisionTimeMs: c.revisionTimeMs,
    reencryptedAtMs: c.reencryptedAtMs,
    nowMs: opts.nowMs,
    readAtMs,
    targetBaseKey,
    replay: opts.replay,
    originDevice: opts.originDevice,
    blob: c.bytes,
  };
  return {
    write: facts.existing ? 'update' : 'insert',
    row,
    effect,
    result: { messageKey, outcome: facts.existing ? 'updated' : 'inserted', storedAtMs: opts.nowMs },
  };
}

/** Whether a copy's store changed the database (so outbox and delivery rows follow it). */
export const copyChanged = (r: CopyResult): boolean => r.outcome === 'inserted' || r.outcome === 'updated';

/**
 * The outbox row for one stored copy of owner, or null when the copy did not change or owner gets no
 * outbox row (not a local user). A pair's outgoing copy carries both blobs: the other server needs the
 * recipient's copy to deliver it.
 */
export function outboxRowFor(
  result: CopyResult,
  copy: Container,
  blobs: Uint8Array[],
  policy: OutboxPolicy,
  nowMs: number,
): OutboxRow | null {
  const owner = ownerOf(copy);
  const synced = policy.owners.get(owner);
  if (!copyChanged(result) || synced === undefined) return null;
  return outboxRow({
    owner,
    primaryMessageKey: result.messageKey,
    syncId: syncIdOf(result.messageKey, copy.revisionTimeMs, copy.reencryptedAtMs),
    storedAtMs: nowMs,
    blobs,
    synced,
  });
}

/**
 * The copies an outbox row holds, in blob order: a pair row (two blobs, keyed by its outgoing key) holds
 * [incomingKey, outgoingKey]; a single row holds its own key.
 */
export function outboxCopyKeys(primaryMessageKey: string, copies: number): string[] {
  return copies === 2 ? [incomingKeyOf(primaryMessageKey), primaryMessageKey] : [primaryMessageKey];
}

export const DIGEST_BYTES = 32;

/** sha256(`messageKey|revisionTimeMs|reencryptedAtMs`) of one copy: what DmDigest xors (docs/protocol.md §7). */
export function copyDigest(messageKey: string, revisionTimeMs: number, reencryptedAtMs: number): Uint8Array {
  return sha256(`${messageKey}|${revisionTimeMs}|${reencryptedAtMs}`);
}

/** Xors b into acc (both DIGEST_BYTES long). */
export function xorInto(acc: Uint8Array, b: Uint8Array): void {
  for (let i = 0; i < DIGEST_BYTES; i++) acc[i]! ^= b[i]!;
}

/**
 * An outbox row with the columns anti-entropy reads from an index instead of its blobs: the message's
 * timeMs (from its key) and the xor of its copies' digests (they share the row's revision, its syncId).
 */
export function outboxRow(row: Omit<OutboxRow, 'timeMs' | 'digest'>): OutboxRow {
  return { ...row, ...outboxDigestColumns(row.primaryMessageKey, row.syncId, row.blobs.length) };
}

/** The anti-entropy columns of an outbox row from its key, its syncId and its number of copies. */
export function outboxDigestColumns(
  primaryMessageKey: string,
  syncId: string,
  copies: number,
): { timeMs: number; digest: Uint8Array } {
  const revision = parseSyncId(syncId);
  const digest = new Uint8Array(DIGEST_BYTES);
  for (const key of outboxCopyKeys(primaryMessageKey, copies))
    xorInto(digest, copyDigest(key, revision?.revisionTimeMs ?? 0, revision?.reencryptedAtMs ?? 0));
  return { timeMs: outboxTimeMs(primaryMessageKey), digest };
}

/** Where anti-entropy places an outbox row: the message timeMs its key carries (0 for a key that does not parse). */
export const outboxTimeMs = (primaryMessageKey: string): number => parseMessageKey(primaryMessageKey)?.timeMs ?? 0;

/** Whether a setting value (updatedAtMs, value) replaces the stored one: newer wins, ties by value bytes. */
export function settingWins(
  incoming: { updatedAtMs: number; value: Uint8Array },
  stored: { updatedAtMs: number; value: Uint8Array } | null,
): boolean {
  if (!stored) return true;
  return (incoming.updatedAtMs - stored.updatedAtMs || compareBytes(incoming.value, stored.value)) > 0;
}

/** A setting's syncId: its key and updatedAtMs. */
export const settingSyncId = (key: string, updatedAtMs: number): string => `${key}:${updatedAtMs}`;

/** The key of a setting's syncId, or null when it is malformed. */
export function settingKeyOfSyncId(syncId: string): string | null {
  const cut = syncId.lastIndexOf(':');
  return cut <= 0 ? null : syncId.slice(0, cut);
}

/**
 * What a settings row counts against a sync page's maxBytes: its value, and its key as the JSON of the page carries it
 * twice (key and syncId; a key may hold characters JSON escapes), so that a page within maxBytes stays within a
 * frame as base64 (docs/protocol.md §7).
 */
export const settingRowBytes = (key: string, value: Uint8Array): number =>
  value.length + 2 * Buffer.byteLength(JSON.stringify(key));

/**
 * The first rows of a page within limit and maxBytes; one row larger than maxBytes still comes alone. hasMore says
 * a row was left: an array of rows holds up to limit + 1 rows so that hasMore needs no second query, and an iterator
 * (a statement's rows) is read no further than the first row left out.
 */
export function takeWithinBytes<T>(
  rows: Iterable<T>,
  limit: number,
  maxBytes: number,
  size: (row: T) => number,
): { items: T[]; hasMore: boolean } {
  const items: T[] = [];
  let bytes = 0;
  for (const row of rows) {
    if (items.length === limit) return { items, hasMore: true };
    const n = size(row);
    if (items.length > 0 && bytes + n > maxBytes) return { items, hasMore: true };
    items.push(row);
    bytes += n;
  }
  return { items, hasMore: false };
}

/**
 * What a setting counts against a GetUserSettings answer's bytes (docs/protocol.md decision 61): its value, its key as
 * JSON, and 64 for the item's other fields, so that a page of many small settings stays as small as one of few large.
 */
export const settingAnswerBytes = (key: string, valueBytes: number): number =>
  valueBytes + Buffer.byteLength(JSON.stringify(key)) + 64;

/**
 * Folds outbox rows, fed in ascending timeMs order, into the digest buckets of ascending disjoint ranges
 * (DmDigest, docs/protocol.md §7). Rows outside every range are skipped.
 */
export class DigestFold {
  readonly buckets: DigestBucket[];
  private at = 0;

  constructor(ranges: readonly TimeRange[]) {
    this.buckets = ranges.map((r) =>
      Object.assign({}, r, { count: 0, xor: new Uint8Array(DIGEST_BYTES), minTimeMs: null, maxTimeMs: null }),
    );
  }

  add(timeMs: number, copies: number, digest: Uint8Array): void {
    while (this.at < this.buckets.length && timeMs >= this.buckets[this.at]!.toTimeMs) this.at++;
    const b = this.buckets[this.at];
    if (!b || timeMs < b.fromTimeMs) return;
    b.count += copies;
    xorInto(b.xor, digest);
    b.minTimeMs ??= timeMs; // rows come in ascending timeMs
    b.maxTimeMs = timeMs;
  }
}

/** Rows per read when a digest pages through an owner's outbox index. */
export const DIGEST_PAGE_ROWS = 5000;

// ---- user chains (docs/protocol.md §14.2) ----

/** prevHash of a genesis block, as hex. */
export const ZERO_HASH_HEX = toHex(ZERO_HASH);

/**
 * How block relates to the chain whose head is `head`; `heldHash` is the hash this chain holds at block.index
 * (looked up only when heldIndex() says the chain holds that index). `stored` means: append it.
 */
export function chainLink(
  head: Pick<ChainHead, 'index' | 'hash' | 'timeMs'> | null,
  block: Pick<ChainBlockInput, 'index' | 'prevHash' | 'hash' | 'timeMs'>,
  heldHash: string | null,
): ChainLink {
  const headIndex = head?.index ?? -1;
  if (block.index <= headIndex) return heldHash === block.hash ? 'known' : 'diverged';
  if (block.index > headIndex + 1) return 'gap';
  if (block.prevHash !== (head?.hash ?? ZERO_HASH_HEX)) return 'mismatch';
  if (head && block.timeMs < head.timeMs) return 'time';
  return 'stored';
}

/** Whether chainLink needs the hash held at block.index (the chain holds that index already). */
export const holdsIndex = (head: Pick<ChainHead, 'index'> | null, index: number): boolean =>
  index <= (head?.index ?? -1);
