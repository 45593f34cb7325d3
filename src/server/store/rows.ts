/** Database rows as both dialects read them (integers as numbers, blobs as bytes), and their mapping. */
import { toBase64 } from '../../protocol/bytes.js';
import type { DeliveryState, HistoryItem } from '../../protocol/ops.js';
import type { PushSubscriptionRow } from '../push/store.js';
import type { Container } from '../../protocol/container.js';
import { baseKeyOf } from '../../protocol/container.js';
import type { DeliveryReceipt } from '../../protocol/receipt.js';
import { pickReceipt } from '../../protocol/receipt.js';
import type { CopyRow } from './rules.js';
import type { ChainBlockRow, ChainHead, DeliveryRow, StoredCopy, StorePairInput } from './types.js';

/** A signed_messages row as both dialects read it (integers as numbers, the blob as bytes). */
export interface MessageDbRow {
  message_key: string;
  base_key: string;
  owner_login: string;
  peer_login: string;
  message_type: number;
  time_ms: number;
  nonce: number;
  revision_time_ms: number;
  reencrypted_at_ms: number;
  created_at_ms: number;
  stored_at_ms: number;
  read_at_ms: number | null;
  blob: Uint8Array;
}

export function toStoredCopy(r: MessageDbRow): StoredCopy {
  const [fromLogin, toLogin] = r.message_type % 2 === 0 ? [r.owner_login, r.peer_login] : [r.peer_login, r.owner_login];
  return {
    messageKey: r.message_key,
    baseKey: r.base_key,
    messageType: r.message_type,
    fromLogin,
    toLogin,
    timeMs: r.time_ms,
    revisionTimeMs: r.revision_time_ms,
    reencryptedAtMs: r.reencrypted_at_ms,
    storedAtMs: r.stored_at_ms,
    blob: new Uint8Array(r.blob.buffer, r.blob.byteOffset, r.blob.byteLength),
  };
}

export interface DeliveryDbRow {
  outgoing_key: string;
  base_key: string;
  sender_login: string;
  recipient_login: string;
  revision_time_ms: number;
  reencrypted_at_ms: number;
  state: DeliveryState;
  attempt: number;
  accepted_at_ms: number;
  next_attempt_at_ms: number | null;
  lease_until_ms: number | null;
  row_version: number;
  last_error: string | null;
  receipt_json: string | null;
}

export function toDeliveryRow(r: DeliveryDbRow): DeliveryRow {
  return {
    outgoingKey: r.outgoing_key,
    baseKey: r.base_key,
    senderLogin: r.sender_login,
    recipientLogin: r.recipient_login,
    revisionTimeMs: r.revision_time_ms,
    reencryptedAtMs: r.reencrypted_at_ms,
    state: r.state,
    attempt: r.attempt,
    acceptedAtMs: r.accepted_at_ms,
    nextAttemptAtMs: r.next_attempt_at_ms,
    leaseUntilMs: r.lease_until_ms,
    rowVersion: r.row_version,
    lastError: r.last_error,
    proof: r.receipt_json === null ? null : (JSON.parse(r.receipt_json) as DeliveryReceipt),
  };
}

/** A delivery proof as dm_delivery_state.receipt_json holds it (docs/protocol.md §13.1). */
export function proofJson(proof: DeliveryReceipt | null | undefined): string | null {
  return proof ? JSON.stringify(pickReceipt(proof)) : null;
}

/** A push_subscriptions row as both dialects read it. */
export interface PushDbRow {
  endpoint: string;
  owner_login: string;
  device_id: string | null;
  p256dh: string;
  auth: string;
  created_at_ms: number;
  updated_at_ms: number;
  last_success_at_ms: number | null;
  last_error_at_ms: number | null;
  last_error: string | null;
  consecutive_failures: number;
}

/** The push_subscriptions columns a PushDbRow holds. */
export const PUSH_COLUMNS = `endpoint, owner_login, device_id, p256dh, auth, created_at_ms, updated_at_ms, last_success_at_ms,
  last_error_at_ms, last_error, consecutive_failures`;

export const toPushSubscription = (r: PushDbRow): PushSubscriptionRow => ({
  endpoint: r.endpoint,
  ownerLogin: r.owner_login,
  deviceId: r.device_id ?? '',
  p256dh: r.p256dh,
  auth: r.auth,
  createdAtMs: r.created_at_ms,
  updatedAtMs: r.updated_at_ms,
  lastSuccessAtMs: r.last_success_at_ms,
  lastErrorAtMs: r.last_error_at_ms,
  lastError: r.last_error,
  consecutiveFailures: r.consecutive_failures,
});

/** A history row: the copy, its pair's delivery state and the proof of this revision's delivery. */
export type HistoryDbRow = MessageDbRow & { delivery_state: DeliveryState | null; delivery_proof: string | null };

/**
 * The history query's delivery_proof column (both dialects; d is the pair's delivery row, m the copy):
 * the receipt only while that row is delivered for this very revision (docs/protocol.md §13.1).
 */
export const HISTORY_PROOF = `CASE WHEN d.state = 'delivered' AND d.revision_time_ms = m.revision_time_ms
           AND d.reencrypted_at_ms = m.reencrypted_at_ms THEN d.receipt_json END AS delivery_proof`;

