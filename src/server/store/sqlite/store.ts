/** The Store on SQLite (better-sqlite3, WAL, group commit). */
import type Database from 'better-sqlite3';
import { toBase64 } from '../../../protocol/bytes.js';
import type { Container } from '../../../protocol/container.js';
import { baseKeyOf, parseSyncId } from '../../../protocol/container.js';
import type { ServerDescriptor, UserProfile } from '../../../protocol/identity.js';
import type { DeliveryState, HistoryItem } from '../../../protocol/ops.js';
import { packBlobs, unpackBlobs } from '../blobs.js';
import type { DeliveryDbRow, MessageDbRow } from '../rows.js';
import { toDeliveryRow, toStoredCopy } from '../rows.js';
import type { CopyEffect, OutboxRow } from '../rules.js';
import {
  copyChanged,
  copyLookups,
  outboxRowFor,
  planCopy,
  settingKeyOfSyncId,
  settingSyncId,
  settingWins,
  takeWithinBytes,
} from '../rules.js';
import type {
  ConversationRow,
  CopyResult,
  DeliveryRow,
  DeliveryUpdate,
  DmSyncRow,
  HistoryQuery,
  ProfileSource,
  ServerRecord,
  SetSettingInput,
  SettingRow,
  Store,
  MetaStore,
  DirectoryStore,
  MessageStore,
  DeliveryStore,
  ReplicationStore,
  NonceStore,
  DeviceStore,
  SettingsStore,
  SyncPage,
  SyncPageQuery,
  StoreCopyInput,
  StoredCopy,
  StorePairInput,
  StorePairResult,
  UserRecord,
} from '../types.js';
import type { SqliteSync } from './db.js';
import { SqliteDb } from './db.js';
import { SqliteProcessStore } from './processes.js';
import { SqlitePushStore } from './push.js';

export interface SqliteStoreOptions {
  path: string;
  sync: SqliteSync;
  maxQueuedWrites?: number;
}

export function openSqliteStore(opts: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(new SqliteDb(opts));
}

/**
 * Every area on one SQLite connection. For now one class implements every area and hands itself out as
 * each of them; the areas move into their own files under store/sqlite/.
 */
