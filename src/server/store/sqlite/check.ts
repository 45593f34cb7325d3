/**
 * The check area on SQLite (`shine check`): PRAGMA integrity_check, and the shared queries of ../check-sql.ts,
 * both on a thread with a read-only connection.
 */
import { unpackBlobs } from '../blobs.js';
import { CHECK_SQL } from '../check-sql.js';
import type { OutboxRow } from '../types.js';
import type { CheckCopyRow, CheckStore, IntegrityReport, RowFindings } from '../types.js';
import { SqliteArea } from './db.js';
import { readOnThread } from './read-thread.js';
import { OUTBOX_ROW, outboxRowKey, upsertOutbox } from './outbox.js';

/** The database's own checks. */
export const INTEGRITY_SQL = { integrity: 'PRAGMA integrity_check', fk: 'PRAGMA foreign_key_check' } as const;

/** findRows' searches, one statement each. */
export const FIND_ROWS_SQL = {
  deliveryWithoutCopy: CHECK_SQL.deliveryWithoutCopy,
  outboxWithoutCopy: CHECK_SQL.outboxWithoutCopy,
  acksWithoutCopy: CHECK_SQL.acksWithoutCopy,
  acksWithoutDevice: CHECK_SQL.acksWithoutDevice,
  outboxBehindCopy: CHECK_SQL.outboxBehindCopy,
  outboxMissing: CHECK_SQL.outboxMissing,
  deliveryAheadOfCopy: CHECK_SQL.deliveryAheadOfCopy,
} as const;

export class SqliteCheckStore extends SqliteArea implements CheckStore {
  async integrity(): Promise<IntegrityReport> {
    // integrity_check reads every page and checks every index against its table (quick_check does not).
    const rows = await this.readAll(INTEGRITY_SQL);
    const problems = rows.integrity.map((r) => String(r.integrity_check)).filter((line) => line !== 'ok');
    if (rows.fk.length > 0) problems.push(`${rows.fk.length} foreign key violation(s)`);
    return { method: 'SQLite PRAGMA integrity_check (every page, every index against its table)', problems };
  }

  /**
   * Runs whole-database reads on a thread with its own read-only connection (./read-thread.ts), off the
   * event loop of a live server; an in-memory database has no file to open there, so it reads here.
   */
  private async readAll<K extends string>(
    statements: Record<K, string>,
  ): Promise<Record<K, Record<string, unknown>[]>> {
    const conn = this.db.conn;
    if (!conn.memory) return readOnThread(conn.name, statements);
    const entries = Object.entries<string>(statements).map(([name, sql]) => [name, conn.prepare(sql).all()]);
    return Object.fromEntries(entries) as Record<K, Record<string, unknown>[]>;
  }

  rebuildIndexes(): Promise<void> {
    return this.db.write(() => void this.db.conn.exec('REINDEX'));
  }

  async copiesPage(afterKey: string, limit: number): Promise<CheckCopyRow[]> {
    const rows = this.sql(
      `SELECT message_key, owner_login, revision_time_ms, reencrypted_at_ms, blob FROM signed_messages
       WHERE message_key > ? ORDER BY message_key LIMIT ?`,
    ).all(afterKey, limit) as {
      message_key: string;
      owner_login: string;
      revision_time_ms: number;
      reencrypted_at_ms: number;
      blob: Buffer;
    }[];
    return rows.map((r) => ({
      messageKey: r.message_key,
      owner: r.owner_login,
      revisionTimeMs: r.revision_time_ms,
      reencryptedAtMs: r.reencrypted_at_ms,
      blob: new Uint8Array(r.blob.buffer, r.blob.byteOffset, r.blob.byteLength),
    }));
  }

  async findRows(): Promise<RowFindings> {
    const { outboxWithoutCopy, ...found } = await this.readAll(FIND_ROWS_SQL);
    const ids = (rows: Record<string, unknown>[]) => rows.map((r) => String(r.id));
    return {
      deliveryWithoutCopy: ids(found.deliveryWithoutCopy),
      outboxWithoutCopy: outboxWithoutCopy.map((r) => ({
        owner: String(r.owner_login),
        primaryMessageKey: String(r.primary_message_key),
        blobs: unpackBlobs(new Uint8Array(r.blobs as Uint8Array)),
      })),
      acksWithoutCopy: ids(found.acksWithoutCopy),
      acksWithoutDevice: ids(found.acksWithoutDevice),
      outboxBehindCopy: ids(found.outboxBehindCopy),
      outboxMissing: ids(found.outboxMissing),
      deliveryAheadOfCopy: ids(found.deliveryAheadOfCopy),
    };
  }

  removeDeliveriesWithoutCopy(outgoingKeys: readonly string[]): Promise<number> {
    return this.db.write(() => {
      let n = 0;
      for (const key of outgoingKeys) {
        n += this.sql(
          `DELETE FROM dm_delivery_state AS d WHERE d.outgoing_key = ? AND ${CHECK_SQL.deliveryHasNoCopy}`,
        ).run(key).changes;
      }
      return n;
    });
  }

  removeOutboxWithoutCopy(owner: string, primaryMessageKey: string): Promise<boolean> {
    return this.db.write(
      () =>
        this.sql(
          `DELETE FROM dm_sync_outbox AS o WHERE ${OUTBOX_ROW}
             AND NOT EXISTS (SELECT 1 FROM signed_messages m
                             WHERE m.message_key = o.primary_message_key AND m.owner_login = o.owner_login)`,
        ).run(...outboxRowKey(owner, primaryMessageKey)).changes === 1,
    );
  }

  removeOrphanAcks(): Promise<number> {
    return this.db.write(() => this.sql(CHECK_SQL.removeOrphanAcks).run().changes);
  }

  rewriteOutbox(row: OutboxRow): Promise<boolean> {
    return this.db.write(() => {
      const current = this.sql(
        `SELECT 1 FROM signed_messages m WHERE m.message_key = ? AND m.owner_login = ? AND ${CHECK_SQL.syncIdOfCopy} = ?`,
      ).get(row.primaryMessageKey, row.owner, row.syncId);
      if (current) upsertOutbox(this.db, Object.assign({}, row, { synced: false }));
      return current !== undefined;
    });
  }
}
