/** The meta area on PostgreSQL (server_meta). */
import type { MetaStore } from '../types.js';
import type { PgDb } from './db.js';

export class PgMetaStore implements MetaStore {
  constructor(private readonly db: PgDb) {}

  async getMeta(key: string): Promise<string | null> {
    const r = await this.db.query<{ value: string }>('SELECT value FROM server_meta WHERE key = $1', [key]);
    return r.rows[0]?.value ?? null;
  }

  async setMeta(key: string, value: string): Promise<void> {
    await this.db.query(
      'INSERT INTO server_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
      [key, value],
    );
  }
}
