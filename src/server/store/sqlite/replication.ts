/** The replication area on SQLite: the DM outbox (dm_sync_outbox) and settings rows a user's other server pulls. */
import { parseSyncId } from '../../../protocol/container.js';
import { unpackBlobs } from '../blobs.js';
import { DIGEST_PAGE_ROWS, DigestFold, settingKeyOfSyncId, settingRowBytes, takeWithinBytes } from '../rules.js';
import type {
  DigestBucket,
  DmSyncRow,
  OutboxKeyRow,
  ReplicationStore,
  SettingRow,
  SyncPage,
  SyncPageQuery,
  TimeRange,
} from '../types.js';
import { SqliteArea } from './db.js';
import { OUTBOX_ROW, outboxRowKey } from './outbox.js';

/** Outbox rows a write of markUnsynced reads (and marks, those synced). */
const MARK_PAGE = 1_000;

/** A row of a markUnsynced page: its rowid, and for an owner's pages its place in the digest index. */
interface MarkRow {
  id: number;
  time_ms?: number;
  primary_message_key?: string;
}

interface OutboxDbRow {
  primary_message_key: string;
  sync_id: string;
  stored_at_ms: number;
  blobs: Buffer;
}

interface SettingSyncDbRow {
  key: string;
  value: Buffer;
  updated_at_ms: number;
  stored_at_ms: number;
  sync_id: string;
}

export class SqliteReplicationStore extends SqliteArea implements ReplicationStore {
  dmSyncPage(q: SyncPageQuery): Promise<SyncPage<DmSyncRow>> {
    return this.syncPage<OutboxDbRow, DmSyncRow>(q, {
      ack: (syncId) => {
        const parsed = parseSyncId(syncId);
        if (!parsed) return;
        // A row that moved on to a newer revision keeps synced = 0: only its current syncId acks it.
        this.sql(`UPDATE dm_sync_outbox AS o SET synced = 1 WHERE ${OUTBOX_ROW} AND o.sync_id = ?`).run(
          ...outboxRowKey(q.owner, parsed.primaryMessageKey),
          syncId,
        );
      },
      select: `SELECT primary_message_key, sync_id, stored_at_ms, blobs FROM dm_sync_outbox INDEXED BY dm_sync_outbox_unsynced
         WHERE owner_login = ? AND synced = 0 AND (stored_at_ms, primary_message_key) > (?, ?)
         ORDER BY stored_at_ms, primary_message_key LIMIT ?`,
      size: (r) => unpackBlobs(r.blobs).reduce((n, b) => n + b.length, 0),
      toItem: toDmSyncRow,
    });
  }

  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>> {
    return this.syncPage<SettingSyncDbRow, SettingRow & { syncId: string }>(q, {
      ack: (syncId) => {
        const key = settingKeyOfSyncId(syncId);
        if (key === null) return;
        this.sql('UPDATE user_settings SET synced = 1 WHERE owner_login = ? AND key = ? AND sync_id = ?').run(
          q.owner,
          key,
          syncId,
        );
      },
      select: `SELECT key, value, updated_at_ms, stored_at_ms, sync_id FROM user_settings INDEXED BY user_settings_unsynced
         WHERE owner_login = ? AND synced = 0 AND (stored_at_ms, key) > (?, ?)
         ORDER BY stored_at_ms, key LIMIT ?`,
      size: (r) => settingRowBytes(r.key, r.value),
      toItem: (r) => ({
        key: r.key,
        value: new Uint8Array(r.value),
        updatedAtMs: r.updated_at_ms,
        storedAtMs: r.stored_at_ms,
        syncId: r.sync_id,
      }),
    });
  }

  /**
   * One write applies the acks of the previous page, then reads the next one: select takes (owner,
   * afterStoredAtMs, afterKey, limit) and returns unsynced rows in cursor order.
   */
  private syncPage<R, T>(
    q: SyncPageQuery,
    how: { ack: (syncId: string) => void; select: string; size: (row: R) => number; toItem: (row: R) => T },
  ): Promise<SyncPage<T>> {
    return this.db.write(() => {
      for (const syncId of q.ackSyncIds) how.ack(syncId);
      const rows = this.sql(how.select).all(q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1) as R[];
      const page = takeWithinBytes(rows, q.limit, q.maxBytes, how.size);
      return { items: page.items.map(how.toItem), hasMore: page.hasMore };
    });
  }

