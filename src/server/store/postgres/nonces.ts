/** ServerAuth nonces on PostgreSQL (s2s_nonces): the primary key is the check. */
import type { NonceStore } from '../types.js';
import type { PgDb } from './db.js';

export class PgNonceStore implements NonceStore {
  constructor(private readonly db: PgDb) {}

  rememberS2sNonce(serverLogin: string, nonceB64: string, nowMs: number, sinceMs: number): Promise<boolean> {
    return this.db.tx(async (c) => {
      await c.query('DELETE FROM s2s_nonces WHERE seen_at_ms < $1', [sinceMs]);
      const r = await c.query(
        'INSERT INTO s2s_nonces (server_login, nonce, seen_at_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
        [serverLogin, nonceB64, nowMs],
      );
      return r.rowCount === 1;
    });
  }
}
