/** The meta area on SQLite: small per-server values in server_meta. */
import type { MetaStore } from '../types.js';
import type { SqliteDb } from './db.js';
import { SqliteArea } from './db.js';

/** The value of key in server_meta, or null; also read by the push area for its VAPID keys. */
export function readMeta(db: SqliteDb, key: string): string | null {
  const row = db.sql('SELECT value FROM server_meta WHERE key = ?').get(key) as { value: string } | undefined;
  return row?.value ?? null;
}

export class SqliteMetaStore extends SqliteArea implements MetaStore {
  async getMeta(key: string): Promise<string | null> {
    return readMeta(this.db, key);
  }

  setMeta(key: string, value: string): Promise<void> {
    return this.db.write(() => {
      this.sql(
        'INSERT INTO server_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
      ).run(key, value);
    });
  }
}
