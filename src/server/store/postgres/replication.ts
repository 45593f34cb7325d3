/** The outboxes on PostgreSQL (dm_sync_outbox, user_settings): acks are conditional on the current syncId. */
import type pg from 'pg';
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
import type { PgDb } from './db.js';

export class PgReplicationStore implements ReplicationStore {
  constructor(private readonly db: PgDb) {}

  dmSyncPage(q: SyncPageQuery): Promise<SyncPage<DmSyncRow>> {
    const acks = q.ackSyncIds.flatMap((syncId) => {
      const parsed = parseSyncId(syncId);
      return parsed ? [{ key: parsed.primaryMessageKey, syncId }] : [];
    });
    return this.db.tx(async (c) => {
      // A row that moved on to a newer revision keeps synced = false: only its current syncId acks it.
      if (acks.length > 0) await c.query(ackQuery('dm_sync_outbox', 'primary_message_key', q.owner, acks));
      const r = await c.query<OutboxDbRow>(
        `SELECT primary_message_key, sync_id, stored_at_ms, blobs FROM dm_sync_outbox
         WHERE owner_login = $1 AND synced = false AND (stored_at_ms, primary_message_key) > ($2::bigint, $3::text)
         ORDER BY stored_at_ms, primary_message_key LIMIT $4`,
        [q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1],
      );
      const page = takeWithinBytes(r.rows, q.limit, q.maxBytes, (row) =>
        unpackBlobs(row.blobs).reduce((n, b) => n + b.length, 0),
      );
      return { items: page.items.map(toDmSyncRow), hasMore: page.hasMore };
    });
  }

  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>> {
    const acks = q.ackSyncIds.flatMap((syncId) => {
      const key = settingKeyOfSyncId(syncId);
      return key === null ? [] : [{ key, syncId }];
    });
    return this.db.tx(async (c) => {
      if (acks.length > 0) await c.query(ackQuery('user_settings', 'key', q.owner, acks));
      const r = await c.query<{
        key: string;
        value: Buffer;
        updated_at_ms: number;
        stored_at_ms: number;
        sync_id: string;
      }>(
        `SELECT key, value, updated_at_ms, stored_at_ms, sync_id FROM user_settings
         WHERE owner_login = $1 AND synced = false AND (stored_at_ms, key) > ($2::bigint, $3::text)
         ORDER BY stored_at_ms, key LIMIT $4`,
        [q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1],
      );
      const page = takeWithinBytes(r.rows, q.limit, q.maxBytes, (row) => settingRowBytes(row.key, row.value));
      return {
        items: page.items.map((row) => ({
          key: row.key,
          value: new Uint8Array(row.value),
          updatedAtMs: row.updated_at_ms,
          storedAtMs: row.stored_at_ms,
          syncId: row.sync_id,
        })),
        hasMore: page.hasMore,
      };
    });
  }

  markUnsynced(owner: string | null): Promise<{ updated: number; dmUpdated: number }> {
    return this.db.tx(async (c) => {
      const s = await c.query(
        'UPDATE user_settings SET synced = false WHERE synced AND ($1::text IS NULL OR owner_login = $1)',
        [owner],
      );
      const d = await c.query(
        'UPDATE dm_sync_outbox SET synced = false WHERE synced AND ($1::text IS NULL OR owner_login = $1)',
        [owner],
      );
      return { updated: s.rowCount ?? 0, dmUpdated: d.rowCount ?? 0 };
    });
  }

  async outboxCounts(owner: string): Promise<{ synced: number; unsynced: number }> {
    const r = await this.db.query<{ s: number; u: number }>(
      `SELECT COUNT(*) FILTER (WHERE synced) AS s, COUNT(*) FILTER (WHERE NOT synced) AS u
       FROM dm_sync_outbox WHERE owner_login = $1`,
      [owner],
    );
    return { synced: r.rows[0]?.s ?? 0, unsynced: r.rows[0]?.u ?? 0 };
  }

