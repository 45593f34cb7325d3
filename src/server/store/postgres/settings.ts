/** Synced user settings on PostgreSQL (user_settings): read and write under the (owner, key) row lock. */
import { settingSyncId, settingWins } from '../rules.js';
import type { SetSettingInput, SettingRow, SettingsStore } from '../types.js';
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

  async getSettings(owner: string, keys?: readonly string[]): Promise<SettingRow[]> {
    const r = await this.db.query<{ key: string; value: Buffer; updated_at_ms: number; stored_at_ms: number }>(
      `SELECT key, value, updated_at_ms, stored_at_ms FROM user_settings
       WHERE owner_login = $1 AND ($2::text[] IS NULL OR key = ANY($2::text[])) AND length(value) > 0 ORDER BY key`,
      [owner, keys ? [...keys] : null],
    );
    return r.rows.map((row) => ({
      key: row.key,
      value: new Uint8Array(row.value),
      updatedAtMs: row.updated_at_ms,
      storedAtMs: row.stored_at_ms,
    }));
  }
}
