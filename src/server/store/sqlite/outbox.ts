/**
 * How the SQLite store finds and writes one outbox row. Since migration 8 the table has no index of its own
 * on (owner, primaryMessageKey): a row is found through `dm_sync_outbox_digest` by (owner, the message timeMs
 * its key carries, key), which every writer fills from the key (outboxTimeMs), so a pair writes one B-tree less.
 */
import { OUTBOX_COLUMNS, outboxValues } from '../outbox-sql.js';
import { outboxTimeMs } from '../rules.js';
import type { OutboxRow } from '../types.js';
import { type SqliteDb, sqliteValues } from './db.js';

/** The WHERE clause of one row (alias o), bound with outboxRowKey. */
export const OUTBOX_ROW = 'o.owner_login = ? AND o.time_ms = ? AND o.primary_message_key = ?';

export const outboxRowKey = (owner: string, primaryMessageKey: string): [string, number, string] => [
  owner,
  outboxTimeMs(primaryMessageKey),
  primaryMessageKey,
];

const UPDATE_ROW = `UPDATE dm_sync_outbox AS o INDEXED BY dm_sync_outbox_digest
  SET sync_id = ?, stored_at_ms = ?, blobs = ?, synced = ?, copies = ?, digest = ? WHERE ${OUTBOX_ROW}`;
const INSERT_ROW = `INSERT INTO dm_sync_outbox (${OUTBOX_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/** Writes the row, replacing the one with its key; run inside a write. */
export function upsertOutbox(db: SqliteDb, row: OutboxRow): void {
  const values = sqliteValues(outboxValues(row));
  const [owner, key, syncId, storedAtMs, blobs, synced, timeMs, copies, digest] = values;
  const updated = db.sql(UPDATE_ROW).run(syncId, storedAtMs, blobs, synced, copies, digest, owner, timeMs, key).changes;
  if (updated === 0) db.sql(INSERT_ROW).run(...values);
}
