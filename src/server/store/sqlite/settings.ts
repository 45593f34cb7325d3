/** The settings area on SQLite: user_settings, last writer wins (docs/protocol.md §5.2). */
import { settingAnswerBytes, settingSyncId, settingWins, takeWithinBytes } from '../rules.js';
import type { SetSettingInput, SettingRow, SettingsPageQuery, SettingsStore } from '../types.js';
import { SqliteArea } from './db.js';

export class SqliteSettingsStore extends SqliteArea implements SettingsStore {
  setSetting(input: SetSettingInput): Promise<{ applied: boolean; updatedAtMs: number }> {
    return this.db.write(() => {
      const row = this.sql('SELECT value, updated_at_ms FROM user_settings WHERE owner_login = ? AND key = ?').get(
        input.owner,
        input.key,
      ) as { value: Buffer; updated_at_ms: number } | undefined;
      if (row && !settingWins(input, { updatedAtMs: row.updated_at_ms, value: row.value })) {
        return { applied: false, updatedAtMs: row.updated_at_ms };
      }
      this.sql(
        `INSERT INTO user_settings (owner_login, key, value, updated_at_ms, stored_at_ms, sync_id, synced) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (owner_login, key) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms,
           stored_at_ms = excluded.stored_at_ms, sync_id = excluded.sync_id, synced = excluded.synced`,
      ).run(
        input.owner,
        input.key,
        Buffer.from(input.value),
        input.updatedAtMs,
        input.nowMs,
        settingSyncId(input.key, input.updatedAtMs),
        input.synced ? 1 : 0,
      );
      return { applied: true, updatedAtMs: input.updatedAtMs };
    });
  }

  async settingsPage(q: SettingsPageQuery): Promise<{ items: SettingRow[]; hasMore: boolean }> {
    // BINARY collation compares the keys' UTF-8 bytes. Lengths come first, each value only once its row is taken.
    const keyed = q.keys !== undefined;
    const rows = this.sql(
      `SELECT key, length(value) AS n FROM user_settings WHERE owner_login = ? AND key > ? AND length(value) > 0
       ${keyed ? 'AND key IN (SELECT value FROM json_each(?))' : ''} ORDER BY key`,
    ).iterate(...[q.owner, q.afterKey, ...(keyed ? [JSON.stringify(q.keys)] : [])]) as Iterable<{
      key: string;
      n: number;
    }>;
    const page = takeWithinBytes(rows, Infinity, q.maxBytes, (r) => settingAnswerBytes(r.key, r.n));
    const last = page.items.at(-1);
    if (!last) return { items: [], hasMore: false };
    // The values of the rows taken, in one statement: the same range, up to the last key taken.
    const rows2 = this.sql(
      `SELECT key, value, updated_at_ms, stored_at_ms FROM user_settings
       WHERE owner_login = ? AND key > ? AND key <= ? AND length(value) > 0
       ${keyed ? 'AND key IN (SELECT value FROM json_each(?))' : ''} ORDER BY key`,
    ).all(...[q.owner, q.afterKey, last.key, ...(keyed ? [JSON.stringify(q.keys)] : [])]) as {
      key: string;
      value: Buffer;
      updated_at_ms: number;
      stored_at_ms: number;
    }[];
    // A row deleted or added in the range between the two reads is left out or comes too, as a read a moment later
    // would show it; the cursor goes on after the last key either way.
    const items: SettingRow[] = rows2.map((r) => ({
      key: r.key,
      value: new Uint8Array(r.value),
      updatedAtMs: r.updated_at_ms,
      storedAtMs: r.stored_at_ms,
    }));
    return { items, hasMore: page.hasMore };
  }
}