  async markUnsynced(owner: string | null): Promise<{ updated: number; dmUpdated: number }> {
    const updated = await this.db.write(() =>
      owner === null
        ? this.sql('UPDATE user_settings SET synced = 0 WHERE synced = 1').run().changes
        : this.sql('UPDATE user_settings SET synced = 0 WHERE owner_login = ? AND synced = 1').run(owner).changes,
    );
    // The outbox in writes of MARK_PAGE rows, each in a group commit of its own: a history of a million rows
    // is many short writes with sessions served between them, not one that stops the event loop for
    // seconds. Rows pulled meanwhile are acknowledged as usual, new ones are written as usual. A page's
    // rowids come from an index (everyone's: the table's own order; an owner's: the digest index).
    const page =
      owner === null
        ? (after: MarkRow | undefined) =>
            this.sql('SELECT rowid AS id FROM dm_sync_outbox WHERE rowid > ? ORDER BY rowid LIMIT ?').all(
              after?.id ?? 0,
              MARK_PAGE,
            ) as MarkRow[]
        : (after: MarkRow | undefined) =>
            this.sql(
              `SELECT rowid AS id, time_ms, primary_message_key FROM dm_sync_outbox
               WHERE owner_login = ? AND (time_ms, primary_message_key) > (?, ?)
               ORDER BY time_ms, primary_message_key LIMIT ?`,
            ).all(owner, after?.time_ms ?? -1, after?.primary_message_key ?? '', MARK_PAGE) as MarkRow[];
    let dmUpdated = 0;
    for (let after: MarkRow | undefined; ;) {
      const rows = await this.db.write(() => {
        const read = page(after);
        const ids = JSON.stringify(read.map((r) => r.id));
        dmUpdated += this.sql(
          'UPDATE dm_sync_outbox SET synced = 0 WHERE rowid IN (SELECT value FROM json_each(?)) AND synced = 1',
        ).run(ids).changes;
        return read;
      });
      if (rows.length < MARK_PAGE) return { updated, dmUpdated };
      after = rows.at(-1);
    }
  }

  async outboxCounts(owner: string): Promise<{ synced: number; unsynced: number }> {
    // Two counts of index entries, not a read of every row: the owner's rows in the digest index, and
    // the unsynced ones in their partial index.
    const r = this.sql(
      `SELECT (SELECT COUNT(*) FROM dm_sync_outbox WHERE owner_login = ?) AS n,
              (SELECT COUNT(*) FROM dm_sync_outbox WHERE owner_login = ? AND synced = 0) AS u`,
    ).get(owner, owner) as { n: number; u: number };
    return { synced: r.n - r.u, unsynced: r.u };
  }

  async dmDigest(owner: string, ranges: readonly TimeRange[]): Promise<DigestBucket[]> {
    const fold = new DigestFold(ranges);
    if (ranges.length === 0) return fold.buckets;
    const from = ranges[0]!.fromTimeMs;
    const to = ranges.at(-1)!.toTimeMs;
    // Pages along the index, yielding between them, so a large outbox never blocks the event loop long. Each
    // page's range starts at the last time seen, so the index is entered there, not at the owner's start.
    for (let after = { timeMs: -1, key: '' }; ; await new Promise(setImmediate)) {
      const rows = this.sql(
        `SELECT time_ms, primary_message_key, copies, digest FROM dm_sync_outbox INDEXED BY dm_sync_outbox_digest
         WHERE owner_login = ? AND time_ms >= ? AND time_ms < ? AND (time_ms > ? OR primary_message_key > ?)
         ORDER BY time_ms, primary_message_key LIMIT ?`,
      ).all(owner, Math.max(from, after.timeMs), to, after.timeMs, after.key, DIGEST_PAGE_ROWS) as {
        time_ms: number;
        primary_message_key: string;
        copies: number;
        digest: Buffer;
      }[];
      for (const r of rows) fold.add(r.time_ms, r.copies, r.digest);
      if (rows.length < DIGEST_PAGE_ROWS) return fold.buckets;
      const last = rows.at(-1)!;
      after = { timeMs: last.time_ms, key: last.primary_message_key };
    }
  }

  async dmKeys(owner: string, range: TimeRange, limit: number): Promise<OutboxKeyRow[]> {
    const rows = this.sql(
      `SELECT primary_message_key, sync_id, copies FROM dm_sync_outbox INDEXED BY dm_sync_outbox_digest
       WHERE owner_login = ? AND time_ms >= ? AND time_ms < ? ORDER BY time_ms, primary_message_key LIMIT ?`,
    ).all(owner, range.fromTimeMs, range.toTimeMs, limit) as {
      primary_message_key: string;
      sync_id: string;
      copies: number;
    }[];
    return rows.map((r) => ({ primaryMessageKey: r.primary_message_key, syncId: r.sync_id, copies: r.copies }));
  }

  async dmRows(owner: string, primaryKeys: readonly string[]): Promise<DmSyncRow[]> {
    if (primaryKeys.length === 0) return [];
    // One statement for the whole DmFetch, each key a seek in the digest index (a statement a key began a
    // read of the WAL each, as GetDmDeliveryStatus's did: docs/performance.md).
    const rows = this.sql(
      `SELECT o.primary_message_key, o.sync_id, o.stored_at_ms, o.blobs FROM json_each(?) AS k
       CROSS JOIN dm_sync_outbox AS o INDEXED BY dm_sync_outbox_digest
       WHERE o.owner_login = ? AND o.time_ms = k.value ->> 0 AND o.primary_message_key = k.value ->> 1`,
    ).all(JSON.stringify(primaryKeys.map((key) => outboxRowKey(owner, key).slice(1))), owner) as OutboxDbRow[];
    const byKey = new Map(rows.map((r) => [r.primary_message_key, r]));
    const out: DmSyncRow[] = [];
    for (const key of primaryKeys) {
      const r = byKey.get(key);
      if (r) out.push(toDmSyncRow(r));
    }
    return out;
  }
}

const toDmSyncRow = (r: OutboxDbRow): DmSyncRow => ({
  syncId: r.sync_id,
  primaryMessageKey: r.primary_message_key,
  storedAtMs: r.stored_at_ms,
  blobs: unpackBlobs(new Uint8Array(r.blobs)),
});
