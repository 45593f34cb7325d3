/** The directory area on SQLite: users, their current access servers, server descriptors. */
import type { ServerDescriptor, UserProfile } from '../../../protocol/identity.js';
import type { DirectoryStore, ProfileSource, ServerRecord, UserRecord } from '../types.js';
import { SqliteArea } from './db.js';

/** A condition on a row's recipient_login: the recipient's current access servers include the bound server. */
export const RECIPIENT_USES_SERVER =
  'recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = ?)';

export class SqliteDirectoryStore extends SqliteArea implements DirectoryStore {
  async getUser(login: string): Promise<UserRecord | null> {
    const row = this.sql('SELECT profile_json, source, fetched_at_ms FROM users WHERE login = ?').get(login) as
      { profile_json: string; source: ProfileSource; fetched_at_ms: number } | undefined;
    if (!row) return null;
    return { profile: JSON.parse(row.profile_json) as UserProfile, source: row.source, fetchedAtMs: row.fetched_at_ms };
  }

  putUser(profile: UserProfile, source: ProfileSource, nowMs: number): Promise<void> {
    return this.db.write(() => {
      this.sql(
        `INSERT INTO users (login, sign_key, enc_key, version, updated_at_ms, profile_json, source, fetched_at_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (login) DO UPDATE SET sign_key = excluded.sign_key, enc_key = excluded.enc_key,
           version = excluded.version, updated_at_ms = excluded.updated_at_ms, profile_json = excluded.profile_json,
           source = excluded.source, fetched_at_ms = excluded.fetched_at_ms`,
      ).run(
        profile.login,
        profile.signKeyB64,
        profile.encKeyB64,
        profile.version,
        profile.updatedAtMs,
        JSON.stringify(profile),
        source,
        nowMs,
      );
      this.sql('DELETE FROM user_access_servers_current WHERE login = ?').run(profile.login);
      profile.accessServers.forEach((server, i) => {
        this.sql('INSERT INTO user_access_servers_current (login, position, server_login) VALUES (?, ?, ?)').run(
          profile.login,
          i,
          server,
        );
      });
    });
  }

  async getServer(serverLogin: string): Promise<ServerRecord | null> {
    const row = this.sql('SELECT descriptor_json, source FROM servers WHERE server_login = ?').get(serverLogin) as
      ServerDbRow | undefined;
    return row ? toServerRecord(row) : null;
  }

  putServer(d: ServerDescriptor, source: ServerRecord['source']): Promise<void> {
    return this.db.write(() => {
      this.sql(
        `INSERT INTO servers (server_login, ws_url, sign_key, descriptor_json, source) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (server_login) DO UPDATE SET ws_url = excluded.ws_url, sign_key = excluded.sign_key,
           descriptor_json = excluded.descriptor_json, source = excluded.source`,
      ).run(d.serverLogin, d.wsUrl, d.signKeyB64, JSON.stringify(d), source);
    });
  }

  async listServers(): Promise<ServerRecord[]> {
    const rows = this.sql('SELECT descriptor_json, source FROM servers ORDER BY server_login').all() as ServerDbRow[];
    return rows.map(toServerRecord);
  }

  async peerServersOf(serverLogin: string): Promise<string[]> {
    const rows = this.sql(
      `SELECT DISTINCT b.server_login FROM user_access_servers_current a JOIN user_access_servers_current b ON b.login = a.login
       WHERE a.server_login = ? AND b.server_login <> a.server_login ORDER BY b.server_login`,
    ).all(serverLogin) as { server_login: string }[];
    return rows.map((r) => r.server_login);
  }

  async sharedUsers(serverA: string, serverB: string): Promise<string[]> {
    const rows = this.sql(
      `SELECT a.login FROM user_access_servers_current a JOIN user_access_servers_current b ON b.login = a.login
       WHERE a.server_login = ? AND b.server_login = ? ORDER BY a.login`,
    ).all(serverA, serverB) as { login: string }[];
    return rows.map((r) => r.login);
  }
}

interface ServerDbRow {
  descriptor_json: string;
  source: ServerRecord['source'];
}

const toServerRecord = (r: ServerDbRow): ServerRecord => ({
  descriptor: JSON.parse(r.descriptor_json) as ServerDescriptor,
  source: r.source,
});
