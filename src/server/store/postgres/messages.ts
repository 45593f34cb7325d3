/**
 * Stored copies on PostgreSQL (signed_messages, dm_tombstones, dm_sync_outbox, and the delivery row a
 * pair starts). Storing copies of an owner is serialized by a per-owner advisory transaction lock, so
 * the facts rules.planCopy decides on cannot change before its plan is applied (types.ts, MessageStore).
 */
import type pg from 'pg';
import { toBase64 } from '../../../protocol/bytes.js';
import type { Container } from '../../../protocol/container.js';
import { baseKeyOf, ownerOf } from '../../../protocol/container.js';
import type { DeliveryState, HistoryItem } from '../../../protocol/ops.js';
import { packBlobs } from '../blobs.js';
import type { MessageDbRow } from '../rows.js';
import { toStoredCopy } from '../rows.js';
import type { CopyEffect, OutboxRow } from '../rules.js';
import { copyChanged, copyLookups, outboxRowFor, planCopy } from '../rules.js';
import type {
  ConversationRow,
  CopyResult,
  HistoryQuery,
  MessageStore,
  StoreCopyInput,
  StoredCopy,
  StorePairInput,
  StorePairResult,
} from '../types.js';
import type { PgDb } from './db.js';
import { lockKey } from './db.js';

type Client = pg.PoolClient;

/** BEGIN's companion: the owners' advisory locks in login order, so two pairs never wait on each other in a cycle. */
function ownerLocks(owners: readonly string[]): string {
  return [...new Set(owners)]
    .sort()
    .map((o) => `SELECT pg_advisory_xact_lock(${lockKey(`shine:owner:${o}`)});`)
    .join('');
}

export class PgMessageStore implements MessageStore {
  constructor(private readonly db: PgDb) {}

  storePair(input: StorePairInput): Promise<StorePairResult> {
    const { incoming, outgoing, nowMs } = input;
    return this.db.tx(
      async (c) => {
        const replay = !input.silent;
        // The sending device's own copy counts as acknowledged by it (docs/protocol.md §5.3).
        const origin = input.senderDevice?.login === outgoing.fromLogin ? input.senderDevice.deviceId : null;
        const out = await storeCopyTx(c, outgoing, nowMs, replay, origin);
        const inc = await storeCopyTx(c, incoming, nowMs, replay, null);
        await upsertOutbox(c, [
          outboxRowFor(out, outgoing, [incoming.bytes, outgoing.bytes], input.outbox, nowMs),
          outboxRowFor(inc, incoming, [incoming.bytes], input.outbox, nowMs),
        ]);
        let state: DeliveryState | null;
        if (copyChanged(out) && input.delivery) {
          const d = input.delivery;
          // The upsert and the state after it in one round trip: when the upsert changes nothing (an older
          // revision), the SELECT half reads the row as it was.
          const r = await c.query<{ state: DeliveryState }>(
            `WITH up AS (
             INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
               reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version,
               last_error, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, NULL, $12)
             ON CONFLICT (outgoing_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
               reencrypted_at_ms = excluded.reencrypted_at_ms, state = excluded.state, attempt = excluded.attempt,
               accepted_at_ms = excluded.accepted_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms,
               lease_until_ms = excluded.lease_until_ms, row_version = dm_delivery_state.row_version + 1,
               last_error = NULL, updated_at_ms = excluded.updated_at_ms
             WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
                   > (dm_delivery_state.revision_time_ms, dm_delivery_state.reencrypted_at_ms)
             RETURNING state)
           SELECT state FROM up
           UNION ALL
           SELECT state FROM dm_delivery_state WHERE outgoing_key = $1 AND NOT EXISTS (SELECT 1 FROM up)`,
            [
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
            ],
          );
          state = r.rows[0]?.state ?? null;
        } else {
          const r = await c.query<{ state: DeliveryState }>(
            'SELECT state FROM dm_delivery_state WHERE outgoing_key = $1',
            [out.messageKey],
          );
          state = r.rows[0]?.state ?? null;
        }
        return { incoming: inc, outgoing: out, deliveryState: state };
      },
      ownerLocks([ownerOf(outgoing), ownerOf(incoming)]),
    );
  }

  storeCopy(input: StoreCopyInput): Promise<CopyResult> {
    const copy = input.copy;
    return this.db.tx(
      async (c) => {
        const r = await storeCopyTx(c, copy, input.nowMs, !input.silent, null);
        await upsertOutbox(c, [outboxRowFor(r, copy, [copy.bytes], input.outbox, input.nowMs)]);
        return r;
      },
      ownerLocks([ownerOf(copy)]),
    );
  }

