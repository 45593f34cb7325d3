/** Per-device delivery on PostgreSQL (session_devices, session_deliveries). */
import type { MessageDbRow } from '../rows.js';
import { toStoredCopy } from '../rows.js';
import type { DeviceStore, StoredCopy } from '../types.js';
import type { PgDb } from './db.js';

export class PgDeviceStore implements DeviceStore {
  constructor(private readonly db: PgDb) {}

  async touchDevice(
    login: string,
    deviceId: string,
    nowMs: number,
  ): Promise<{ firstSeenAtMs: number; isNew: boolean }> {
    // One upsert: of two processes logging in one new device, exactly one inserts (xmax = 0 on an insert).
    const r = await this.db.query<{ first_seen_at_ms: number; inserted: boolean }>(
      `INSERT INTO session_devices (owner_login, device_id, first_seen_at_ms, last_seen_at_ms) VALUES ($1, $2, $3, $3)
       ON CONFLICT (owner_login, device_id) DO UPDATE SET last_seen_at_ms = excluded.last_seen_at_ms
       RETURNING first_seen_at_ms, (xmax = 0) AS inserted`,
      [login, deviceId, nowMs],
    );
    const row = r.rows[0]!;
    return { firstSeenAtMs: row.first_seen_at_ms, isNew: row.inserted };
  }

  async pendingForDevice(
    login: string,
    deviceId: string,
    after: { storedAtMs: number; messageKey: string } | null,
    limit: number,
  ): Promise<StoredCopy[]> {
    const r = await this.db.query<MessageDbRow>(
      `SELECT m.* FROM session_devices d
         JOIN signed_messages m ON m.owner_login = d.owner_login
           AND m.stored_at_ms >= GREATEST(d.first_seen_at_ms, d.replay_floor_ms, $3::bigint)
       WHERE d.owner_login = $1 AND d.device_id = $2 AND m.replay AND m.origin_device IS DISTINCT FROM d.device_id
         AND (m.stored_at_ms, m.message_key) > ($3::bigint, $4::text)
         AND NOT EXISTS (
           SELECT 1 FROM session_deliveries a
           WHERE a.owner_login = m.owner_login AND a.device_id = d.device_id AND a.message_key = m.message_key
             AND (a.revision_time_ms, a.reencrypted_at_ms) >= (m.revision_time_ms, m.reencrypted_at_ms))
       ORDER BY m.stored_at_ms, m.message_key LIMIT $5`,
      [login, deviceId, after?.storedAtMs ?? -1, after?.messageKey ?? '', limit],
    );
    return r.rows.map(toStoredCopy);
  }

  async advanceReplayFloor(login: string, deviceId: string, floorMs: number): Promise<void> {
    await this.db.query(
      `UPDATE session_devices SET replay_floor_ms = $3
       WHERE owner_login = $1 AND device_id = $2 AND replay_floor_ms < $3`,
      [login, deviceId, floorMs],
    );
  }

  async ackForDevice(login: string, deviceId: string, messageKeys: readonly string[], nowMs: number): Promise<number> {
    if (messageKeys.length === 0) return 0;
    // Each named copy's current revision, upserted only forward; the count is of the copies that exist.
    const r = await this.db.query<{ n: number }>(
      `WITH m AS (
         SELECT message_key, revision_time_ms, reencrypted_at_ms FROM signed_messages
         WHERE owner_login = $1 AND message_key = ANY($3::text[])),
       acked AS (
         INSERT INTO session_deliveries (owner_login, device_id, message_key, revision_time_ms, reencrypted_at_ms,
           acked_at_ms)
         SELECT $1, $2, message_key, revision_time_ms, reencrypted_at_ms, $4 FROM m
         ON CONFLICT (owner_login, device_id, message_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
           reencrypted_at_ms = excluded.reencrypted_at_ms, acked_at_ms = excluded.acked_at_ms
         WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
               > (session_deliveries.revision_time_ms, session_deliveries.reencrypted_at_ms))
       SELECT COUNT(*)::int AS n FROM m`,
      [login, deviceId, [...new Set(messageKeys)], nowMs],
    );
    return r.rows[0]?.n ?? 0;
  }

  forgetDevicesBefore(cutoffMs: number): Promise<number> {
    return this.db.tx(async (c) => {
      await c.query(
        `DELETE FROM session_deliveries WHERE (owner_login, device_id) IN
           (SELECT owner_login, device_id FROM session_devices WHERE last_seen_at_ms < $1)`,
        [cutoffMs],
      );
      const r = await c.query('DELETE FROM session_devices WHERE last_seen_at_ms < $1', [cutoffMs]);
      return r.rowCount ?? 0;
    });
  }
}