/** A history page from up to limit + 1 rows (newest first), each with its pair's delivery state. */
export function toHistoryPage(
  rows: readonly HistoryDbRow[],
  limit: number,
): { items: HistoryItem[]; hasMore: boolean } {
  const items = rows.slice(0, limit).map((r): HistoryItem => {
    const { blob, storedAtMs: _storedAtMs, ...fields } = toStoredCopy(r);
    const item: HistoryItem = Object.assign({}, fields, {
      createdAtMs: r.created_at_ms,
      readAtMs: r.read_at_ms,
      deliveryState: r.message_type === 2 ? (r.delivery_state ?? 'accepted') : null,
      blobB64: toBase64(blob),
    });
    if (r.message_type === 2 && r.delivery_proof !== null)
      item.deliveryProof = JSON.parse(r.delivery_proof) as DeliveryReceipt;
    return item;
  });
  return { items, hasMore: rows.length > limit };
}

/** The columns of a new signed_messages row, in copyRowValues' order (both dialects' INSERT). */
export const COPY_COLUMNS = `message_key, base_key, owner_login, peer_login, message_type, time_ms, nonce,
  revision_time_ms, reencrypted_at_ms, created_at_ms, stored_at_ms, read_at_ms, target_base_key, replay,
  origin_device, blob`;

/** PostgreSQL's types of COPY_COLUMNS, for the arrays a batch's rows go in. */
export const COPY_PG_TYPES = [
  'text',
  'text',
  'text',
  'text',
  'int',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
  'bigint',
  'text',
  'boolean',
  'text',
  'bytea',
];

/** A new copy's values in COPY_COLUMNS order (replay as a boolean; SQLite callers turn it into 0/1). */
export function copyRowValues(row: CopyRow): [...(string | number | boolean | null)[], Uint8Array] {
  return [
    row.messageKey,
    row.baseKey,
    row.owner,
    row.peer,
    row.messageType,
    row.timeMs,
    row.nonce,
    row.revisionTimeMs,
    row.reencryptedAtMs,
    row.nowMs,
    row.nowMs,
    row.readAtMs,
    row.targetBaseKey,
    row.replay,
    row.originDevice,
    row.blob,
  ];
}

/** The columns of a new dm_delivery_state row: the outgoing key, deliveryRowValues, then the last three. */
export const DELIVERY_COLUMNS = `outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
  reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, receipt_json,
  row_version, last_error, updated_at_ms`;

/** PostgreSQL's types of DELIVERY_COLUMNS without row_version and last_error (written as 1 and NULL). */
export const DELIVERY_PG_TYPES = [
  'text',
  'text',
  'text',
  'text',
  'bigint',
  'bigint',
  'text',
  'int',
  'bigint',
  'bigint',
  'bigint',
  'text',
  'bigint',
];

/**
 * How both dialects (re)start a delivery row on a conflict: only for a newer revision of the pair, and
 * then as a new row (its version counted on).
 */
export const DELIVERY_ON_CONFLICT = `ON CONFLICT (outgoing_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
  reencrypted_at_ms = excluded.reencrypted_at_ms, state = excluded.state, attempt = excluded.attempt,
  accepted_at_ms = excluded.accepted_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms,
  lease_until_ms = excluded.lease_until_ms, receipt_json = excluded.receipt_json,
  row_version = dm_delivery_state.row_version + 1, last_error = NULL, updated_at_ms = excluded.updated_at_ms
  WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
        > (dm_delivery_state.revision_time_ms, dm_delivery_state.reencrypted_at_ms)`;

/**
 * The values of a new delivery row for an outgoing copy, in column order from base_key to
 * receipt_json (both dialects' INSERT INTO dm_delivery_state list its columns so).
 */
export function deliveryRowValues(
  outgoing: Container,
  d: NonNullable<StorePairInput['delivery']>,
): (string | number | null)[] {
  return [
    baseKeyOf(outgoing),
    outgoing.fromLogin,
    outgoing.toLogin,
    outgoing.revisionTimeMs,
    outgoing.reencryptedAtMs,
    d.state,
    d.attempt,
    d.acceptedAtMs,
    d.nextAttemptAtMs,
    d.leaseUntilMs ?? null,
    proofJson(d.proof),
  ];
}

/** A chain_heads row as both dialects read it. */
export interface ChainHeadDbRow {
  login: string;
  head_index: number;
  head_hash: string;
  time_ms: number;
  global_seq: number;
}

export const CHAIN_HEAD_COLUMNS = 'login, head_index, head_hash, time_ms, global_seq';

/** A chain_blocks row as both dialects read it (the block's bytes as the driver returns them). */
export interface ChainBlockDbRow {
  idx: number;
  hash: string;
  time_ms: number;
  global_seq: number;
  block: Uint8Array;
}

export const CHAIN_BLOCK_COLUMNS = 'idx, hash, time_ms, global_seq, block';

export const chainBlockOf = (r: ChainBlockDbRow): ChainBlockRow => ({
  index: r.idx,
  hash: r.hash,
  timeMs: r.time_ms,
  globalSeq: r.global_seq,
  bytes: new Uint8Array(r.block),
});

export const chainHeadOf = (r: ChainHeadDbRow | undefined): ChainHead | null =>
  r ? { login: r.login, index: r.head_index, hash: r.head_hash, timeMs: r.time_ms, globalSeq: r.global_seq } : null;
