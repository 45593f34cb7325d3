/** The push area's tables on SQLite (push_subscriptions; VAPID keys in server_meta). */
import type { PushStore, PushSubscriptionRow, UpsertSubscription } from '../../push/store.js';
import type { PushDbRow } from '../rows.js';
import { PUSH_COLUMNS, toPushSubscription } from '../rows.js';
import { SqliteArea } from './db.js';
import { readMeta } from './meta.js';

export class SqlitePushStore extends SqliteArea implements PushStore {
  upsertSubscription(input: UpsertSubscription): Promise<{ dropped: number }> {
    return this.db.write(() => {
      // upsert_seq orders an owner's upserts exactly, even several within one millisecond; only the owner's
      // own subscriptions are compared by it, so the next one is read through the owner's index, not the
      // whole table's.
      const seq = (
        this.sql('SELECT COALESCE(MAX(upsert_seq), 0) + 1 AS seq FROM push_subscriptions WHERE owner_login = ?').get(
          input.ownerLogin,
        ) as { seq: number }
      ).seq;
      // A re-subscription starts with a clean failure count: the browser says the endpoint is live.
      this.sql(
        `INSERT INTO push_subscriptions (endpoint, owner_login, device_id, p256dh, auth, created_at_ms, updated_at_ms,
           upsert_seq, consecutive_failures)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)
         ON CONFLICT (endpoint) DO UPDATE SET owner_login = excluded.owner_login, device_id = excluded.device_id,
           p256dh = excluded.p256dh, auth = excluded.auth, updated_at_ms = excluded.updated_at_ms,
           upsert_seq = excluded.upsert_seq, consecutive_failures = 0`,
      ).run(input.endpoint, input.ownerLogin, input.deviceId, input.p256dh, input.auth, input.nowMs, input.nowMs, seq);
      return {
        dropped: this.sql(
          `DELETE FROM push_subscriptions WHERE owner_login = ? AND endpoint NOT IN
             (SELECT endpoint FROM push_subscriptions WHERE owner_login = ? ORDER BY upsert_seq DESC LIMIT ?)`,
        ).run(input.ownerLogin, input.ownerLogin, input.maxPerOwner).changes,
      };
    });
  }

  deleteSubscription(endpoint: string, owner: string | null): Promise<number> {
    return this.db.write(
      () =>
        this.sql('DELETE FROM push_subscriptions WHERE endpoint = ? AND (? IS NULL OR owner_login = ?)').run(
          endpoint,
          owner,
          owner,
        ).changes,
    );
  }

  async getSubscription(endpoint: string): Promise<PushSubscriptionRow | null> {
    const row = this.sql(`SELECT ${PUSH_COLUMNS} FROM push_subscriptions WHERE endpoint = ?`).get(endpoint) as
      PushDbRow | undefined;
    return row ? toPushSubscription(row) : null;
  }

  async subscriptionsOf(owner: string): Promise<PushSubscriptionRow[]> {
    const rows = this.sql(
      `SELECT ${PUSH_COLUMNS} FROM push_subscriptions WHERE owner_login = ? ORDER BY upsert_seq, endpoint`,
    ).all(owner) as PushDbRow[];
    return rows.map(toPushSubscription);
  }

  recordPushResult(endpoint: string, nowMs: number, error: string | null): Promise<void> {
    return this.db.write(() => {
      if (error === null)
        this.sql(
          'UPDATE push_subscriptions SET last_success_at_ms = ?, consecutive_failures = 0 WHERE endpoint = ?',
        ).run(nowMs, endpoint);
      else
        this.sql(
          `UPDATE push_subscriptions SET last_error_at_ms = ?, last_error = ?,
             consecutive_failures = consecutive_failures + 1 WHERE endpoint = ?`,
        ).run(nowMs, error, endpoint);
    });
  }

  async keepMeta(key: string, value: string): Promise<string> {
    await this.db.write(() =>
      this.sql('INSERT INTO server_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING').run(key, value),
    );
    // The row exists now: inserted above, or kept from an earlier call.
    return readMeta(this.db, key) ?? value;
  }
}
