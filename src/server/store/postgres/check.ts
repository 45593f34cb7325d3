/**
 * The check area on PostgreSQL (`shine check`). PostgreSQL has no integrity_check: this checks that every
 * index of the schema exists and is valid and ready (pg_index), and, where the amcheck extension is
 * installed, runs bt_index_check on each of them. The row checks are the shared queries of ../check-sql.ts.
 */
import { unpackBlobs } from '../blobs.js';
import { OUTBOX_COLUMNS, OUTBOX_ON_CONFLICT, OUTBOX_PG_TYPES, outboxValues } from '../outbox-sql.js';
import { CHECK_SQL } from '../check-sql.js';
import type { OutboxRow } from '../types.js';
import type { CheckCopyRow, CheckStore, IntegrityReport, RowFindings } from '../types.js';
import type { PgDb } from './db.js';

/** Every index the migrations create (primary keys included), by the table it belongs to. */
const SCHEMA_TABLES = [
  'server_meta',
  'users',
  'user_access_servers_current',
  'servers',
  'signed_messages',
  'dm_delivery_state',
  'dm_sync_outbox',
  'user_settings',
  'dm_tombstones',
  'push_subscriptions',
  'session_devices',
  'session_deliveries',
  's2s_nonces',
  'server_processes',
];

export class PgCheckStore implements CheckStore {
  constructor(private readonly db: PgDb) {}

  async integrity(): Promise<IntegrityReport> {
    const problems: string[] = [];
    const tables = await this.db.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_class c WHERE c.relkind = 'r' AND c.relname = ANY($1::text[])
         AND c.relnamespace = current_schema()::regnamespace`,
      [SCHEMA_TABLES],
    );
    const present = new Set(tables.rows.map((r) => r.name));
    for (const t of SCHEMA_TABLES) if (!present.has(t)) problems.push(`table ${t} is missing`);
    const indexes = await this.db.query<{ name: string; valid: boolean; ready: boolean; btree: boolean }>(
      `SELECT i.relname AS name, x.indisvalid AS valid, x.indisready AS ready, a.amname = 'btree' AS btree
       FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
         JOIN pg_am a ON a.oid = i.relam
       WHERE t.relname = ANY($1::text[]) AND t.relnamespace = current_schema()::regnamespace ORDER BY i.relname`,
      [SCHEMA_TABLES],
    );
    for (const ix of indexes.rows) if (!ix.valid || !ix.ready) problems.push(`index ${ix.name} is not valid`);
    const amcheck = await this.db.query(`SELECT 1 FROM pg_extension WHERE extname = 'amcheck'`);
    if (amcheck.rows.length > 0) {
      for (const ix of indexes.rows.filter((i) => i.btree && i.valid)) {
        try {
          await this.db.query('SELECT bt_index_check($1::regclass, true)', [ix.name]);
        } catch (err) {
          problems.push(`index ${ix.name}: ${(err as Error).message}`);
        }
      }
    }
    return {
      method:
        `PostgreSQL: the schema's ${SCHEMA_TABLES.length} tables exist and their ${indexes.rows.length} indexes are valid and ready` +
        (amcheck.rows.length > 0 ? '; amcheck bt_index_check on every B-tree index' : ' (amcheck is not installed)'),
      problems,
    };
  }

  async rebuildIndexes(): Promise<void> {
    for (const t of SCHEMA_TABLES) await this.db.query(`REINDEX TABLE ${t}`);
  }

  async copiesPage(afterKey: string, limit: number): Promise<CheckCopyRow[]> {
    const r = await this.db.query<{
      message_key: string;
      owner_login: string;
      revision_time_ms: number;
      reencrypted_at_ms: number;
      blob: Buffer;
    }>(
      `SELECT message_key, owner_login, revision_time_ms, reencrypted_at_ms, blob FROM signed_messages
       WHERE message_key > $1 ORDER BY message_key LIMIT $2`,
      [afterKey, limit],
    );
    return r.rows.map((row) => ({
      messageKey: row.message_key,
      owner: row.owner_login,
      revisionTimeMs: row.revision_time_ms,
      reencryptedAtMs: row.reencrypted_at_ms,
      blob: new Uint8Array(row.blob),
    }));
  }

  async findRows(): Promise<RowFindings> {
    const ids = async (text: string) => (await this.db.query<{ id: string }>(text)).rows.map((r) => r.id);
    const outbox = await this.db.query<{ owner_login: string; primary_message_key: string; blobs: Buffer }>(
      CHECK_SQL.outboxWithoutCopy,
    );
    return {
      deliveryWithoutCopy: await ids(CHECK_SQL.deliveryWithoutCopy),
      outboxWithoutCopy: outbox.rows.map((r) => ({
        owner: r.owner_login,
        primaryMessageKey: r.primary_message_key,
        blobs: unpackBlobs(new Uint8Array(r.blobs)),
      })),
      acksWithoutCopy: await ids(CHECK_SQL.acksWithoutCopy),
      acksWithoutDevice: await ids(CHECK_SQL.acksWithoutDevice),
      outboxBehindCopy: await ids(CHECK_SQL.outboxBehindCopy),
      outboxMissing: await ids(CHECK_SQL.outboxMissing),
      deliveryAheadOfCopy: await ids(CHECK_SQL.deliveryAheadOfCopy),
    };
  }

  async removeDeliveriesWithoutCopy(outgoingKeys: readonly string[]): Promise<number> {
    const r = await this.db.query(
      `DELETE FROM dm_delivery_state AS d WHERE d.outgoing_key = ANY($1::text[]) AND ${CHECK_SQL.deliveryHasNoCopy}`,
      [outgoingKeys],
    );
    return r.rowCount ?? 0;
  }

  async removeOutboxWithoutCopy(owner: string, primaryMessageKey: string): Promise<boolean> {
    const r = await this.db.query(
      `DELETE FROM dm_sync_outbox AS o WHERE o.owner_login = $1 AND o.primary_message_key = $2
         AND NOT EXISTS (SELECT 1 FROM signed_messages m
                         WHERE m.message_key = o.primary_message_key AND m.owner_login = o.owner_login)`,
      [owner, primaryMessageKey],
    );
    return r.rowCount === 1;
  }

  async removeOrphanAcks(): Promise<number> {
    return (await this.db.query(CHECK_SQL.removeOrphanAcks)).rowCount ?? 0;
  }

  async rewriteOutbox(row: OutboxRow): Promise<boolean> {
    const values = outboxValues(Object.assign({}, row, { synced: false })).map((v) =>
      v instanceof Uint8Array ? Buffer.from(v) : v,
    );
    const params = values.map((_, i) => `$${i + 1}::${OUTBOX_PG_TYPES[i]}`).join(', ');
    const r = await this.db.query(
      `INSERT INTO dm_sync_outbox (${OUTBOX_COLUMNS}) SELECT ${params}
       WHERE EXISTS (SELECT 1 FROM signed_messages m
         WHERE m.message_key = $2 AND m.owner_login = $1 AND ${CHECK_SQL.syncIdOfCopy} = $3)
       ${OUTBOX_ON_CONFLICT}`,
      values,
    );
    return r.rowCount === 1;
  }
}