  async getCopy(messageKey: string): Promise<StoredCopy | null> {
    const r = await this.db.query<MessageDbRow>('SELECT * FROM signed_messages WHERE message_key = $1', [messageKey]);
    const row = r.rows[0];
    return row ? toStoredCopy(row) : null;
  }

  async getDirectMessages(q: HistoryQuery): Promise<{ items: HistoryItem[]; hasMore: boolean }> {
    const first = q.beforeTimeMs === 0 && q.beforeMessageKey === '';
    const r = await this.db.query<MessageDbRow & { delivery_state: DeliveryState | null }>(
      `SELECT m.*, d.state AS delivery_state FROM signed_messages m
         LEFT JOIN dm_delivery_state d ON m.message_type = 2 AND d.outgoing_key = m.message_key
       WHERE m.owner_login = $1 AND m.peer_login = $2 AND m.message_type IN (1, 2)
         AND ($3::boolean OR (m.time_ms, m.message_key) < ($4::bigint, $5::text))
       ORDER BY m.time_ms DESC, m.message_key DESC LIMIT $6`,
      [q.owner, q.peer, first, q.beforeTimeMs, q.beforeMessageKey, q.limit + 1],
    );
    const rows = r.rows;
    const hasMore = rows.length > q.limit;
    const items = rows.slice(0, q.limit).map((row): HistoryItem => {
      const { blob, storedAtMs: _storedAtMs, ...fields } = toStoredCopy(row);
      return {
        ...fields,
        createdAtMs: row.created_at_ms,
        readAtMs: row.read_at_ms,
        deliveryState: row.message_type === 2 ? (row.delivery_state ?? 'accepted') : null,
        blobB64: toBase64(blob),
      };
    });
    return { items, hasMore };
  }

  async getConversations(owner: string, limit: number): Promise<ConversationRow[]> {
    // The newest message per peer in history order (timeMs DESC, messageKey DESC), as GetDirectMessages.
    const r = await this.db.query<{ peer_login: string; last_time_ms: number; message_key: string; unread: number }>(
      `SELECT peer_login, time_ms AS last_time_ms, message_key, unread FROM (
         SELECT peer_login, time_ms, message_key,
                ROW_NUMBER() OVER (PARTITION BY peer_login ORDER BY time_ms DESC, message_key DESC) AS newest,
                (COUNT(*) FILTER (WHERE message_type = 1 AND read_at_ms IS NULL) OVER (PARTITION BY peer_login))::int
                  AS unread
         FROM signed_messages WHERE owner_login = $1 AND message_type IN (1, 2)) per_peer
       WHERE newest = 1 ORDER BY last_time_ms DESC, peer_login LIMIT $2`,
      [owner, limit],
    );
    return r.rows.map((row) => ({
      peerLogin: row.peer_login,
      lastTimeMs: row.last_time_ms,
      lastMessageKey: row.message_key,
      unreadCount: row.unread,
    }));
  }
}

interface FactsRow {
  conv: number | null;
  tombstoned: boolean;
  receipt: number | null;
  revision_time_ms: number | null;
  reencrypted_at_ms: number | null;
  stored_at_ms: number | null;
}

