/**
 * Versioned PostgreSQL migrations, numbered as SQLITE_MIGRATIONS: the same tables, primary keys and partial
 * indexes in PostgreSQL types (BIGINT milliseconds, BYTEA, BOOLEAN flags). Text columns use the "C"
 * collation so that ORDER BY and key comparisons follow byte order, as in SQLite. schema_migrations
 * records the versions applied; migrate() runs the missing ones under an advisory lock.
 */
import type pg from 'pg';
import { ShineError } from '../../../protocol/errors.js';
import { unpackBlobs } from '../blobs.js';
import { outboxDigestColumns } from '../rules.js';
import type { PgDb } from './db.js';
import { lockKey } from './db.js';

const T = 'TEXT COLLATE "C"';

/** A migration: its SQL, and work in code that follows it in the same transaction (e.g. filling a new column). */
export type PgMigration = string | { sql: string; then: (client: pg.ClientBase) => Promise<void> };

export const POSTGRES_MIGRATIONS: readonly PgMigration[] = [
  // 1: the v1 schema (docs/protocol.md §9)
  `
  CREATE TABLE server_meta (
    key ${T} PRIMARY KEY,
    value TEXT NOT NULL
  );

  CREATE TABLE users (
    login ${T} PRIMARY KEY,
    sign_key TEXT NOT NULL,
    enc_key TEXT NOT NULL,
    version BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    profile_json TEXT NOT NULL,
    source TEXT NOT NULL,
    fetched_at_ms BIGINT NOT NULL
  );

  CREATE TABLE user_access_servers_current (
    login ${T} NOT NULL,
    position INTEGER NOT NULL,
    server_login ${T} NOT NULL,
    PRIMARY KEY (login, position)
  );
  CREATE INDEX user_access_servers_by_server ON user_access_servers_current (server_login, login);

  CREATE TABLE servers (
    server_login ${T} PRIMARY KEY,
    ws_url TEXT NOT NULL,
    sign_key TEXT NOT NULL,
    descriptor_json TEXT NOT NULL,
    source TEXT NOT NULL
  );

  CREATE TABLE signed_messages (
    message_key ${T} PRIMARY KEY,
    base_key ${T} NOT NULL,
    owner_login ${T} NOT NULL,
    peer_login ${T} NOT NULL,
    message_type INTEGER NOT NULL,
    time_ms BIGINT NOT NULL,
    nonce BIGINT NOT NULL,
    revision_time_ms BIGINT NOT NULL,
    reencrypted_at_ms BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    stored_at_ms BIGINT NOT NULL,
    read_at_ms BIGINT,
    target_base_key ${T},
    replay BOOLEAN NOT NULL,
    origin_device ${T},
    blob BYTEA NOT NULL
  );
  CREATE INDEX signed_messages_history
    ON signed_messages (owner_login, peer_login, time_ms DESC, message_key DESC) WHERE message_type IN (1, 2);
  CREATE INDEX signed_messages_stored ON signed_messages (owner_login, stored_at_ms);
  CREATE INDEX signed_messages_target
    ON signed_messages (owner_login, target_base_key) WHERE target_base_key IS NOT NULL;

  CREATE TABLE dm_delivery_state (
    outgoing_key ${T} PRIMARY KEY,
    base_key ${T} NOT NULL,
    sender_login ${T} NOT NULL,
    recipient_login ${T} NOT NULL,
    revision_time_ms BIGINT NOT NULL,
    reencrypted_at_ms BIGINT NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    accepted_at_ms BIGINT NOT NULL,
    next_attempt_at_ms BIGINT,
    lease_until_ms BIGINT,
    row_version BIGINT NOT NULL,
    last_error TEXT,
    updated_at_ms BIGINT NOT NULL
  );
  CREATE INDEX dm_delivery_state_due ON dm_delivery_state (next_attempt_at_ms) WHERE state = 'accepted';

  CREATE TABLE dm_sync_outbox (
    owner_login ${T} NOT NULL,
    primary_message_key ${T} NOT NULL,
    sync_id ${T} NOT NULL,
    stored_at_ms BIGINT NOT NULL,
    blobs BYTEA NOT NULL,
    synced BOOLEAN NOT NULL,
    PRIMARY KEY (owner_login, primary_message_key)
  );
  CREATE INDEX dm_sync_outbox_unsynced
    ON dm_sync_outbox (owner_login, stored_at_ms, primary_message_key) WHERE synced = false;

  CREATE TABLE user_settings (
    owner_login ${T} NOT NULL,
    key ${T} NOT NULL,
    value BYTEA NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    stored_at_ms BIGINT NOT NULL,
    sync_id ${T} NOT NULL,
    synced BOOLEAN NOT NULL,
    PRIMARY KEY (owner_login, key)
  );
  CREATE INDEX user_settings_unsynced ON user_settings (owner_login, stored_at_ms, key) WHERE synced = false;

  CREATE TABLE dm_tombstones (
    owner_login ${T} NOT NULL,
    kind TEXT NOT NULL,
    target ${T} NOT NULL,
    delete_before_ms BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner_login, kind, target)
  );

  CREATE TABLE push_subscriptions (
    endpoint ${T} PRIMARY KEY,
    owner_login ${T} NOT NULL,
    device_id ${T},
    p256dh TEXT NOT NULL,
    auth TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL
  );
  CREATE INDEX push_subscriptions_owner ON push_subscriptions (owner_login);

  CREATE TABLE session_devices (
    owner_login ${T} NOT NULL,
    device_id ${T} NOT NULL,
    first_seen_at_ms BIGINT NOT NULL,
    last_seen_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner_login, device_id)
  );
  CREATE INDEX session_devices_last_seen ON session_devices (last_seen_at_ms);

  CREATE TABLE session_deliveries (
    owner_login ${T} NOT NULL,
    device_id ${T} NOT NULL,
    message_key ${T} NOT NULL,
    revision_time_ms BIGINT NOT NULL,
    reencrypted_at_ms BIGINT NOT NULL,
    acked_at_ms BIGINT NOT NULL,
    PRIMARY KEY (owner_login, device_id, message_key)
  );

  CREATE TABLE s2s_nonces (
    server_login ${T} NOT NULL,
    nonce ${T} NOT NULL,
    seen_at_ms BIGINT NOT NULL,
    PRIMARY KEY (server_login, nonce)
  );
  CREATE INDEX s2s_nonces_seen ON s2s_nonces (seen_at_ms);
  `,
  // 2: WebPush (docs/protocol.md §5.5). upsert_seq comes from a sequence: processes upsert at once.
  `
  CREATE SEQUENCE push_upsert_seq;
  ALTER TABLE push_subscriptions ADD COLUMN updated_at_ms BIGINT NOT NULL DEFAULT 0;
  ALTER TABLE push_subscriptions ADD COLUMN upsert_seq BIGINT NOT NULL DEFAULT 0;
  ALTER TABLE push_subscriptions ADD COLUMN last_success_at_ms BIGINT;
  ALTER TABLE push_subscriptions ADD COLUMN last_error_at_ms BIGINT;
  ALTER TABLE push_subscriptions ADD COLUMN last_error TEXT;
  ALTER TABLE push_subscriptions ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
  `,
  // 3: the processes of this server on this database (docs/protocol.md §9.2).
  `
  CREATE TABLE server_processes (
    process_id ${T} PRIMARY KEY,
    started_at_ms BIGINT NOT NULL,
    heartbeat_at_ms BIGINT NOT NULL,
    redis BOOLEAN NOT NULL
  );
  `,
  // 4: the delivery receipt proving a row's delivery (docs/protocol.md §13.1), as JSON.
  `
  ALTER TABLE dm_delivery_state ADD COLUMN receipt_json TEXT;
  `,
  // 5: anti-entropy (docs/protocol.md §7): each outbox row's message timeMs, copy count and the xor of its
  // copies' digests, in an index that DmDigest and DmKeys read without touching a blob.
  {
    sql: `
  ALTER TABLE dm_sync_outbox ADD COLUMN time_ms BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN copies INTEGER NOT NULL DEFAULT 0, ADD COLUMN digest BYTEA NOT NULL DEFAULT ''::bytea;
  CREATE INDEX dm_sync_outbox_digest ON dm_sync_outbox (owner_login, time_ms, primary_message_key) INCLUDE (copies, digest);
  `,
    then: async (client) => {
      for (let after = ['', '']; ;) {
        const { rows } = await client.query<{
          owner_login: string;
          primary_message_key: string;
          sync_id: string;
          blobs: Buffer;
        }>(
          `SELECT owner_login, primary_message_key, sync_id, blobs FROM dm_sync_outbox
           WHERE (owner_login, primary_message_key) > ($1::text, $2::text) ORDER BY owner_login, primary_message_key LIMIT 1000`,
          after,
        );
        if (rows.length === 0) break;
        for (const r of rows) {
          const copies = unpackBlobs(new Uint8Array(r.blobs)).length;
          const { timeMs, digest } = outboxDigestColumns(r.primary_message_key, r.sync_id, copies);
          await client.query(
            `UPDATE dm_sync_outbox SET time_ms = $1, copies = $2, digest = $3
             WHERE owner_login = $4 AND primary_message_key = $5`,
            [timeMs, copies, Buffer.from(digest), r.owner_login, r.primary_message_key],
          );
        }
        const last = rows.at(-1)!;
        after = [last.owner_login, last.primary_message_key];
      }
    },
  },
  // 6: user chains (docs/protocol.md §14), as SQLite's migration 6.
  `
  CREATE TABLE chain_blocks (
    login ${T} NOT NULL,
    idx BIGINT NOT NULL,
    hash TEXT NOT NULL,
    time_ms BIGINT NOT NULL,
    global_seq BIGINT NOT NULL,
    block BYTEA NOT NULL,
    PRIMARY KEY (login, idx)
  );
  CREATE TABLE chain_heads (
    login ${T} PRIMARY KEY,
    head_index BIGINT NOT NULL,
    head_hash TEXT NOT NULL,
    time_ms BIGINT NOT NULL,
    global_seq BIGINT NOT NULL UNIQUE
  );
  CREATE TABLE chain_seq (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value BIGINT NOT NULL
  );
  INSERT INTO chain_seq (id, value) VALUES (1, 0);
  CREATE TABLE chain_resync (
    login ${T} PRIMARY KEY,
    source TEXT NOT NULL,
    started_at_ms BIGINT NOT NULL
  );
  CREATE TABLE chain_partner_cursors (
    partner ${T} PRIMARY KEY,
    after_global_seq BIGINT NOT NULL
  );
  CREATE TABLE chain_partner_acks (
    partner ${T} NOT NULL,
    login ${T} NOT NULL,
    head_index BIGINT NOT NULL,
    head_hash TEXT NOT NULL,
    acked_at_ms BIGINT NOT NULL,
    PRIMARY KEY (partner, login)
  );
  CREATE INDEX chain_partner_acks_login ON chain_partner_acks (login);
  `,
  // 7: each device's replay floor, as SQLite's migration 11.
  `ALTER TABLE session_devices ADD COLUMN replay_floor_ms BIGINT NOT NULL DEFAULT 0;`,
  // 8: unread text copies by owner and peer, as SQLite's migration 12.
  `CREATE INDEX signed_messages_unread ON signed_messages (owner_login, peer_login)
     WHERE message_type = 1 AND read_at_ms IS NULL;`,
];

const MIGRATION_LOCK = lockKey('shine:migrations');

/**
 * Applies the missing migrations, each in its own transaction with its schema_migrations row. A session
 * advisory lock makes processes that start together take turns: the first migrates, the others find
 * nothing left to do.
 */
export async function migratePostgres(
  db: PgDb,
  migrations: readonly PgMigration[] = POSTGRES_MIGRATIONS,
): Promise<void> {
  const client = await db.dedicatedClient();
  try {
    await client.query(`SELECT pg_advisory_lock(${MIGRATION_LOCK})`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    );
    const applied = await client.query<{ v: number | null }>('SELECT MAX(version) AS v FROM schema_migrations');
    const current = applied.rows[0]?.v ?? 0;
    if (current > migrations.length) {
      throw new ShineError('INTERNAL', `database schema ${current} is newer than this server (${migrations.length})`);
    }
    for (let v = current; v < migrations.length; v++) {
      await client.query('BEGIN');
      try {
        const m = migrations[v]!;
        await client.query(typeof m === 'string' ? m : m.sql);
        if (typeof m !== 'string') await m.then(client);
        await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [v + 1]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw err;
      }
    }
    await client.query(`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`);
  } finally {
    await client.end();
  }
}
