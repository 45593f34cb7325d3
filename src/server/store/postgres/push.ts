/** The push area's tables on PostgreSQL (push_subscriptions; VAPID keys in server_meta). */
import type { PushStore, PushSubscriptionRow, UpsertSubscription } from '../../push/store.js';
import type { PushDbRow } from '../rows.js';
import { PUSH_COLUMNS, toPushSubscription } from '../rows.js';
import type { PgDb } from './db.js';
import { lockKey, prepared } from './db.js';
import { PerTurn } from './per-turn.js';

export class PgPushStore implements PushStore {
  /** Every stored message asks for its owner's subscriptions: the owners asked for in one turn are read at once. */
  private readonly subscriptions = new PerTurn<string, PushSubscriptionRow[]>((owners) =>
    this.readSubscriptions(owners),
  );

  constructor(private readonly db: PgDb) {}

  upsertSubscription(input: UpsertSubscription): Promise<{ dropped: number }> {
    // The owner's lock keeps two processes from each trimming the list past the other's upsert.
    const lock = `SELECT pg_advisory_xact_lock(${lockKey(`shine:push:${input.ownerLogin}`)});`;
    return this.db.tx(async (c) => {
      // upsert_seq (a sequence) orders upserts exactly, even several within one millisecond.
      // A re-subscription starts with a clean failure count: the browser says the endpoint is live.
      await c.query(
        `INSERT INTO push_subscriptions (endpoint, owner_login, device_id, p256dh, auth, created_at_ms, updated_at_ms,
           upsert_seq, consecutive_failures)
         VALUES ($1, $2, $3, $4, $5, $6, $6, nextval('push_upsert_seq'), 0)
         ON CONFLICT (endpoint) DO UPDATE SET owner_login = excluded.owner_login, device_id = excluded.device_id,
           p256dh = excluded.p256dh, auth = excluded.auth, updated_at_ms = excluded.updated_at_ms,
           upsert_seq = excluded.upsert_seq, consecutive_failures = 0`,
        [input.endpoint, input.ownerLogin, input.deviceId, input.p256dh, input.auth, input.nowMs],
      );
      const r = await c.query(
        `DELETE FROM push_subscriptions WHERE owner_login = $1 AND endpoint NOT IN
           (SELECT endpoint FROM push_subscriptions WHERE owner_login = $1 ORDER BY upsert_seq DESC LIMIT $2)`,
        [input.ownerLogin, input.maxPerOwner],
      );
      return { dropped: r.rowCount ?? 0 };
    }, lock);
  }

  async deleteSubscription(endpoint: string, owner: string | null): Promise<number> {
    const r = await this.db.query(
      'DELETE FROM push_subscriptions WHERE endpoint = $1 AND ($2::text IS NULL OR owner_login = $2)',
      [endpoint, owner],
    );
    return r.rowCount ?? 0;
  }

  async getSubscription(endpoint: string): Promise<PushSubscriptionRow | null> {
    const r = await this.db.query<PushDbRow>(`SELECT ${PUSH_COLUMNS} FROM push_subscriptions WHERE endpoint = $1`, [
      endpoint,
    ]);
    const row = r.rows[0];
    return row ? toPushSubscription(row) : null;
  }

  subscriptionsOf(owner: string): Promise<PushSubscriptionRow[]> {
    return this.subscriptions.call(owner);
  }

  /** The subscriptions of each owner (one may be asked for more than once), in one statement. */
  private async readSubscriptions(owners: string[]): Promise<PushSubscriptionRow[][]> {
    const r = await this.db.query<PushDbRow>(
      prepared(
        `SELECT ${PUSH_COLUMNS} FROM push_subscriptions WHERE owner_login = ANY($1::text[])
         ORDER BY owner_login, upsert_seq, endpoint`,
        [[...new Set(owners)]],
      ),
    );
    const byOwner = new Map<string, PushSubscriptionRow[]>();
    for (const row of r.rows) {
      const sub = toPushSubscription(row);
      const list = byOwner.get(sub.ownerLogin);
      if (list) list.push(sub);
      else byOwner.set(sub.ownerLogin, [sub]);
    }
    return owners.map((owner) => [...(byOwner.get(owner) ?? [])]);
  }

  async recordPushResult(endpoint: string, nowMs: number, error: string | null): Promise<void> {
    if (error === null) {
      await this.db.query(
        'UPDATE push_subscriptions SET last_success_at_ms = $1, consecutive_failures = 0 WHERE endpoint = $2',
        [nowMs, endpoint],
      );
    } else {
      await this.db.query(
        `UPDATE push_subscriptions SET last_error_at_ms = $1, last_error = $2,
           consecutive_failures = consecutive_failures + 1 WHERE endpoint = $3`,
        [nowMs, error, endpoint],
      );
    }
  }

  async keepMeta(key: string, value: string): Promise<string> {
    // The insert-or-nothing and the read in one statement. When another process's insert of the key
    // commits while this one waits on it, this statement's snapshot misses that row: read it again.
    const r = await this.db.query<{ value: string }>(
      `WITH ins AS (INSERT INTO server_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING value)
       SELECT value FROM ins UNION ALL SELECT value FROM server_meta WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM ins)`,
      [key, value],
    );
    if (r.rows[0]) return r.rows[0].value;
    const again = await this.db.query<{ value: string }>('SELECT value FROM server_meta WHERE key = $1', [key]);
    return again.rows[0]!.value;
  }
}
