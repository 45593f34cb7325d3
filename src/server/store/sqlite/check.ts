/** The check area on SQLite (`shine check`): PRAGMA integrity_check, and the shared queries of ../check-sql.ts. */
import { unpackBlobs } from '../blobs.js';
import { CHECK_SQL } from '../check-sql.js';
import type { OutboxRow } from '../types.js';
import type { CheckCopyRow, CheckStore, IntegrityReport, RowFindings } from '../types.js';
import { SqliteArea } from './db.js';
import { OUTBOX_ROW, outboxRowKey, upsertOutbox } from './outbox.js';

export class SqliteCheckStore extends SqliteArea implements CheckStore {
  async integrity(): Promise<IntegrityReport> {
    // integrity_check reads every page and checks every index against its table (quick_check does not).
    const rows = this.db.conn.pragma('integrity_check') as { integrity_check: string }[];
    const problems = rows.map((r) => r.integrity_check).filter((line) => line !== 'ok');
    const fk = this.db.conn.pragma('foreign_key_check') as unknown[];
    if (fk.length > 0) problems.push(`${fk.length} foreign key violation(s)`);
    return { method: 'SQLite PRAGMA integrity_check (every page, every index against its table)', problems };
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
    const ids = (text: string) => (this.sql(text).all() as { id: string }[]).map((r) => r.id);
    const outbox = this.sql(CHECK_SQL.outboxWithoutCopy).all() as {
      owner_login: string;
      primary_message_key: string;
      blobs: Buffer;
    }[];
    return {
      deliveryWithoutCopy: ids(CHECK_SQL.deliveryWithoutCopy),
      outboxWithoutCopy: outbox.map((r) => ({
        owner: r.owner_login,
        primaryMessageKey: r.primary_message_key,
        blobs: unpackBlobs(new Uint8Array(r.blobs)),
      })),
      acksWithoutCopy: ids(CHECK_SQL.acksWithoutCopy),
      acksWithoutDevice: ids(CHECK_SQL.acksWithoutDevice),
      outboxBehindCopy: ids(CHECK_SQL.outboxBehindCopy),
      outboxMissing: ids(CHECK_SQL.outboxMissing),
      deliveryAheadOfCopy: ids(CHECK_SQL.deliveryAheadOfCopy),
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
      if (current) upsertOutbox(this.db, { ...row, synced: false });
      return current !== undefined;
    });
  }
}
