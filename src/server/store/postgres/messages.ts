/**
 * Stored copies on PostgreSQL (signed_messages, dm_tombstones, dm_sync_outbox, and the delivery row a
 * pair starts). Storing copies of an owner is serialized by a per-owner advisory transaction lock, so
 * the facts rules.planCopy decides on cannot change before its plan is applied (types.ts, MessageStore).
 */
import type pg from 'pg';
import type { Container } from '../../../protocol/container.js';
import { ownerOf } from '../../../protocol/container.js';
import type { DeliveryState, HistoryItem } from '../../../protocol/ops.js';
import { OUTBOX_COLUMNS, OUTBOX_ON_CONFLICT, OUTBOX_PG_TYPES, outboxValues } from '../outbox-sql.js';
import type { HistoryDbRow, MessageDbRow } from '../rows.js';
import { deliveryRowValues, HISTORY_PROOF, toHistoryPage, toStoredCopy } from '../rows.js';
import type { CopyEffect, CopyFacts, CopyPlan } from '../rules.js';
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
  OutboxRow,
} from '../types.js';
import type { PgDb } from './db.js';
import { lockKey, prepared } from './db.js';

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
        let out: CopyResult;
        let inc: CopyResult;
        let inserts: readonly CopyPlan[] = [];
        if (ownerOf(outgoing) !== ownerOf(incoming)) {
          // Two owners: storing one copy cannot change the other's facts, so both copies' facts come in
          // one round trip and both rows are written together.
          const [outFacts, incFacts] = await lookupFacts(c, [outgoing, incoming]);
          const plans = [
            planCopy(outgoing, outFacts!, { nowMs, replay, originDevice: origin }),
            planCopy(incoming, incFacts!, { nowMs, replay, originDevice: null }),
          ];
          // New rows alone (a plain send) go with the last statement; updates and effects run first, in order.
          if (plans.every((p) => p.write !== 'update' && !(p.write && p.effect))) inserts = plans;
          else await applyPlans(c, plans, nowMs);
          [out, inc] = [plans[0]!.result, plans[1]!.result];
        } else {
          out = await storeCopyTx(c, outgoing, nowMs, replay, origin);
          inc = await storeCopyTx(c, incoming, nowMs, replay, null);
        }
        // The new copies, the outbox rows, the delivery row and the state after it in one statement. When
        // the upsert changes nothing (an older revision), the last SELECT reads the row as it was.
        const q = new Params();
        const insert = insertStatement(q, inserts);
        const outbox = outboxCte(q, [
          outboxRowFor(out, outgoing, [incoming.bytes, outgoing.bytes], input.outbox, nowMs),
          outboxRowFor(inc, incoming, [incoming.bytes], input.outbox, nowMs),
        ]);
        const key = q.add(out.messageKey);
        const d = copyChanged(out) ? input.delivery : null;
        const upsert = d
          ? `up AS (
               INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
                 reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, receipt_json,
                 row_version, last_error, updated_at_ms)
               VALUES (${key}, ${q.list(deliveryRowValues(outgoing, d))}, 1, NULL, ${q.add(nowMs)})
               ON CONFLICT (outgoing_key) DO UPDATE SET revision_time_ms = excluded.revision_time_ms,
                 reencrypted_at_ms = excluded.reencrypted_at_ms, state = excluded.state, attempt = excluded.attempt,
                 accepted_at_ms = excluded.accepted_at_ms, next_attempt_at_ms = excluded.next_attempt_at_ms,
                 lease_until_ms = excluded.lease_until_ms, receipt_json = excluded.receipt_json,
                 row_version = dm_delivery_state.row_version + 1, last_error = NULL, updated_at_ms = excluded.updated_at_ms
               WHERE (excluded.revision_time_ms, excluded.reencrypted_at_ms)
                     > (dm_delivery_state.revision_time_ms, dm_delivery_state.reencrypted_at_ms)
               RETURNING state)`
          : `up AS (SELECT NULL::text AS state WHERE false)`;
        const ctes = [insert && `ins AS (${insert})`, outbox, upsert].filter((x) => x !== null).join(', ');
        const r = await c.query<{ state: DeliveryState }>(
          prepared(
            `WITH ${ctes}
             SELECT state FROM up
             UNION ALL
             SELECT state FROM dm_delivery_state WHERE outgoing_key = ${key} AND NOT EXISTS (SELECT 1 FROM up)`,
            q.values,
          ),
        );
        return { incoming: inc, outgoing: out, deliveryState: r.rows[0]?.state ?? null };
      },
      ownerLocks([ownerOf(outgoing), ownerOf(incoming)]),
    );
  }

  storeCopy(input: StoreCopyInput): Promise<CopyResult> {
    const copy = input.copy;
    return this.db.tx(
      async (c) => {
        const r = await storeCopyTx(c, copy, input.nowMs, !input.silent, null);
        const q = new Params();
        const outbox = outboxCte(q, [outboxRowFor(r, copy, [copy.bytes], input.outbox, input.nowMs)]);
        if (outbox) await c.query(prepared(`WITH ${outbox} SELECT 1`, q.values));
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
    const r = await this.db.query<HistoryDbRow>(
      `SELECT m.*, d.state AS delivery_state, ${HISTORY_PROOF} FROM signed_messages m
         LEFT JOIN dm_delivery_state d ON m.message_type = 2 AND d.outgoing_key = m.message_key
       WHERE m.owner_login = $1 AND m.peer_login = $2 AND m.message_type IN (1, 2) AND m.time_ms <= $7::bigint
         AND ($3::boolean OR (m.time_ms, m.message_key) < ($4::bigint, $5::text))
       ORDER BY m.time_ms DESC, m.message_key DESC LIMIT $6`,
      [
        q.owner,
        q.peer,
        first,
        q.beforeTimeMs,
        q.beforeMessageKey,
        q.limit + 1,
        first ? Number.MAX_SAFE_INTEGER : q.beforeTimeMs,
      ],
    );
    const rows = r.rows;
    return toHistoryPage(rows, q.limit);
  }

  async getConversations(owner: string, limit: number): Promise<ConversationRow[]> {
    // The newest message per peer in history order (timeMs DESC, messageKey DESC), as GetDirectMessages:
    // the peers walked one index seek each, as on SQLite (store/sqlite/messages.ts), unread copies counted
    // in the unread index (migration 8).
    const r = await this.db.query<{ peer_login: string; last_time_ms: number; message_key: string; unread: number }>(
      `WITH RECURSIVE peers(p) AS (
         (SELECT peer_login FROM signed_messages WHERE owner_login = $1 AND message_type IN (1, 2)
          ORDER BY peer_login LIMIT 1)
         UNION ALL
         SELECT (SELECT peer_login FROM signed_messages
                 WHERE owner_login = $1 AND message_type IN (1, 2) AND peer_login > p ORDER BY peer_login LIMIT 1)
         FROM peers WHERE p IS NOT NULL)
       SELECT p AS peer_login, n.time_ms AS last_time_ms, n.message_key,
              (SELECT COUNT(*)::int FROM signed_messages u
               WHERE u.owner_login = $1 AND u.peer_login = p AND u.message_type = 1 AND u.read_at_ms IS NULL) AS unread
       FROM peers CROSS JOIN LATERAL (
         SELECT time_ms, message_key FROM signed_messages
         WHERE owner_login = $1 AND peer_login = p AND message_type IN (1, 2)
         ORDER BY time_ms DESC, message_key DESC LIMIT 1) n
       WHERE p IS NOT NULL ORDER BY last_time_ms DESC, peer_login LIMIT $2`,
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
  /** revision_time_ms, reencrypted_at_ms, stored_at_ms of the stored copy (BIGINT[] comes as text). */
  existing: string[] | null;
}

/**
 * The facts rules.planCopy needs for each copy, in one round trip. Only for copies of different owners:
 * storing one then cannot change the facts of another. Every lookup is a subquery on one row of a key, so
 * the plan a connection keeps for the statement (prepared) seeks an index whatever the tables' sizes were
 * when it was made: as a join, a plan made while signed_messages was small read the whole table each call.
 */
async function lookupFacts(c: Client, copies: readonly Container[]): Promise<CopyFacts[]> {
  const values: unknown[] = [];
  const tuples = copies.map((copy, i) => {
    const look = copyLookups(copy);
    const n = values.length;
    values.push(
      look.owner,
      look.peer,
      look.baseKey,
      look.messageKey,
      look.conversationTombstone,
      look.messageTombstone,
      look.earliestReceipt,
    );
    const p = (k: number) => `$${n + k}`;
    return `(${i}, ${p(1)}::text, ${p(2)}::text, ${p(3)}::text, ${p(4)}::text, ${p(5)}::boolean, ${p(6)}::boolean, ${p(7)}::boolean)`;
  });
  const r = await c.query<FactsRow>(
    prepared(
      `SELECT
         CASE WHEN v.conv_q THEN (SELECT delete_before_ms FROM dm_tombstones
                                  WHERE owner_login = v.owner AND kind = 'conversation' AND target = v.peer) END AS conv,
         COALESCE(v.tomb_q AND (SELECT true FROM dm_tombstones
                                WHERE owner_login = v.owner AND kind = 'message' AND target = v.base_key), false)
           AS tombstoned,
         CASE WHEN v.receipt_q THEN (SELECT MIN(read_at_ms) FROM signed_messages
                                     WHERE owner_login = v.owner AND target_base_key = v.base_key
                                       AND message_type IN (3, 4)) END AS receipt,
         (SELECT ARRAY[e.revision_time_ms, e.reencrypted_at_ms, e.stored_at_ms] FROM signed_messages e
          WHERE e.message_key = v.message_key) AS existing
       FROM (VALUES ${tuples.join(', ')}) AS v(i, owner, peer, base_key, message_key, conv_q, tomb_q, receipt_q)
       ORDER BY v.i`,
      values,
    ),
  );
  return r.rows.map((f) => ({
    conversationDeleteBeforeMs: f.conv,
    messageTombstoned: f.tombstoned,
    existing:
      f.existing === null
        ? null
        : {
            revisionTimeMs: Number(f.existing[0]),
            reencryptedAtMs: Number(f.existing[1]),
            storedAtMs: Number(f.existing[2]),
          },
    earliestReceiptReadAtMs: f.receipt,
  }));
}

/** Stores one copy under its owner's lock: its facts, then rules.planCopy's plan. */
async function storeCopyTx(
  c: Client,
  copy: Container,
  nowMs: number,
  replay: boolean,
  originDevice: string | null,
): Promise<CopyResult> {
  const [facts] = await lookupFacts(c, [copy]);
  const plan = planCopy(copy, facts!, { nowMs, replay, originDevice });
  await applyPlans(c, [plan], nowMs);
  return plan.result;
}

/**
 * Applies the plans of copies of different owners (or of one copy): new rows in one INSERT, then the
 * updates, then the effects on other rows of each owner.
 */
async function applyPlans(c: Client, plans: readonly CopyPlan[], nowMs: number): Promise<void> {
  const q = new Params();
  const insert = insertStatement(q, plans);
  if (insert) await c.query(prepared(insert, q.values));
  for (const plan of plans) {
    if (plan.write !== 'update') continue;
    const row = plan.row;
    await c.query(
      prepared(
        `UPDATE signed_messages SET revision_time_ms = $1, reencrypted_at_ms = $2, stored_at_ms = $3, blob = $4,
           replay = $5, origin_device = $6,
           read_at_ms = CASE WHEN message_type IN (3, 4) THEN $7 ELSE read_at_ms END
         WHERE message_key = $8`,
        [
          row.revisionTimeMs,
          row.reencryptedAtMs,
          row.nowMs,
          bufferOf(row.blob),
          row.replay,
          row.originDevice,
          row.readAtMs,
          row.messageKey,
        ],
      ),
    );
  }
  for (const plan of plans) if (plan.write !== null && plan.effect) await applyEffect(c, plan.effect, nowMs);
}

/** The INSERT of the plans' new rows, its values added to q; null when no plan inserts. */
function insertStatement(q: Params, plans: readonly CopyPlan[]): string | null {
  const rows = plans.flatMap((p) => (p.write === 'insert' ? [p.row] : []));
  if (rows.length === 0) return null;
  const tuples = rows.map(
    (row) =>
      `(${q.list([
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
        row.replay,
        row.originDevice,
        bufferOf(row.blob),
      ])})`,
  );
  return `INSERT INTO signed_messages (message_key, base_key, owner_login, peer_login, message_type, time_ms, nonce,
      revision_time_ms, reencrypted_at_ms, created_at_ms, stored_at_ms, read_at_ms, target_base_key, replay,
      origin_device, blob)
    VALUES ${tuples.join(', ')}`;
}

const bufferOf = (b: Uint8Array): Buffer => Buffer.from(b.buffer, b.byteOffset, b.byteLength);

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

/** Numbered parameters of one statement built from parts. */
class Params {
  readonly values: unknown[] = [];

  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }

  list(values: readonly unknown[]): string {
    return values.map((v) => this.add(v)).join(', ');
  }
}

/**
 * The outbox rows of one store call as a CTE (`ob AS (INSERT …)`) to run with the call's last statement,
 * or null when there are none. Their keys differ (one row per copy), so one upsert takes them all.
 */
function outboxCte(q: Params, rows: (OutboxRow | null)[]): string | null {
  const present = rows.filter((r): r is OutboxRow => r !== null);
  if (present.length === 0) return null;
  const tuples = present.map(
    (r) =>
      `(${outboxValues(r)
        .map((v, i) => `${q.add(v instanceof Uint8Array ? bufferOf(v) : v)}::${OUTBOX_PG_TYPES[i]}`)
        .join(', ')})`,
  );
  return `ob AS (INSERT INTO dm_sync_outbox (${OUTBOX_COLUMNS}) VALUES ${tuples.join(', ')} ${OUTBOX_ON_CONFLICT})`;
}
