/** The outboxes on PostgreSQL (dm_sync_outbox, user_settings): acks are conditional on the current syncId. */
import { parseSyncId } from '../../../protocol/container.js';
import { unpackBlobs } from '../blobs.js';
import { settingKeyOfSyncId, takeWithinBytes } from '../rules.js';
import type { DmSyncRow, ReplicationStore, SettingRow, SyncPage, SyncPageQuery } from '../types.js';
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
      if (acks.length > 0) {
        await c.query(
          `UPDATE dm_sync_outbox o SET synced = true FROM unnest($2::text[], $3::text[]) AS a(key, sync_id)
           WHERE o.owner_login = $1 AND o.primary_message_key = a.key AND o.sync_id = a.sync_id`,
          [q.owner, acks.map((a) => a.key), acks.map((a) => a.syncId)],
        );
      }
      const r = await c.query<{ primary_message_key: string; sync_id: string; stored_at_ms: number; blobs: Buffer }>(
        `SELECT primary_message_key, sync_id, stored_at_ms, blobs FROM dm_sync_outbox
         WHERE owner_login = $1 AND synced = false AND (stored_at_ms, primary_message_key) > ($2::bigint, $3::text)
         ORDER BY stored_at_ms, primary_message_key LIMIT $4`,
        [q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1],
      );
      const page = takeWithinBytes(r.rows, q.limit, q.maxBytes, (row) =>
        unpackBlobs(row.blobs).reduce((n, b) => n + b.length, 0),
      );
      return {
        items: page.items.map((row) => ({
          syncId: row.sync_id,
          primaryMessageKey: row.primary_message_key,
          storedAtMs: row.stored_at_ms,
          blobs: unpackBlobs(new Uint8Array(row.blobs)),
        })),
        hasMore: page.hasMore,
      };
    });
  }

  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>> {
    const acks = q.ackSyncIds.flatMap((syncId) => {
      const key = settingKeyOfSyncId(syncId);
      return key === null ? [] : [{ key, syncId }];
    });
    return this.db.tx(async (c) => {
      if (acks.length > 0) {
        await c.query(
          `UPDATE user_settings s SET synced = true FROM unnest($2::text[], $3::text[]) AS a(key, sync_id)
           WHERE s.owner_login = $1 AND s.key = a.key AND s.sync_id = a.sync_id`,
          [q.owner, acks.map((a) => a.key), acks.map((a) => a.syncId)],
        );
      }
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
      const page = takeWithinBytes(r.rows, q.limit, q.maxBytes, (row) => row.value.length + row.key.length);
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
}