/** Gathers the facts rules.planCopy needs (one round trip) and applies its plan. Runs under the owner's lock. */
async function storeCopyTx(
  c: Client,
  copy: Container,
  nowMs: number,
  replay: boolean,
  originDevice: string | null,
): Promise<CopyResult> {
  const look = copyLookups(copy);
  const f = (
    await c.query<FactsRow>(
      `SELECT
         CASE WHEN $5 THEN (SELECT delete_before_ms FROM dm_tombstones
                            WHERE owner_login = $1 AND kind = 'conversation' AND target = $2) END AS conv,
         $6 AND EXISTS (SELECT 1 FROM dm_tombstones WHERE owner_login = $1 AND kind = 'message' AND target = $3)
           AS tombstoned,
         CASE WHEN $7 THEN (SELECT MIN(read_at_ms) FROM signed_messages
                            WHERE owner_login = $1 AND target_base_key = $3 AND message_type IN (3, 4)) END AS receipt,
         e.revision_time_ms, e.reencrypted_at_ms, e.stored_at_ms
       FROM (SELECT 1) AS one LEFT JOIN signed_messages e ON e.message_key = $4`,
      [
        look.owner,
        look.peer,
        look.baseKey,
        look.messageKey,
        look.conversationTombstone,
        look.messageTombstone,
        look.earliestReceipt,
      ],
    )
  ).rows[0]!;
  const plan = planCopy(
    copy,
    {
      conversationDeleteBeforeMs: f.conv,
      messageTombstoned: f.tombstoned,
      existing:
        f.stored_at_ms === null
          ? null
          : {
              revisionTimeMs: f.revision_time_ms!,
              reencryptedAtMs: f.reencrypted_at_ms!,
              storedAtMs: f.stored_at_ms,
            },
      earliestReceiptReadAtMs: f.receipt,
    },
    { nowMs, replay, originDevice },
  );
  if (plan.write === null) return plan.result;
  const row = plan.row;
  const blob = Buffer.from(row.blob.buffer, row.blob.byteOffset, row.blob.byteLength);
  if (plan.write === 'update') {
    await c.query(
      `UPDATE signed_messages SET revision_time_ms = $1, reencrypted_at_ms = $2, stored_at_ms = $3, blob = $4,
         replay = $5, origin_device = $6,
         read_at_ms = CASE WHEN message_type IN (3, 4) THEN $7 ELSE read_at_ms END
       WHERE message_key = $8`,
      [
        row.revisionTimeMs,
        row.reencryptedAtMs,
        row.nowMs,
        blob,
        row.replay,
        row.originDevice,
        row.readAtMs,
        row.messageKey,
      ],
    );
  } else {
    await c.query(
      `INSERT INTO signed_messages (message_key, base_key, owner_login, peer_login, message_type, time_ms, nonce,
         revision_time_ms, reencrypted_at_ms, created_at_ms, stored_at_ms, read_at_ms, target_base_key, replay,
         origin_device, blob)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, $12, $13, $14, $15)`,
      [
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
        row.readAtMs,
        row.targetBaseKey,
        row.replay,
        row.originDevice,
        blob,
      ],
    );
  }
  if (plan.effect) await applyEffect(c, plan.effect, nowMs);
  return plan.result;
}

async function applyEffect(c: Client, e: CopyEffect, nowMs: number): Promise<void> {
  if (e.kind === 'markRead') {
    await c.query(
      `UPDATE signed_messages SET read_at_ms = $1
       WHERE message_key = $2 AND owner_login = $3 AND (read_at_ms IS NULL OR read_at_ms > $1)`,
      [e.readAtMs, e.targetMessageKey, e.owner],
    );
  } else if (e.kind === 'deleteMessage') {
    // The tombstone, then the target's two copies and the receipts naming it, with their outbox rows.
    await c.query(
      `WITH t AS (
         INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms)
         VALUES ($1, 'message', $2, 0, $3) ON CONFLICT DO NOTHING),
       gone AS (
         DELETE FROM signed_messages WHERE owner_login = $1
           AND (message_key IN ($2 || '|1', $2 || '|2') OR (target_base_key = $2 AND message_type IN (3, 4)))
         RETURNING message_key)
       DELETE FROM dm_sync_outbox WHERE owner_login = $1 AND primary_message_key IN (SELECT message_key FROM gone)`,
      [e.owner, e.targetBaseKey, nowMs],
    );
  } else {
    await c.query(
      `WITH t AS (
         INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms)
         VALUES ($1, 'conversation', $2, $3, $4)
         ON CONFLICT (owner_login, kind, target)
           DO UPDATE SET delete_before_ms = GREATEST(dm_tombstones.delete_before_ms, excluded.delete_before_ms)),
       gone AS (
         DELETE FROM signed_messages
         WHERE owner_login = $1 AND peer_login = $2 AND time_ms <= $3 AND message_type <= 6
         RETURNING message_key)
       DELETE FROM dm_sync_outbox WHERE owner_login = $1 AND primary_message_key IN (SELECT message_key FROM gone)`,
      [e.owner, e.peer, e.deleteBeforeMs, nowMs],
    );
  }
}

/** Upserts the outbox rows of one store call in one statement (their keys differ: one row per copy). */
async function upsertOutbox(c: Client, rows: (OutboxRow | null)[]): Promise<void> {
  const present = rows.filter((r): r is OutboxRow => r !== null);
  if (present.length === 0) return;
  const values: unknown[] = [];
  const tuples = present.map((r) => {
    const n = values.length;
    values.push(r.owner, r.primaryMessageKey, r.syncId, r.storedAtMs, Buffer.from(packBlobs(r.blobs)), r.synced);
    return `($${n + 1}, $${n + 2}, $${n + 3}, $${n + 4}::bigint, $${n + 5}::bytea, $${n + 6}::boolean)`;
  });
  await c.query(
    `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced)
     VALUES ${tuples.join(', ')}
     ON CONFLICT (owner_login, primary_message_key) DO UPDATE SET sync_id = excluded.sync_id,
       stored_at_ms = excluded.stored_at_ms, blobs = excluded.blobs, synced = excluded.synced`,
    values,
  );
}
