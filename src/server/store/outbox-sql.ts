/**
 * How every writer of dm_sync_outbox (storing a copy, `shine check --repair`) names its columns, in both
 * dialects: one text, so an added column cannot be forgotten by one writer; and how PostgreSQL resolves a
 * conflict on its primary key (SQLite's table has none since its migration 8: sqlite/outbox.ts).
 */
import { packBlobs } from './blobs.js';
import type { OutboxRow } from './types.js';

export const OUTBOX_COLUMNS =
  'owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms, copies, digest';

export const OUTBOX_ON_CONFLICT = `ON CONFLICT (owner_login, primary_message_key) DO UPDATE SET sync_id = excluded.sync_id,
  stored_at_ms = excluded.stored_at_ms, blobs = excluded.blobs, synced = excluded.synced,
  time_ms = excluded.time_ms, copies = excluded.copies, digest = excluded.digest`;

/** PostgreSQL's types of OUTBOX_COLUMNS, for casts of parameters. */
export const OUTBOX_PG_TYPES = ['text', 'text', 'text', 'bigint', 'bytea', 'boolean', 'bigint', 'int', 'bytea'];

/** The row's values in OUTBOX_COLUMNS order (synced as a boolean; SQLite callers turn it into 0/1). */
export function outboxValues(
  row: OutboxRow,
): [string, string, string, number, Uint8Array, boolean, number, number, Uint8Array] {
  return [
    row.owner,
    row.primaryMessageKey,
    row.syncId,
    row.storedAtMs,
    packBlobs(row.blobs),
    row.synced,
    row.timeMs,
    row.blobs.length,
    row.digest,
  ];
}
