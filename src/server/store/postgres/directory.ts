/** The directory area on PostgreSQL (users, user_access_servers_current, servers). */
import type { ServerDescriptor, UserProfile } from '../../../protocol/identity.js';
import type { DirectoryStore, ProfileSource, ServerRecord, UserRecord } from '../types.js';
import type { PgDb } from './db.js';

export class PgDirectoryStore implements DirectoryStore {
  constructor(private readonly db: PgDb) {}

  async getUser(login: string): Promise<UserRecord | null> {
    const r = await this.db.query<{ profile_json: string; source: ProfileSource; fetched_at_ms: number }>(
      'SELECT profile_json, source, fetched_at_ms FROM users WHERE login = $1',
      [login],
    );
    const row = r.rows[0];
    if (!row) return null;
    return { profile: JSON.parse(row.profile_json) as UserProfile, source: row.source, fetchedAtMs: row.fetched_at_ms };
  }

  putUser(profile: UserProfile, source: ProfileSource, nowMs: number): Promise<void> {
    return this.db.tx(async (c) => {
      // The upsert locks the user row, so two writers of one user replace its access servers in turn.
      await c.query(
        `INSERT INTO users (login, sign_key, enc_key, version, updated_at_ms, profile_json, source, fetched_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (login) DO UPDATE SET sign_key = excluded.sign_key, enc_key = excluded.enc_key,
           version = excluded.version, updated_at_ms = excluded.updated_at_ms, profile_json = excluded.profile_json,
           source = excluded.source, fetched_at_ms = excluded.fetched_at_ms`,
        [
          profile.login,
          profile.signKeyB64,
          profile.encKeyB64,
          profile.version,
          profile.updatedAtMs,
          JSON.stringify(profile),
          source,
          nowMs,
        ],
      );
      await c.query('DELETE FROM user_access_servers_current WHERE login = $1', [profile.login]);
      await c.query(
        `INSERT INTO user_access_servers_current (login, position, server_login)
         SELECT $1, s.position - 1, s.server FROM unnest($2::text[]) WITH ORDINALITY AS s(server, position)`,
        [profile.login, profile.accessServers],
      );
    });
  }

  async getServer(serverLogin: string): Promise<ServerRecord | null> {
    const r = await this.db.query<{ descriptor_json: string; source: ServerRecord['source'] }>(
      'SELECT descriptor_json, source FROM servers WHERE server_login = $1',
      [serverLogin],
    );
    const row = r.rows[0];
    return row ? { descriptor: JSON.parse(row.descriptor_json) as ServerDescriptor, source: row.source } : null;
  }

  async putServer(d: ServerDescriptor, source: ServerRecord['source']): Promise<void> {
    await this.db.query(
      `INSERT INTO servers (server_login, ws_url, sign_key, descriptor_json, source) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (server_login) DO UPDATE SET ws_url = excluded.ws_url, sign_key = excluded.sign_key,
         descriptor_json = excluded.descriptor_json, source = excluded.source`,
      [d.serverLogin, d.wsUrl, d.signKeyB64, JSON.stringify(d), source],
    );
  }

  async listServers(): Promise<ServerRecord[]> {
    const r = await this.db.query<{ descriptor_json: string; source: ServerRecord['source'] }>(
      'SELECT descriptor_json, source FROM servers ORDER BY server_login',
    );
    return r.rows.map((row) => ({
      descriptor: JSON.parse(row.descriptor_json) as ServerDescriptor,
      source: row.source,
    }));
  }

  async peerServersOf(serverLogin: string): Promise<string[]> {
    const r = await this.db.query<{ server_login: string }>(
      `SELECT DISTINCT b.server_login FROM user_access_servers_current a
         JOIN user_access_servers_current b ON b.login = a.login
       WHERE a.server_login = $1 AND b.server_login <> a.server_login ORDER BY b.server_login`,
      [serverLogin],
    );
    return r.rows.map((row) => row.server_login);
  }

  async sharedUsers(serverA: string, serverB: string): Promise<string[]> {
    const r = await this.db.query<{ login: string }>(
      `SELECT a.login FROM user_access_servers_current a JOIN user_access_servers_current b ON b.login = a.login
       WHERE a.server_login = $1 AND b.server_login = $2 ORDER BY a.login`,
      [serverA, serverB],
    );
    return r.rows.map((row) => row.login);
  }
}
