import type Database from 'better-sqlite3';
import { unpackBlobs } from '../blobs.js';
import { outboxDigestColumns } from '../rules.js';

interface OutboxBackfillRow {
  owner_login: string;
  primary_message_key: string;
  sync_id: string;
  blobs: Buffer;
}

/** A migration: its SQL, and work in code that follows it in the same transaction (e.g. filling a new column). */
export type SqliteMigration = string | { sql: string; then: (conn: Database.Database) => void };

/**
 * Versioned SQLite migrations. PRAGMA user_version holds the number of migrations applied; each runs
 * once, in order, inside its own transaction.
 */
export const SQLITE_MIGRATIONS: readonly SqliteMigration[] = [
  // 1: the v1 schema (docs/protocol.md §9)
  `
  CREATE TABLE server_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT;

  CREATE TABLE users (
    login TEXT PRIMARY KEY,
    sign_key TEXT NOT NULL,
    enc_key TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    profile_json TEXT NOT NULL,
    source TEXT NOT NULL,
    fetched_at_ms INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE user_access_servers_current (
    login TEXT NOT NULL,
    position INTEGER NOT NULL,
    server_login TEXT NOT NULL,
    PRIMARY KEY (login, position)
  ) STRICT;
  CREATE INDEX user_access_servers_by_server ON user_access_servers_current (server_login, login);

  CREATE TABLE servers (
    server_login TEXT PRIMARY KEY,
    ws_url TEXT NOT NULL,
    sign_key TEXT NOT NULL,
    descriptor_json TEXT NOT NULL,
    source TEXT NOT NULL
  ) STRICT;

  -- One row per stored copy. read_at_ms: on a text copy, when it was read; on a receipt, its readAtMs.
  -- target_base_key: the message a receipt or a delete names. replay = 0 for copies stored by sync.
  -- origin_device: the device that sent this revision (its own copy counts as acknowledged by it).
  CREATE TABLE signed_messages (
    message_key TEXT PRIMARY KEY,
    base_key TEXT NOT NULL,
    owner_login TEXT NOT NULL,
    peer_login TEXT NOT NULL,
    message_type INTEGER NOT NULL,
    time_ms INTEGER NOT NULL,
    nonce INTEGER NOT NULL,
    revision_time_ms INTEGER NOT NULL,
    reencrypted_at_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    stored_at_ms INTEGER NOT NULL,
    read_at_ms INTEGER,
    target_base_key TEXT,
    replay INTEGER NOT NULL,
    origin_device TEXT,
    blob BLOB NOT NULL
  ) STRICT;
  CREATE INDEX signed_messages_history
    ON signed_messages (owner_login, peer_login, time_ms DESC, message_key DESC) WHERE message_type IN (1, 2);
  CREATE INDEX signed_messages_stored ON signed_messages (owner_login, stored_at_ms);
  CREATE INDEX signed_messages_target
    ON signed_messages (owner_login, target_base_key) WHERE target_base_key IS NOT NULL;

  CREATE TABLE dm_delivery_state (
    outgoing_key TEXT PRIMARY KEY,
    base_key TEXT NOT NULL,
    sender_login TEXT NOT NULL,
    recipient_login TEXT NOT NULL,
    revision_time_ms INTEGER NOT NULL,
    reencrypted_at_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    accepted_at_ms INTEGER NOT NULL,
    next_attempt_at_ms INTEGER,
    lease_until_ms INTEGER,
    row_version INTEGER NOT NULL,
    last_error TEXT,
    updated_at_ms INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX dm_delivery_state_due ON dm_delivery_state (next_attempt_at_ms) WHERE state = 'accepted';

  CREATE TABLE dm_sync_outbox (
    owner_login TEXT NOT NULL,
    primary_message_key TEXT NOT NULL,
    sync_id TEXT NOT NULL,
    stored_at_ms INTEGER NOT NULL,
    blobs BLOB NOT NULL,
    synced INTEGER NOT NULL,
    PRIMARY KEY (owner_login, primary_message_key)
  ) STRICT;
  CREATE INDEX dm_sync_outbox_unsynced
    ON dm_sync_outbox (owner_login, stored_at_ms, primary_message_key) WHERE synced = 0;

  CREATE TABLE user_settings (
    owner_login TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    stored_at_ms INTEGER NOT NULL,
    sync_id TEXT NOT NULL,
    synced INTEGER NOT NULL,
    PRIMARY KEY (owner_login, key)
  ) STRICT;
  CREATE INDEX user_settings_unsynced ON user_settings (owner_login, stored_at_ms, key) WHERE synced = 0;

  -- kind 'message': target = the deleted message's baseKey; kind 'conversation': target = the peer login.
  CREATE TABLE dm_tombstones (
    owner_login TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    delete_before_ms INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner_login, kind, target)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE push_subscriptions (
    endpoint TEXT PRIMARY KEY,
    owner_login TEXT NOT NULL,
    device_id TEXT,
    p256dh TEXT NOT NULL,
    auth TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX push_subscriptions_owner ON push_subscriptions (owner_login);

  CREATE TABLE session_devices (
    owner_login TEXT NOT NULL,
    device_id TEXT NOT NULL,
    first_seen_at_ms INTEGER NOT NULL,
    last_seen_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner_login, device_id)
  ) STRICT;
  CREATE INDEX session_devices_last_seen ON session_devices (last_seen_at_ms);

  -- A device's acknowledgement of one copy at one revision.
  CREATE TABLE session_deliveries (
    owner_login TEXT NOT NULL,
    device_id TEXT NOT NULL,
    message_key TEXT NOT NULL,
    revision_time_ms INTEGER NOT NULL,
    reencrypted_at_ms INTEGER NOT NULL,
    acked_at_ms INTEGER NOT NULL,
    PRIMARY KEY (owner_login, device_id, message_key)
  ) STRICT, WITHOUT ROWID;

  CREATE TABLE s2s_nonces (
    server_login TEXT NOT NULL,
    nonce TEXT NOT NULL,
    seen_at_ms INTEGER NOT NULL,
    PRIMARY KEY (server_login, nonce)
  ) STRICT, WITHOUT ROWID;
  CREATE INDEX s2s_nonces_seen ON s2s_nonces (seen_at_ms);
  `,
  // 2: WebPush (docs/protocol.md §5.5): when a subscription was last upserted (the oldest beyond 10 per login is
  // dropped) and its health.
  `
  ALTER TABLE push_subscriptions ADD COLUMN updated_at_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE push_subscriptions ADD COLUMN upsert_seq INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE push_subscriptions ADD COLUMN last_success_at_ms INTEGER;
  ALTER TABLE push_subscriptions ADD COLUMN last_error_at_ms INTEGER;
  ALTER TABLE push_subscriptions ADD COLUMN last_error TEXT;
  ALTER TABLE push_subscriptions ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
  `,
  // 3: the processes of this server on this database (docs/protocol.md §9.2).
  `
  CREATE TABLE server_processes (
    process_id TEXT PRIMARY KEY,
    started_at_ms INTEGER NOT NULL,
    heartbeat_at_ms INTEGER NOT NULL,
    redis INTEGER NOT NULL
  ) STRICT;
  `,
  // 4: the delivery receipt proving a row's delivery (docs/protocol.md §13.1), as JSON.
  `
  ALTER TABLE dm_delivery_state ADD COLUMN receipt_json TEXT;
  `,
  // 5: anti-entropy (docs/protocol.md §7): each outbox row's message timeMs, copy count and the xor of its
  // copies' digests, in an index that DmDigest and DmKeys read without touching a blob.
  {
    sql: `
  ALTER TABLE dm_sync_outbox ADD COLUMN time_ms INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE dm_sync_outbox ADD COLUMN copies INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE dm_sync_outbox ADD COLUMN digest BLOB NOT NULL DEFAULT x'';
  CREATE INDEX dm_sync_outbox_digest ON dm_sync_outbox (owner_login, time_ms, primary_message_key, copies, digest);
  `,
    then: (conn) => {
      // In pages along the primary key: better-sqlite3 cannot write while a read is still open.
      const page = conn.prepare(
        `SELECT owner_login, primary_message_key, sync_id, blobs FROM dm_sync_outbox
         WHERE (owner_login, primary_message_key) > (?, ?) ORDER BY owner_login, primary_message_key LIMIT 1000`,
      );
      const update = conn.prepare(
        'UPDATE dm_sync_outbox SET time_ms = ?, copies = ?, digest = ? WHERE owner_login = ? AND primary_message_key = ?',
      );
      for (let after = ['', '']; ;) {
        const rows = page.all(...after) as OutboxBackfillRow[];
        if (rows.length === 0) break;
        for (const r of rows) {
          const copies = unpackBlobs(new Uint8Array(r.blobs)).length;
          const { timeMs, digest } = outboxDigestColumns(r.primary_message_key, r.sync_id, copies);
          update.run(timeMs, copies, digest, r.owner_login, r.primary_message_key);
        }
        const last = rows.at(-1)!;
        after = [last.owner_login, last.primary_message_key];
      }
    },
  },
  // 6: user chains (docs/protocol.md §14): blocks, heads in globalSeq order, the one globalSeq counter row,
  // resync markers, and per partner the GetChainHeads cursor and the acknowledged heads.
  `
  CREATE TABLE chain_blocks (
    login TEXT NOT NULL,
    idx INTEGER NOT NULL,
    hash TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    global_seq INTEGER NOT NULL,
    block BLOB NOT NULL,
    PRIMARY KEY (login, idx)
  ) STRICT;
  CREATE TABLE chain_heads (
    login TEXT PRIMARY KEY,
    head_index INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    global_seq INTEGER NOT NULL UNIQUE
  ) STRICT;
  CREATE TABLE chain_seq (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
  ) STRICT;
  INSERT INTO chain_seq (id, value) VALUES (1, 0);
  CREATE TABLE chain_resync (
    login TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    started_at_ms INTEGER NOT NULL
  ) STRICT;
  CREATE TABLE chain_partner_cursors (
    partner TEXT PRIMARY KEY,
    after_global_seq INTEGER NOT NULL
  ) STRICT;
  CREATE TABLE chain_partner_acks (
    partner TEXT NOT NULL,
    login TEXT NOT NULL,
    head_index INTEGER NOT NULL,
    head_hash TEXT NOT NULL,
    acked_at_ms INTEGER NOT NULL,
    PRIMARY KEY (partner, login)
  ) STRICT;
  CREATE INDEX chain_partner_acks_login ON chain_partner_acks (login);
  `,
  // 7: delivery rows in a rowid table. WITHOUT ROWID kept whole rows (~430 bytes with their receipt) in
  // the key's B-tree, interior pages included: a fan-out of about 8 at 4 KiB, and at 1 KiB pages every
  // row spilled to an overflow page. A row now goes to the table's newest leaf and its key, alone, to the
  // primary key's index (docs/performance.md, "SQLite page size").
  `
  CREATE TABLE dm_delivery_state_7 (
    outgoing_key TEXT PRIMARY KEY,
    base_key TEXT NOT NULL,
    sender_login TEXT NOT NULL,
    recipient_login TEXT NOT NULL,
    revision_time_ms INTEGER NOT NULL,
    reencrypted_at_ms INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    accepted_at_ms INTEGER NOT NULL,
    next_attempt_at_ms INTEGER,
    lease_until_ms INTEGER,
    row_version INTEGER NOT NULL,
    last_error TEXT,
    updated_at_ms INTEGER NOT NULL,
    receipt_json TEXT
  ) STRICT;
  INSERT INTO dm_delivery_state_7 SELECT outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
    reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version, last_error,
    updated_at_ms, receipt_json FROM dm_delivery_state ORDER BY accepted_at_ms, outgoing_key;
  DROP TABLE dm_delivery_state;
  ALTER TABLE dm_delivery_state_7 RENAME TO dm_delivery_state;
  CREATE INDEX dm_delivery_state_due ON dm_delivery_state (next_attempt_at_ms) WHERE state = 'accepted';
  `,
  // 8: the outbox without its primary key's index. A row is found through the digest index by (owner, the
  // message timeMs its key carries, key) — store/sqlite/outbox.ts — so each stored event writes one B-tree
  // less, a leaf in the middle of the owner's part of it (docs/performance.md, "the outbox's key").
  `
  CREATE TABLE dm_sync_outbox_8 (
    owner_login TEXT NOT NULL,
    primary_message_key TEXT NOT NULL,
    sync_id TEXT NOT NULL,
    stored_at_ms INTEGER NOT NULL,
    blobs BLOB NOT NULL,
    synced INTEGER NOT NULL,
    time_ms INTEGER NOT NULL,
    copies INTEGER NOT NULL DEFAULT 0,
    digest BLOB NOT NULL DEFAULT x''
  ) STRICT;
  INSERT INTO dm_sync_outbox_8 SELECT owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms,
    copies, digest FROM dm_sync_outbox ORDER BY rowid;
  DROP TABLE dm_sync_outbox;
  ALTER TABLE dm_sync_outbox_8 RENAME TO dm_sync_outbox;
  CREATE INDEX dm_sync_outbox_unsynced
    ON dm_sync_outbox (owner_login, stored_at_ms, primary_message_key) WHERE synced = 0;
  CREATE INDEX dm_sync_outbox_digest ON dm_sync_outbox (owner_login, time_ms, primary_message_key, copies, digest);
  `,
  // 9: delivery rows counted by state as they are written. The delivery_rows gauge counted them with a scan of
  // the whole table on the event loop every 30 s (3.3 s at a million rows, docs/performance.md). The triggers
  // keep one row a state, in the transaction that changes the table, whoever writes it. A later migration that
  // rebuilds dm_delivery_state drops them with it and must create them again.
  `
  CREATE TABLE dm_delivery_counts (
    state TEXT PRIMARY KEY,
    n INTEGER NOT NULL
  ) STRICT, WITHOUT ROWID;
  INSERT INTO dm_delivery_counts (state, n) VALUES ('accepted', 0), ('delivered', 0), ('failed', 0);
  INSERT INTO dm_delivery_counts (state, n) SELECT state, COUNT(*) FROM dm_delivery_state GROUP BY state
    ON CONFLICT (state) DO UPDATE SET n = excluded.n;
  CREATE TRIGGER dm_delivery_counts_insert AFTER INSERT ON dm_delivery_state BEGIN
    INSERT INTO dm_delivery_counts (state, n) VALUES (NEW.state, 1) ON CONFLICT (state) DO UPDATE SET n = n + 1;
  END;
  CREATE TRIGGER dm_delivery_counts_delete AFTER DELETE ON dm_delivery_state BEGIN
    UPDATE dm_delivery_counts SET n = n - 1 WHERE state = OLD.state;
  END;
  CREATE TRIGGER dm_delivery_counts_update AFTER UPDATE OF state ON dm_delivery_state
    WHEN OLD.state IS NOT NEW.state BEGIN
    UPDATE dm_delivery_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO dm_delivery_counts (state, n) VALUES (NEW.state, 1) ON CONFLICT (state) DO UPDATE SET n = n + 1;
  END;
  `,
  // 10: the due index holds what a peer's wake-up filters on (its recipient, when it was accepted), so waking
  // the rows of one server reads the index alone, not every waiting row of every server (docs/performance.md).
  `
  DROP INDEX dm_delivery_state_due;
  CREATE INDEX dm_delivery_state_due
    ON dm_delivery_state (next_attempt_at_ms, recipient_login, accepted_at_ms) WHERE state = 'accepted';
  `,
  // 11: each device's replay floor: every copy stored before it is acknowledged by the device (or not
  // replayed to it), so a login's replay reads from there, not from the device's first day
  // (store/types.ts DeviceStore.advanceReplayFloor).
  `ALTER TABLE session_devices ADD COLUMN replay_floor_ms INTEGER NOT NULL DEFAULT 0;`,
  // 12: unread text copies by owner and peer, so GetConversations counts a dialog's unread copies in an
  // index of those alone, where it read every copy of the owner (store/sqlite/messages.ts).
  `
  CREATE INDEX signed_messages_unread
    ON signed_messages (owner_login, peer_login) WHERE message_type = 1 AND read_at_ms IS NULL;
  `,
  // 13: failed delivery rows by acceptance, for /debug/delivery?state=failed (a row enters it only when it
  // fails, so sending does not pay for it); that listing sorted the whole table (store/sqlite/delivery.ts).
  `CREATE INDEX dm_delivery_state_failed ON dm_delivery_state (accepted_at_ms) WHERE state = 'failed';`,
];