  async dmDigest(owner: string, ranges: readonly TimeRange[]): Promise<DigestBucket[]> {
    const fold = new DigestFold(ranges);
    if (ranges.length === 0) return fold.buckets;
    const from = ranges[0]!.fromTimeMs;
    const to = ranges.at(-1)!.toTimeMs;
    for (let after = { timeMs: -1, key: '' }; ;) {
      const { rows } = await this.db.query<{
        time_ms: number;
        primary_message_key: string;
        copies: number;
        digest: Buffer;
      }>(
        `SELECT time_ms, primary_message_key, copies, digest FROM dm_sync_outbox
         WHERE owner_login = $1 AND time_ms >= $2 AND time_ms < $3 AND (time_ms > $4 OR primary_message_key > $5::text)
         ORDER BY time_ms, primary_message_key LIMIT $6`,
        [owner, Math.max(from, after.timeMs), to, after.timeMs, after.key, DIGEST_PAGE_ROWS],
      );
      for (const r of rows) fold.add(r.time_ms, r.copies, r.digest);
      if (rows.length < DIGEST_PAGE_ROWS) return fold.buckets;
      const last = rows.at(-1)!;
      after = { timeMs: last.time_ms, key: last.primary_message_key };
    }
  }

  async dmKeys(owner: string, range: TimeRange, limit: number): Promise<OutboxKeyRow[]> {
    const { rows } = await this.db.query<{ primary_message_key: string; sync_id: string; copies: number }>(
      `SELECT primary_message_key, sync_id, copies FROM dm_sync_outbox
       WHERE owner_login = $1 AND time_ms >= $2 AND time_ms < $3 ORDER BY time_ms, primary_message_key LIMIT $4`,
      [owner, range.fromTimeMs, range.toTimeMs, limit],
    );
    return rows.map((r) => ({ primaryMessageKey: r.primary_message_key, syncId: r.sync_id, copies: r.copies }));
  }

  async dmRows(owner: string, primaryKeys: readonly string[]): Promise<DmSyncRow[]> {
    if (primaryKeys.length === 0) return [];
    const { rows } = await this.db.query<OutboxDbRow>(
      `SELECT primary_message_key, sync_id, stored_at_ms, blobs FROM dm_sync_outbox
       WHERE owner_login = $1 AND primary_message_key = ANY($2::text[])`,
      [owner, [...primaryKeys]],
    );
    return rows.map(toDmSyncRow);
  }
}

interface OutboxDbRow {
  primary_message_key: string;
  sync_id: string;
  stored_at_ms: number;
  blobs: Buffer;
}

const toDmSyncRow = (r: OutboxDbRow): DmSyncRow => ({
  syncId: r.sync_id,
  primaryMessageKey: r.primary_message_key,
  storedAtMs: r.stored_at_ms,
  blobs: unpackBlobs(new Uint8Array(r.blobs)),
});

/**
 * Marks an owner's acked rows synced: those whose key and current syncId were acked. A row's syncId begins
 * with its own key (syncIdOf, settingSyncId), so a row whose key is in the acked keys and whose syncId is in
 * the acked syncIds was acked as that pair. The statement stays unnamed, so each call is planned with its
 * lists as constants: the keys sought in the primary key (or the owner's rows read, where they are few),
 * the syncIds checked by hash. A join with unnest() of the pairs let the planner hash every row of the
 * owner instead, 45–130 ms a page at 20 000 rows (docs/performance.md, twenty-second session).
 */
export function ackQuery(
  table: 'dm_sync_outbox' | 'user_settings',
  keyColumn: 'primary_message_key' | 'key',
  owner: string,
  acks: readonly { key: string; syncId: string }[],
): pg.QueryConfig {
  return {
    text: `UPDATE ${table} SET synced = true
      WHERE owner_login = $1 AND ${keyColumn} = ANY($2::text[]) AND sync_id = ANY($3::text[])`,
    values: [owner, acks.map((a) => a.key), acks.map((a) => a.syncId)],
  };
}