export class SqliteStore
  implements
    Store,
    MetaStore,
    DirectoryStore,
    MessageStore,
    DeliveryStore,
    ReplicationStore,
    NonceStore,
    DeviceStore,
    SettingsStore
{
  get meta(): MetaStore {
    return this;
  }
  get directory(): DirectoryStore {
    return this;
  }
  get messages(): MessageStore {
    return this;
  }
  get delivery(): DeliveryStore {
    return this;
  }
  get replication(): ReplicationStore {
    return this;
  }
  get nonces(): NonceStore {
    return this;
  }
  get devices(): DeviceStore {
    return this;
  }
  get settings(): SettingsStore {
    return this;
  }
  private readonly statements = new Map<string, Database.Statement>();
  readonly dialect = 'sqlite';
  readonly push: SqlitePushStore;
  readonly processes: SqliteProcessStore;

  constructor(readonly db: SqliteDb) {
    this.push = new SqlitePushStore(db);
    this.processes = new SqliteProcessStore(db);
  }

  /** Prepared once, reused: every SQL text in this file is a constant. */
  private sql(text: string): Database.Statement {
    let s = this.statements.get(text);
    if (!s) this.statements.set(text, (s = this.db.conn.prepare(text)));
    return s;
  }

  async migrate(): Promise<void> {
    this.db.migrate();
  }

  async ping(): Promise<void> {
    this.sql('SELECT 1').get();
  }

  async close(): Promise<void> {
    await this.db.close();
  }

  async getMeta(key: string): Promise<string | null> {
    const row = this.sql('SELECT value FROM server_meta WHERE key = ?').get(key) as { value: string } | undefined;
    return row?.value ?? null;
  }

  setMeta(key: string, value: string): Promise<void> {
    return this.db.write(() => {
      this.sql(
        'INSERT INTO server_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
      ).run(key, value);
    });
  }

  // ---- directory ----

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
      { descriptor_json: string; source: ServerRecord['source'] } | undefined;
    return row ? { descriptor: JSON.parse(row.descriptor_json) as ServerDescriptor, source: row.source } : null;
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
    const rows = this.sql('SELECT descriptor_json, source FROM servers ORDER BY server_login').all() as {
      descriptor_json: string;
      source: ServerRecord['source'];
    }[];
    return rows.map((r) => ({ descriptor: JSON.parse(r.descriptor_json) as ServerDescriptor, source: r.source }));
  }

  // ---- direct messages ----

  storePair(input: StorePairInput): Promise<StorePairResult> {
    return this.db.write(() => {
      const { incoming, outgoing, nowMs } = input;
      const replay = !input.silent;
      // The sending device's own copy counts as acknowledged by it (docs/protocol.md §5.3), without a row of its own.
      const origin = input.senderDevice?.login === outgoing.fromLogin ? input.senderDevice.deviceId : null;
      const out = this.storeCopyTx(outgoing, nowMs, replay, origin);
      const inc = this.storeCopyTx(incoming, nowMs, replay, null);
      this.upsertOutbox(outboxRowFor(out, outgoing, [incoming.bytes, outgoing.bytes], input.outbox, nowMs));
      this.upsertOutbox(outboxRowFor(inc, incoming, [incoming.bytes], input.outbox, nowMs));
      if (copyChanged(out) && input.delivery) {
        const d = input.delivery;
        this.sql(
          `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
             reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version, last_error, updated_at_ms)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL, ?)
           ON CONFLICT (outgoing_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
             reencrypted_at_ms = excluded.reencrypted_at_ms, state = excluded.state, attempt = excluded.attempt,
             accepted_at_ms = excluded.accepted_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms,
             lease_until_ms = excluded.lease_until_ms, row_version = dm_delivery_state.row_version + 1,
             last_error = NULL, updated_at_ms = excluded.updated_at_ms
           WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
                 > (dm_delivery_state.revision_time_ms, dm_delivery_state.reencrypted_at_ms)`,
        ).run(
          out.messageKey,
          baseKeyOf(outgoing),
          outgoing.fromLogin,
          outgoing.toLogin,
          outgoing.revisionTimeMs,
          outgoing.reencryptedAtMs,
          d.state,
          d.attempt,
          d.acceptedAtMs,
          d.nextAttemptAtMs,
          d.leaseUntilMs ?? null,
          nowMs,
        );
      }
      const state = this.sql('SELECT state FROM dm_delivery_state WHERE outgoing_key = ?').get(out.messageKey) as
        { state: DeliveryState } | undefined;
      return { incoming: inc, outgoing: out, deliveryState: state?.state ?? null };
    });
  }

  storeCopy(input: StoreCopyInput): Promise<CopyResult> {
    return this.db.write(() => {
      const c = input.copy;
      const r = this.storeCopyTx(c, input.nowMs, !input.silent, null);
      this.upsertOutbox(outboxRowFor(r, c, [c.bytes], input.outbox, input.nowMs));
      return r;
    });
  }

  /** Gathers the facts rules.planCopy needs and applies its plan. Runs inside a transaction. */
  private storeCopyTx(c: Container, nowMs: number, replay: boolean, originDevice: string | null): CopyResult {
    const look = copyLookups(c);
    const conv = look.conversationTombstone
      ? (this.sql(
          `SELECT delete_before_ms FROM dm_tombstones WHERE owner_login = ? AND kind = 'conversation' AND target = ?`,
        ).get(look.owner, look.peer) as { delete_before_ms: number } | undefined)
      : undefined;
    const messageTombstoned =
      look.messageTombstone &&
      this.sql(`SELECT 1 FROM dm_tombstones WHERE owner_login = ? AND kind = 'message' AND target = ?`).get(
        look.owner,
        look.baseKey,
      ) !== undefined;
    const existing = this.sql(
      'SELECT revision_time_ms, reencrypted_at_ms, stored_at_ms FROM signed_messages WHERE message_key = ?',
    ).get(look.messageKey) as { revision_time_ms: number; reencrypted_at_ms: number; stored_at_ms: number } | undefined;
    const receipt = look.earliestReceipt
      ? (this.sql(
          'SELECT MIN(read_at_ms) AS at FROM signed_messages WHERE owner_login = ? AND target_base_key = ? AND message_type IN (3, 4)',
        ).get(look.owner, look.baseKey) as { at: number | null })
      : { at: null };
    const plan = planCopy(
      c,
      {
        conversationDeleteBeforeMs: conv?.delete_before_ms ?? null,
        messageTombstoned,
        existing: existing
          ? {
              revisionTimeMs: existing.revision_time_ms,
              reencryptedAtMs: existing.reencrypted_at_ms,
              storedAtMs: existing.stored_at_ms,
            }
          : null,
        earliestReceiptReadAtMs: receipt.at,
      },
      { nowMs, replay, originDevice },
    );
    if (plan.write === null) return plan.result;
    const row = plan.row;
    const blob = Buffer.from(row.blob.buffer, row.blob.byteOffset, row.blob.byteLength);
    if (plan.write === 'update') {
      this.sql(
        `UPDATE signed_messages SET revision_time_ms = ?, reencrypted_at_ms = ?, stored_at_ms = ?, blob = ?, replay = ?,
           origin_device = ?, read_at_ms = CASE WHEN message_type IN (3, 4) THEN ? ELSE read_at_ms END
         WHERE message_key = ?`,
      ).run(
        row.revisionTimeMs,
        row.reencryptedAtMs,
        row.nowMs,
        blob,
        row.replay ? 1 : 0,
        row.originDevice,
        row.readAtMs,
        row.messageKey,
      );
    } else {
      this.sql(
        `INSERT INTO signed_messages (message_key, base_key, owner_login, peer_login, message_type, time_ms, nonce,
           revision_time_ms, reencrypted_at_ms, created_at_ms, stored_at_ms, read_at_ms, target_base_key, replay, origin_device, blob)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        row.messageKey,
        row.baseKey,
        row.owner,
        row.peer,
        row.messageType,
        row.timeMs,
        row.nonce,
        row.revisionTimeMs,
        row.reencryptedAtMs,
        row.nowMs,
        row.nowMs,
        row.readAtMs,
        row.targetBaseKey,
        row.replay ? 1 : 0,
        row.originDevice,
        blob,
      );
    }
    if (plan.effect) this.applyEffect(plan.effect, nowMs);
    return plan.result;
  }

  private applyEffect(e: CopyEffect, nowMs: number): void {
    if (e.kind === 'markRead') {
      this.sql(
        'UPDATE signed_messages SET read_at_ms = ? WHERE message_key = ? AND owner_login = ? AND (read_at_ms IS NULL OR read_at_ms > ?)',
      ).run(e.readAtMs, e.targetMessageKey, e.owner, e.readAtMs);
    } else if (e.kind === 'deleteMessage') {
      this.sql(
        `INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms) VALUES (?, 'message', ?, 0, ?)
         ON CONFLICT DO NOTHING`,
      ).run(e.owner, e.targetBaseKey, nowMs);
      const receipts = this.sql(
        'SELECT message_key FROM signed_messages WHERE owner_login = ? AND target_base_key = ? AND message_type IN (3, 4)',
      ).all(e.owner, e.targetBaseKey) as { message_key: string }[];
      this.deleteCopiesTx(e.owner, [
        `${e.targetBaseKey}|1`,
        `${e.targetBaseKey}|2`,
        ...receipts.map((r) => r.message_key),
      ]);
    } else {
      this.sql(
        `INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms) VALUES (?, 'conversation', ?, ?, ?)
         ON CONFLICT (owner_login, kind, target) DO UPDATE SET delete_before_ms = MAX(delete_before_ms, excluded.delete_before_ms)`,
      ).run(e.owner, e.peer, e.deleteBeforeMs, nowMs);
      const covered = this.sql(
        'SELECT message_key FROM signed_messages WHERE owner_login = ? AND peer_login = ? AND time_ms <= ? AND message_type <= 6',
      ).all(e.owner, e.peer, e.deleteBeforeMs) as { message_key: string }[];
      this.deleteCopiesTx(
        e.owner,
        covered.map((r) => r.message_key),
      );
    }
  }

  /** Removes owner's copies and their outbox rows (an owner's outbox key is its copy's key). */
  private deleteCopiesTx(owner: string, keys: readonly string[]): void {
    for (const key of keys) {
      this.sql('DELETE FROM signed_messages WHERE message_key = ? AND owner_login = ?').run(key, owner);
      this.sql('DELETE FROM dm_sync_outbox WHERE owner_login = ? AND primary_message_key = ?').run(owner, key);
    }
  }

  private upsertOutbox(row: OutboxRow | null): void {
    if (!row) return;
    this.sql(
      `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (owner_login, primary_message_key) DO UPDATE SET sync_id = excluded.sync_id,
         stored_at_ms = excluded.stored_at_ms, blobs = excluded.blobs, synced = excluded.synced`,
    ).run(row.owner, row.primaryMessageKey, row.syncId, row.storedAtMs, packBlobs(row.blobs), row.synced ? 1 : 0);
  }

  async getCopy(messageKey: string): Promise<StoredCopy | null> {
    const row = this.sql('SELECT * FROM signed_messages WHERE message_key = ?').get(messageKey) as
      MessageDbRow | undefined;
    return row ? toStoredCopy(row) : null;
  }

  async getDirectMessages(q: HistoryQuery): Promise<{ items: HistoryItem[]; hasMore: boolean }> {
    const rows = this.sql(
      `SELECT m.*, d.state AS delivery_state FROM signed_messages m
         LEFT JOIN dm_delivery_state d ON m.message_type = 2 AND d.outgoing_key = m.message_key
       WHERE m.owner_login = ? AND m.peer_login = ? AND m.message_type IN (1, 2)
         AND (? = 0 OR m.time_ms < ? OR (m.time_ms = ? AND m.message_key < ?))
       ORDER BY m.time_ms DESC, m.message_key DESC LIMIT ?`,
    ).all(
      q.owner,
      q.peer,
      q.beforeTimeMs === 0 && q.beforeMessageKey === '' ? 0 : 1,
      q.beforeTimeMs,
      q.beforeTimeMs,
      q.beforeMessageKey,
      q.limit + 1,
    ) as (MessageDbRow & { delivery_state: DeliveryState | null })[];
    const hasMore = rows.length > q.limit;
    const items = rows.slice(0, q.limit).map((r): HistoryItem => {
      const { blob, storedAtMs: _storedAtMs, ...fields } = toStoredCopy(r);
      return {
        ...fields,
        createdAtMs: r.created_at_ms,
        readAtMs: r.read_at_ms,
        deliveryState: r.message_type === 2 ? (r.delivery_state ?? 'accepted') : null,
        blobB64: toBase64(blob),
      };
    });
    return { items, hasMore };
  }

  async getConversations(owner: string, limit: number): Promise<ConversationRow[]> {
    // The newest message per peer in history order (timeMs DESC, messageKey DESC), so ties are decided
    // as GetDirectMessages decides them.
    const rows = this.sql(
      `SELECT peer_login, time_ms AS last_time_ms, message_key, unread FROM (
         SELECT peer_login, time_ms, message_key,
                ROW_NUMBER() OVER (PARTITION BY peer_login ORDER BY time_ms DESC, message_key DESC) AS newest,
                SUM(message_type = 1 AND read_at_ms IS NULL) OVER (PARTITION BY peer_login) AS unread
         FROM signed_messages WHERE owner_login = ? AND message_type IN (1, 2))
       WHERE newest = 1 ORDER BY last_time_ms DESC, peer_login LIMIT ?`,
    ).all(owner, limit) as { peer_login: string; last_time_ms: number; message_key: string; unread: number }[];
    return rows.map((r) => ({
      peerLogin: r.peer_login,
      lastTimeMs: r.last_time_ms,
      lastMessageKey: r.message_key,
      unreadCount: r.unread,
    }));
  }

  // ---- delivery rows ----

  async getDelivery(outgoingKey: string): Promise<DeliveryRow | null> {
    const row = this.sql('SELECT * FROM dm_delivery_state WHERE outgoing_key = ?').get(outgoingKey) as
      DeliveryDbRow | undefined;
    return row ? toDeliveryRow(row) : null;
  }

  async dueDeliveries(nowMs: number, limit: number): Promise<DeliveryRow[]> {
    const rows = this.sql(
      `SELECT * FROM dm_delivery_state INDEXED BY dm_delivery_state_due
       WHERE state = 'accepted' AND next_attempt_at_ms <= ? AND (lease_until_ms IS NULL OR lease_until_ms <= ?)
       ORDER BY next_attempt_at_ms LIMIT ?`,
    ).all(nowMs, nowMs, limit) as DeliveryDbRow[];
    return rows.map(toDeliveryRow);
  }

  claimDelivery(outgoingKey: string, rowVersion: number, leaseUntilMs: number): Promise<DeliveryRow | null> {
    return this.db.write(() => {
      const r = this.sql(
        `UPDATE dm_delivery_state SET lease_until_ms = ?, row_version = row_version + 1
         WHERE outgoing_key = ? AND row_version = ? AND state = 'accepted' RETURNING *`,
      ).get(leaseUntilMs, outgoingKey, rowVersion) as DeliveryDbRow | undefined;
      return r ? toDeliveryRow(r) : null;
    });
  }

  finishDelivery(outgoingKey: string, rowVersion: number, u: DeliveryUpdate, nowMs: number): Promise<boolean> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET state = ?, attempt = ?, next_attempt_at_ms = ?, last_error = ?, lease_until_ms = NULL,
             row_version = row_version + 1, updated_at_ms = ?
           WHERE outgoing_key = ? AND row_version = ?`,
        ).run(u.state, u.attempt, u.nextAttemptAtMs, u.lastError, nowMs, outgoingKey, rowVersion).changes === 1,
    );
  }

  markDelivered(
    outgoingKey: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
  ): Promise<boolean> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET state = 'delivered', next_attempt_at_ms = NULL, lease_until_ms = NULL,
             row_version = row_version + 1, updated_at_ms = ?
           WHERE outgoing_key = ? AND state = 'accepted' AND revision_time_ms = ? AND reencrypted_at_ms = ?`,
        ).run(nowMs, outgoingKey, rev.revisionTimeMs, rev.reencryptedAtMs).changes === 1,
    );
  }

  wakeDeliveriesFor(serverLogin: string, nowMs: number, acceptedBeforeMs: number): Promise<number> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET next_attempt_at_ms = ?, row_version = row_version + 1
           WHERE state = 'accepted' AND next_attempt_at_ms > ? AND accepted_at_ms <= ?
             AND recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = ?)`,
        ).run(nowMs, nowMs, acceptedBeforeMs, serverLogin).changes,
    );
  }

  async countAcceptedFor(serverLogin: string): Promise<number> {
    const row = this.sql(
      `SELECT COUNT(*) AS n FROM dm_delivery_state WHERE state = 'accepted'
         AND recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = ?)`,
    ).get(serverLogin) as { n: number };
    return row.n;
  }

  async countDeliveriesByState(): Promise<Record<DeliveryState, number>> {
    const rows = this.sql('SELECT state, COUNT(*) AS n FROM dm_delivery_state GROUP BY state').all() as {
      state: DeliveryState;
      n: number;
    }[];
    const out: Record<DeliveryState, number> = { accepted: 0, delivered: 0, failed: 0 };
    for (const r of rows) out[r.state] = r.n;
    return out;
  }

  // ---- replication ----

  dmSyncPage(q: SyncPageQuery): Promise<SyncPage<DmSyncRow>> {
    return this.db.write(() => {
      for (const syncId of q.ackSyncIds) {
        const parsed = parseSyncId(syncId);
        if (!parsed) continue;
        // A row that moved on to a newer revision keeps synced = 0: only its current syncId acks it.
        this.sql(
          'UPDATE dm_sync_outbox SET synced = 1 WHERE owner_login = ? AND primary_message_key = ? AND sync_id = ?',
        ).run(q.owner, parsed.primaryMessageKey, syncId);
      }
      const rows = this.sql(
        `SELECT primary_message_key, sync_id, stored_at_ms, blobs FROM dm_sync_outbox INDEXED BY dm_sync_outbox_unsynced
         WHERE owner_login = ? AND synced = 0 AND (stored_at_ms, primary_message_key) > (?, ?)
         ORDER BY stored_at_ms, primary_message_key LIMIT ?`,
      ).all(q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1) as {
        primary_message_key: string;
        sync_id: string;
        stored_at_ms: number;
        blobs: Buffer;
      }[];
      const page = takeWithinBytes(rows, q.limit, q.maxBytes, (r) =>
        unpackBlobs(r.blobs).reduce((n, b) => n + b.length, 0),
      );
      return {
        items: page.items.map((r) => ({
          syncId: r.sync_id,
          primaryMessageKey: r.primary_message_key,
          storedAtMs: r.stored_at_ms,
          blobs: unpackBlobs(new Uint8Array(r.blobs)),
        })),
        hasMore: page.hasMore,
      };
    });
  }

  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>> {
    return this.db.write(() => {
      for (const syncId of q.ackSyncIds) {
        const key = settingKeyOfSyncId(syncId);
        if (key === null) continue;
        this.sql('UPDATE user_settings SET synced = 1 WHERE owner_login = ? AND key = ? AND sync_id = ?').run(
          q.owner,
          key,
          syncId,
        );
      }
      const rows = this.sql(
        `SELECT key, value, updated_at_ms, stored_at_ms, sync_id FROM user_settings INDEXED BY user_settings_unsynced
         WHERE owner_login = ? AND synced = 0 AND (stored_at_ms, key) > (?, ?)
         ORDER BY stored_at_ms, key LIMIT ?`,
      ).all(q.owner, q.afterStoredAtMs, q.afterKey, q.limit + 1) as {
        key: string;
        value: Buffer;
        updated_at_ms: number;
        stored_at_ms: number;
        sync_id: string;
      }[];
      const page = takeWithinBytes(rows, q.limit, q.maxBytes, (r) => r.value.length + r.key.length);
      return {
        items: page.items.map((r) => ({
          key: r.key,
          value: new Uint8Array(r.value),
          updatedAtMs: r.updated_at_ms,
          storedAtMs: r.stored_at_ms,
          syncId: r.sync_id,
        })),
        hasMore: page.hasMore,
      };
    });
  }

  markUnsynced(owner: string | null): Promise<{ updated: number; dmUpdated: number }> {
    return this.db.write(() => {
      if (owner === null) {
        return {
          updated: this.sql('UPDATE user_settings SET synced = 0 WHERE synced = 1').run().changes,
          dmUpdated: this.sql('UPDATE dm_sync_outbox SET synced = 0 WHERE synced = 1').run().changes,
        };
      }
      return {
        updated: this.sql('UPDATE user_settings SET synced = 0 WHERE owner_login = ? AND synced = 1').run(owner)
          .changes,
        dmUpdated: this.sql('UPDATE dm_sync_outbox SET synced = 0 WHERE owner_login = ? AND synced = 1').run(owner)
          .changes,
      };
    });
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

  async outboxCounts(owner: string): Promise<{ synced: number; unsynced: number }> {
    const r = this.sql(
      'SELECT SUM(synced = 1) AS s, SUM(synced = 0) AS u FROM dm_sync_outbox WHERE owner_login = ?',
    ).get(owner) as {
      s: number | null;
      u: number | null;
    };
    return { synced: r.s ?? 0, unsynced: r.u ?? 0 };
  }

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

  async listDeliveries(state: DeliveryState, limit: number): Promise<DeliveryRow[]> {
    const rows = this.sql('SELECT * FROM dm_delivery_state WHERE state = ? ORDER BY accepted_at_ms DESC LIMIT ?').all(
      state,
      limit,
    ) as DeliveryDbRow[];
    return rows.map(toDeliveryRow);
  }

  // ---- per-device delivery ----

  touchDevice(login: string, deviceId: string, nowMs: number): Promise<{ firstSeenAtMs: number; isNew: boolean }> {
    return this.db.write(() => {
      const row = this.sql('SELECT first_seen_at_ms FROM session_devices WHERE owner_login = ? AND device_id = ?').get(
        login,
        deviceId,
      ) as { first_seen_at_ms: number } | undefined;
      if (row) {
        this.sql('UPDATE session_devices SET last_seen_at_ms = ? WHERE owner_login = ? AND device_id = ?').run(
          nowMs,
          login,
          deviceId,
        );
        return { firstSeenAtMs: row.first_seen_at_ms, isNew: false };
      }
      this.sql(
        'INSERT INTO session_devices (owner_login, device_id, first_seen_at_ms, last_seen_at_ms) VALUES (?, ?, ?, ?)',
      ).run(login, deviceId, nowMs, nowMs);
      return { firstSeenAtMs: nowMs, isNew: true };
    });
  }

  async pendingForDevice(
    login: string,
    deviceId: string,
    after: { storedAtMs: number; messageKey: string } | null,
    limit: number,
  ): Promise<StoredCopy[]> {
    const rows = this.sql(
      `SELECT m.* FROM session_devices d
         JOIN signed_messages m ON m.owner_login = d.owner_login AND m.stored_at_ms >= d.first_seen_at_ms
       WHERE d.owner_login = ? AND d.device_id = ? AND m.replay = 1 AND m.origin_device IS NOT d.device_id
         AND (m.stored_at_ms, m.message_key) > (?, ?)
         AND NOT EXISTS (
           SELECT 1 FROM session_deliveries a
           WHERE a.owner_login = m.owner_login AND a.device_id = d.device_id AND a.message_key = m.message_key
             AND (a.revision_time_ms, a.reencrypted_at_ms) >= (m.revision_time_ms, m.reencrypted_at_ms))
       ORDER BY m.stored_at_ms, m.message_key LIMIT ?`,
    ).all(login, deviceId, after?.storedAtMs ?? -1, after?.messageKey ?? '', limit) as MessageDbRow[];
    return rows.map(toStoredCopy);
  }

  ackForDevice(login: string, deviceId: string, messageKeys: readonly string[], nowMs: number): Promise<number> {
    return this.db.write(() => {
      let acked = 0;
      for (const key of new Set(messageKeys)) {
        const row = this.sql(
          'SELECT revision_time_ms, reencrypted_at_ms FROM signed_messages WHERE message_key = ? AND owner_login = ?',
        ).get(key, login) as { revision_time_ms: number; reencrypted_at_ms: number } | undefined;
        if (!row) continue;
        this.ackTx(
          login,
          deviceId,
          key,
          { revisionTimeMs: row.revision_time_ms, reencryptedAtMs: row.reencrypted_at_ms },
          nowMs,
        );
        acked++;
      }
      return acked;
    });
  }

  private ackTx(
    login: string,
    deviceId: string,
    key: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
  ): void {
    this.sql(
      `INSERT INTO session_deliveries (owner_login, device_id, message_key, revision_time_ms, reencrypted_at_ms, acked_at_ms)
       VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (owner_login, device_id, message_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
         reencrypted_at_ms = excluded.reencrypted_at_ms, acked_at_ms = excluded.acked_at_ms
       WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
             > (session_deliveries.revision_time_ms, session_deliveries.reencrypted_at_ms)`,
    ).run(login, deviceId, key, rev.revisionTimeMs, rev.reencryptedAtMs, nowMs);
  }

  forgetDevicesBefore(cutoffMs: number): Promise<number> {
    return this.db.write(() => {
      this.sql(
        `DELETE FROM session_deliveries WHERE (owner_login, device_id) IN
           (SELECT owner_login, device_id FROM session_devices WHERE last_seen_at_ms < ?)`,
      ).run(cutoffMs);
      return this.sql('DELETE FROM session_devices WHERE last_seen_at_ms < ?').run(cutoffMs).changes;
    });
  }

  // ---- settings ----

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

  async getSettings(owner: string, keys?: readonly string[]): Promise<SettingRow[]> {
    const rows = this.sql(
      'SELECT key, value, updated_at_ms, stored_at_ms FROM user_settings WHERE owner_login = ? ORDER BY key',
    ).all(owner) as {
      key: string;
      value: Buffer;
      updated_at_ms: number;
      stored_at_ms: number;
    }[];
    const wanted = keys ? new Set(keys) : null;
    return rows
      .filter((r) => (!wanted || wanted.has(r.key)) && r.value.length > 0)
      .map((r) => ({
        key: r.key,
        value: new Uint8Array(r.value),
        updatedAtMs: r.updated_at_ms,
        storedAtMs: r.stored_at_ms,
      }));
  }
}
