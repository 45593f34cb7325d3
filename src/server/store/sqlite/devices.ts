/** The devices area on SQLite: devices seen per user and what each acknowledged (docs/protocol.md §5.3). */
import type { MessageDbRow } from '../rows.js';
import { toStoredCopy } from '../rows.js';
import type { DeviceStore, StoredCopy } from '../types.js';
import { SqliteArea } from './db.js';
import { copyRevision } from './messages.js';

export class SqliteDeviceStore extends SqliteArea implements DeviceStore {
  touchDevice(login: string, deviceId: string, nowMs: number): Promise<{ firstSeenAtMs: number; isNew: boolean }> {
    return this.db.write(() => {
      const row = this.sql('SELECT first_seen_at_ms FROM session_devices WHERE owner_login = ? AND device_id = ?').get(
        login,
        deviceId,
      ) as { first_seen_at_ms: number } | undefined;
      if (row) {
        this.sql('UPDATE session_devices SET last_seen_at_ms = ? WHERE owner_login = ? AND device_id = ?').run(
          nowMs,
          login,
          deviceId,
        );
        return { firstSeenAtMs: row.first_seen_at_ms, isNew: false };
      }
      this.sql(
        'INSERT INTO session_devices (owner_login, device_id, first_seen_at_ms, last_seen_at_ms) VALUES (?, ?, ?, ?)',
      ).run(login, deviceId, nowMs, nowMs);
      return { firstSeenAtMs: nowMs, isNew: true };
    });
  }

  async pendingForDevice(
    login: string,
    deviceId: string,
    after: { storedAtMs: number; messageKey: string } | null,
    limit: number,
  ): Promise<StoredCopy[]> {
    // The index range starts at the page's cursor or the device's replay floor: each page reads from where
    // the last one ended, and a replay from where the device was known to be up to date.
    const rows = this.sql(
      `SELECT m.* FROM session_devices d
         JOIN signed_messages m ON m.owner_login = d.owner_login
           AND m.stored_at_ms >= MAX(d.first_seen_at_ms, d.replay_floor_ms, ?)
       WHERE d.owner_login = ? AND d.device_id = ? AND m.replay = 1 AND m.origin_device IS NOT d.device_id
         AND (m.stored_at_ms, m.message_key) > (?, ?)
         AND NOT EXISTS (
           SELECT 1 FROM session_deliveries a
           WHERE a.owner_login = m.owner_login AND a.device_id = d.device_id AND a.message_key = m.message_key
             AND (a.revision_time_ms, a.reencrypted_at_ms) >= (m.revision_time_ms, m.reencrypted_at_ms))
       ORDER BY m.stored_at_ms, m.message_key LIMIT ?`,
    ).all(
      after?.storedAtMs ?? -1,
      login,
      deviceId,
      after?.storedAtMs ?? -1,
      after?.messageKey ?? '',
      limit,
    ) as MessageDbRow[];
    return rows.map(toStoredCopy);
  }

  advanceReplayFloor(login: string, deviceId: string, floorMs: number): Promise<void> {
    return this.db.write(() => {
      this.sql(
        'UPDATE session_devices SET replay_floor_ms = ? WHERE owner_login = ? AND device_id = ? AND replay_floor_ms < ?',
      ).run(floorMs, login, deviceId, floorMs);
    });
  }

  ackForDevice(login: string, deviceId: string, messageKeys: readonly string[], nowMs: number): Promise<number> {
    return this.db.write(() => {
      let acked = 0;
      for (const key of new Set(messageKeys)) {
        const rev = copyRevision(this.db, login, key);
        if (!rev) continue;
        // The acknowledgement only moves forward: an older revision never replaces a newer one.
        this.sql(
          `INSERT INTO session_deliveries (owner_login, device_id, message_key, revision_time_ms, reencrypted_at_ms, acked_at_ms)
           VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (owner_login, device_id, message_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
             reencrypted_at_ms = excluded.reencrypted_at_ms, acked_at_ms = excluded.acked_at_ms
           WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
                 > (session_deliveries.revision_time_ms, session_deliveries.reencrypted_at_ms)`,
        ).run(login, deviceId, key, rev.revisionTimeMs, rev.reencryptedAtMs, nowMs);
        acked++;
      }
      return acked;
    });
  }

  forgetDevicesBefore(cutoffMs: number): Promise<number> {
    return this.db.write(() => {
      this.sql(
        `DELETE FROM session_deliveries WHERE (owner_login, device_id) IN
           (SELECT owner_login, device_id FROM session_devices WHERE last_seen_at_ms < ?)`,
      ).run(cutoffMs);
      return this.sql('DELETE FROM session_devices WHERE last_seen_at_ms < ?').run(cutoffMs).changes;
    });
  }
}
