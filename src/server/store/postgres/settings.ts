/** Synced user settings on PostgreSQL (user_settings): read and write under the (owner, key) row lock. */
import { settingAnswerBytes, settingSyncId, settingWins, takeWithinBytes } from '../rules.js';
import type { SetSettingInput, SettingRow, SettingsPageQuery, SettingsStore } from '../types.js';
import type { PgDb } from './db.js';

export class PgSettingsStore implements SettingsStore {
  constructor(private readonly db: PgDb) {}

  setSetting(input: SetSettingInput): Promise<{ applied: boolean; updatedAtMs: number }> {
    return this.db.tx(async (c) => {
      for (;;) {
        const r = await c.query<{ value: Buffer; updated_at_ms: number }>(
          'SELECT value, updated_at_ms FROM user_settings WHERE owner_login = $1 AND key = $2 FOR UPDATE',
          [input.owner, input.key],
        );
        const row = r.rows[0];
        if (row && !settingWins(input, { updatedAtMs: row.updated_at_ms, value: row.value })) {
          return { applied: false, updatedAtMs: row.updated_at_ms };
        }
        const values = [
          input.owner,
          input.key,
          Buffer.from(input.value),
          input.updatedAtMs,
          input.nowMs,
          settingSyncId(input.key, input.updatedAtMs),
          input.synced,
        ];
        if (row) {
          await c.query(
            `UPDATE user_settings SET value = $3, updated_at_ms = $4, stored_at_ms = $5, sync_id = $6, synced = $7
             WHERE owner_login = $1 AND key = $2`,
            values,
          );
          return { applied: true, updatedAtMs: input.updatedAtMs };
        }
        // No row to lock yet: the insert decides; if another process inserted first, read and decide again.
        const ins = await c.query(
          `INSERT INTO user_settings (owner_login, key, value, updated_at_ms, stored_at_ms, sync_id, synced)
           VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
          values,
        );
        if (ins.rowCount === 1) return { applied: true, updatedAtMs: input.updatedAtMs };
      }
    });
  }

  async settingsPage(q: SettingsPageQuery): Promise<{ items: SettingRow[]; hasMore: boolean }> {
    // The "C" collation compares the keys' UTF-8 bytes. Keys and lengths first (octet_length reads no toasted value),
    // as many as one answer could hold (every setting counts at least 67 bytes, and the first always comes) and one
    // more, to tell hasMore.
    const most = Number.isFinite(q.maxBytes)
      ? Math.max(1, Math.floor(q.maxBytes / settingAnswerBytes('', 1))) + 1
      : null;
    const sizes = await this.db.query<{ key: string; n: number }>(
      `SELECT key, octet_length(value) AS n FROM user_settings
       WHERE owner_login = $1 AND key COLLATE "C" > $2 AND octet_length(value) > 0
         AND ($3::text[] IS NULL OR key = ANY($3::text[]))
       ORDER BY key COLLATE "C" LIMIT $4`,
      [q.owner, q.afterKey, q.keys ? [...q.keys] : null, most],
    );
    const page = takeWithinBytes(sizes.rows, Infinity, q.maxBytes, (r) => settingAnswerBytes(r.key, r.n));
    if (page.items.length === 0) return { items: [], hasMore: false };
    const r = await this.db.query<{ key: string; value: Buffer; updated_at_ms: number; stored_at_ms: number }>(
      `SELECT key, value, updated_at_ms, stored_at_ms FROM user_settings WHERE owner_login = $1 AND key = ANY($2::text[])`,
      [q.owner, page.items.map((i) => i.key)],
    );
    const byKey = new Map(r.rows.map((row) => [row.key, row]));
    const items: SettingRow[] = [];
    for (const { key } of page.items) {
      const row = byKey.get(key);
      // Deleted or emptied between the two reads: left out, as a read a moment later would.
      if (row && row.value.length > 0)
        items.push({
          key,
          value: new Uint8Array(row.value),
          updatedAtMs: row.updated_at_ms,
          storedAtMs: row.stored_at_ms,
        });
    }
    return { items, hasMore: page.hasMore };
  }
}
