/** The nonces area on SQLite: ServerAuth nonces seen recently (s2s_nonces). */
import type { NonceStore } from '../types.js';
import { SqliteArea } from './db.js';

export class SqliteNonceStore extends SqliteArea implements NonceStore {
  rememberS2sNonce(serverLogin: string, nonceB64: string, nowMs: number, sinceMs: number): Promise<boolean> {
    return this.db.write(() => {
      this.sql('DELETE FROM s2s_nonces WHERE seen_at_ms < ?').run(sinceMs);
      return (
        this.sql(
          'INSERT INTO s2s_nonces (server_login, nonce, seen_at_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING',
        ).run(serverLogin, nonceB64, nowMs).changes === 1
      );
    });
  }
}
