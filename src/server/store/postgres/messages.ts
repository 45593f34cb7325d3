/**
 * Stored copies on PostgreSQL (signed_messages, dm_tombstones, dm_sync_outbox, and the delivery row a
 * pair starts). Storing copies of an owner is serialized by a per-owner advisory transaction lock, so
 * the facts rules.planCopy decides on cannot change before its plan is applied (types.ts, MessageStore).
 */
import type pg from 'pg';
import type { Container } from '../../../protocol/container.js';
import { baseKeyOf, ownerOf } from '../../../protocol/container.js';
import type { DeliveryState, HistoryItem } from '../../../protocol/ops.js';
import { OUTBOX_COLUMNS, OUTBOX_ON_CONFLICT, OUTBOX_PG_TYPES, outboxValues } from '../outbox-sql.js';
import type { HistoryDbRow } from '../rows.js';
import {
  COPY_COLUMNS,
  COPY_PG_TYPES,
  copyRowValues,
  DELIVERY_COLUMNS,
  DELIVERY_ON_CONFLICT,
  DELIVERY_PG_TYPES,
  deliveryRowValues,
  HISTORY_PROOF,
  toHistoryPage,
  toStoredCopy,
} from '../rows.js';
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
import { ShineError } from '../../../protocol/errors.js';
import type { PgDb } from './db.js';
import { lockKey, prepared } from './db.js';
import { PerTurn, rowsByKey } from './per-turn.js';

type Client = pg.PoolClient;

/**
 * BEGIN's companion for storing copies: the owners' advisory locks in login order, so two transactions
 * never wait on each other in a cycle; and the plans each connection keeps for the statements below
 * (prepared), which take their rows as arrays. A custom plan knows an array's length and a generic one
 * cannot, so PostgreSQL would otherwise plan them again on every call. A plan a connection made while a
 * table was small may scan it whole until autovacuum's ANALYZE makes the connection plan again: on a fresh
 * database, one store in nine scanned the delivery rows in its first minute (docs/performance.md).
 */
function ownerLocks(owners: readonly string[]): string {
  return (
    'SET LOCAL plan_cache_mode = force_generic_plan;' +
    [...new Set(owners)]
      .sort()
      .map((o) => `SELECT pg_advisory_xact_lock(${lockKey(`shine:owner:${o}`)});`)
      .join('')
  );
}

/** Owners a transaction locks at most (32 pairs' worth, docs/performance.md): their locks are all taken at its start. */
const MAX_BATCH_OWNERS = 64;
/**
 * Calls (pairs or copies) a transaction stores at most. Past 32 pairs only where owners repeat: a catch-up
 * page is one owner's, a busy sender's pairs share the sender.
 */
const MAX_BATCH = 256;
/**
 * Batches of pairs in flight at once: while one commits, the next forms and runs. More in flight made each
 * smaller and cost the database more per pair (docs/performance.md, 1, 2, 3, 4 and 10 measured); the pool's
 * other connections stay free for reads and the delivery worker.
 */
const BATCHES_IN_FLIGHT = 2;
/** Calls waiting for a batch before more are refused, as the pool refuses waiting callers (db.ts). */
const MAX_PENDING = 20_000;

/** A store call waiting for a batch: a pair of two owners, or one copy; it is answered as its input's kind. */
interface StoreJob<I, R> {
  input: I;
  resolve: (r: R) => void;
  reject: (err: unknown) => void;
  /** Stored in a transaction of its own (its batch failed). */
  alone?: boolean;
}
type Job = StoreJob<StorePairInput, StorePairResult> | StoreJob<StoreCopyInput, CopyResult>;
type BatchInput = StorePairInput | StoreCopyInput;

const isPair = (input: BatchInput): input is StorePairInput => 'outgoing' in input;
const copiesOf = (input: BatchInput): Container[] => (isPair(input) ? [input.outgoing, input.incoming] : [input.copy]);

/**
 * A text copy (type 1 or 2) reads only facts that no other text copy of its owner with another base key
 * writes (rules.planCopy), and writes only its own row: several of one owner can share a batch.
 */
const isPlain = (c: Container): boolean => c.messageType === 1 || c.messageType === 2;

/** Whether copy c can join a batch where its owner has `here` (undefined: nothing yet). */
const canShare = (here: Set<string> | null | undefined, c: Container): boolean =>
  here === undefined || (here !== null && isPlain(c) && !here.has(baseKeyOf(c)));

/**
 * The next batch of the waiting calls, in the order asked: at most MAX_BATCH calls of MAX_BATCH_OWNERS
 * owners, none of an owner in `busy` (a batch in flight), an owner twice only in text copies of different messages (canShare), and none of
 * an owner one of whose earlier calls waits, so each owner's calls are stored in the order asked. A call
 * stored alone (its batch failed) goes in a batch of its own.
 */
function nextBatch(
  pending: readonly Job[],
  busy: ReadonlySet<string>,
): { batch: Job[]; later: Job[]; owners: string[] } {
  // An owner's plain copies in the batch (their base keys), or null once it has any other copy there.
  const inBatch = new Map<string, Set<string> | null>();
  // Owners with a call left for a later batch.
  const waiting = new Set<string>();
  const batch: Job[] = [];
  const later: Job[] = [];
  for (const job of pending) {
    const copies = copiesOf(job.input);
    const newOwners = copies.filter((c) => !inBatch.has(ownerOf(c))).length;
    const fits =
      batch.length < MAX_BATCH &&
      inBatch.size + newOwners <= MAX_BATCH_OWNERS &&
      !(job.alone && batch.length > 0) &&
      !batch[0]?.alone &&
      copies.every((c) => {
        const o = ownerOf(c);
        return !busy.has(o) && !waiting.has(o) && canShare(inBatch.get(o), c);
      });
    if (fits) {
      batch.push(job);
      for (const c of copies) {
        const o = ownerOf(c);
        const keys = inBatch.get(o);
        if (!isPlain(c)) inBatch.set(o, null);
        else if (keys) keys.add(baseKeyOf(c));
        else inBatch.set(o, new Set([baseKeyOf(c)]));
      }
    } else {
      later.push(job);
      for (const c of copies) waiting.add(ownerOf(c));
    }
  }
  return { batch, later, owners: [...inBatch.keys()] };
}

export class PgMessageStore implements MessageStore {
  private pending: Job[] = [];
  private scheduled = false;
  /** Owners of the batches in flight: a call of one of them waits here, not on the database's lock. */
  private readonly busyOwners = new Set<string>();
  private batchesInFlight = 0;

  constructor(private readonly db: PgDb) {}

  /**
   * Pairs of two owners, and single copies (storeCopy: a federated recipient's copy, a forwarded one, a
   * catch-up page's), are stored in batches (group commit): one transaction takes the owners' locks at
   * once in login order, reads every copy's facts in one statement and writes every new row in one more,
   * so a batch costs two round trips (PgDb.pipelinedTx) and one commit where each call cost as much
   * (docs/performance.md).
   * At most two batches are in flight; calls made meanwhile wait and form the next ones (at most
   * MAX_PENDING, then 503 OVERLOADED). A batch holds an owner twice only in text copies of different
   * messages, none of a batch in flight, and an owner's calls in the order asked, so one call cannot change
   * another's facts and no batch waits on another's lock in this process. If a batch
   * fails (other than with 503 OVERLOADED, which fails all), each of its calls is stored again on its
   * own, so only a call that fails alone answers with its error.
   */
  storePair(input: StorePairInput): Promise<StorePairResult> {
    if (ownerOf(input.outgoing) === ownerOf(input.incoming)) {
      return this.db.tx((c) => storeOneOwnerPairTx(c, input), ownerLocks([ownerOf(input.outgoing)]));
    }
    return new Promise<StorePairResult>((resolve, reject) => this.enqueue({ input, resolve, reject }));
  }

  storeCopy(input: StoreCopyInput): Promise<CopyResult> {
    return new Promise<CopyResult>((resolve, reject) => this.enqueue({ input, resolve, reject }));
  }

  private enqueue(job: Job): void {
    if (this.pending.length >= MAX_PENDING) {
      job.reject(new ShineError('OVERLOADED', 'write queue full'));
      return;
    }
    this.pending.push(job);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.scheduled = false;
    while (this.pending.length > 0 && this.batchesInFlight < BATCHES_IN_FLIGHT) {
      const { batch, later, owners } = nextBatch(this.pending, this.busyOwners);
      if (batch.length === 0) return;
      this.pending = later;
      void this.storeBatch(batch, owners);
    }
  }

  private async storeBatch(batch: Job[], owners: string[]): Promise<void> {
    this.batchesInFlight++;
    for (const o of owners) this.busyOwners.add(o);
    let results: (StorePairResult | CopyResult)[] | null = null;
    let failure: unknown = null;
    try {
      results = await storeBatch(
        this.db,
        batch.map((j) => j.input),
        owners,
      );
    } catch (err) {
      failure = err;
    }
    this.batchesInFlight--;
    for (const o of owners) this.busyOwners.delete(o);
    // storeBatchTx answers each input as its kind: a pair with a StorePairResult, a copy with a CopyResult.
    if (results) batch.forEach((job, i) => (job.resolve as (r: StorePairResult | CopyResult) => void)(results[i]!));
    // A database that cannot serve fails them all, as it would alone; and a connection lost in COMMIT may
    // have committed, which the callers' retries find (docs/protocol.md decision 26), not this store's.
    else if (batch.length === 1 || (failure instanceof ShineError && failure.code === 'OVERLOADED'))
      for (const job of batch) job.reject(failure);
    else this.pending.unshift(...batch.map((job) => Object.assign({}, job, { alone: true })));
    this.flush();
  }

  /**
   * The copies asked for in one turn are one statement (PerTurn): the delivery worker reads each due row's
   * copy, a batch of rows at once, which were a parsed and planned statement each.
   */
  private readonly copies = new PerTurn<string, StoredCopy | null>((keys) =>
    rowsByKey(this.db, 'signed_messages', keys, toStoredCopy),
  );

  getCopy(messageKey: string): Promise<StoredCopy | null> {
    return this.copies.call(messageKey);
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

interface StateRow {
  outgoing_key: string;
  state: DeliveryState;
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
 * storing one then cannot change the facts of another. The copies come as arrays, so the statement's text
 * is the same for any number of them, and every lookup is a subquery on one row of a key: the plan a
 * connection keeps for it (prepared) seeks an index whatever the tables' sizes were when it was made. As a
 * join, a plan made while signed_messages was small read the whole table on each call.
 */
function factsStatement(copies: readonly Container[]): pg.QueryConfig {
  const looks = copies.map(copyLookups);
  const q = new Params();
  const v = unnest(
    q,
    ['text', 'text', 'text', 'text', 'boolean', 'boolean', 'boolean'],
    looks.map((l) => [
      l.owner,
      l.peer,
      l.baseKey,
      l.messageKey,
      l.conversationTombstone,
      l.messageTombstone,
      l.earliestReceipt,
    ]),
  );
  return prepared(
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
       FROM ${v} WITH ORDINALITY AS v(owner, peer, base_key, message_key, conv_q, tomb_q, receipt_q, i)
       ORDER BY v.i`,
    q.values,
  );
}

const factsOf = (rows: readonly FactsRow[]): CopyFacts[] =>
  rows.map((f) => ({
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

async function lookupFacts(c: Client, copies: readonly Container[]): Promise<CopyFacts[]> {
  return factsOf((await c.query<FactsRow>(factsStatement(copies))).rows);
}

/** A call's copies as stored (or refused), in copiesOf's order, and the new rows still to write with the batch's last statement. */
interface Done {
  input: BatchInput;
  results: CopyResult[];
  inserts: readonly CopyPlan[];
}

/**
 * Stores calls whose owners all differ (PgMessageStore's batches) in one transaction of two round trips where
 * the connection lets it (PgDb.pipelinedTx): BEGIN, the owners' locks and every copy's facts; then, after
 * the plans' updates and effects if any, the last statement and COMMIT.
 */
function storeBatch(db: PgDb, inputs: readonly BatchInput[], owners: readonly string[]) {
  return db.pipelinedTx<FactsRow, StateRow, (StorePairResult | CopyResult)[]>(
    ownerLocks(owners),
    factsStatement(inputs.flatMap(copiesOf)),
    async (c, r) => finishStatement(await planBatch(c, inputs, factsOf(r.rows))),
  );
}

/** Each call's plans on its copies' facts (in copiesOf's order); updates and effects applied at once. */
async function planBatch(c: Client, inputs: readonly BatchInput[], facts: readonly CopyFacts[]): Promise<Done[]> {
  let at = 0;
  const done: Done[] = [];
  for (const input of inputs) {
    const { nowMs } = input;
    const replay = !input.silent;
    // The sending device's own copy counts as acknowledged by it (docs/protocol.md §5.3).
    const plans = copiesOf(input).map((copy, k) =>
      planCopy(copy, facts[at++]!, { nowMs, replay, originDevice: k === 0 && isPair(input) ? originOf(input) : null }),
    );
    // New rows alone (a plain send) go with the last statement; updates and effects run first, in order.
    const insertsOnly = plans.every((p) => p.write !== 'update' && !(p.write && p.effect));
    if (!insertsOnly) await applyPlans(c, plans, nowMs);
    done.push({ input, results: plans.map((p) => p.result), inserts: insertsOnly ? plans : [] });
  }
  return done;
}

/** A pair whose two copies have one owner (a note to oneself): the second copy's facts follow the first. */
async function storeOneOwnerPairTx(c: Client, input: StorePairInput): Promise<StorePairResult> {
  const { outgoing, incoming, nowMs } = input;
  const out = await storeCopyTx(c, outgoing, nowMs, !input.silent, originOf(input));
  const inc = await storeCopyTx(c, incoming, nowMs, !input.silent, null);
  const [result] = await finishBatch(c, [{ input, results: [out, inc], inserts: [] }]);
  return result as StorePairResult;
}

const originOf = (input: StorePairInput): string | null =>
  input.senderDevice?.login === input.outgoing.fromLogin ? input.senderDevice.deviceId : null;

/** A stored copy's outbox row: a pair's outgoing copy carries both copies' bytes (docs/protocol.md §7). */
function outboxRowsOf({ input, results }: Done): (OutboxRow | null)[] {
  if (!isPair(input)) return [outboxRowFor(results[0]!, input.copy, [input.copy.bytes], input.outbox, input.nowMs)];
  const { outgoing, incoming, outbox, nowMs } = input;
  return [
    outboxRowFor(results[0]!, outgoing, [incoming.bytes, outgoing.bytes], outbox, nowMs),
    outboxRowFor(results[1]!, incoming, [incoming.bytes], outbox, nowMs),
  ];
}

/**
 * The calls' new copies, outbox rows and pairs' delivery rows, and each pair's delivery state after them,
 * in one statement of one text. A delivery row is (re)started only for an outgoing copy this call inserted
 * or updated, and only where it is older than the pair's revision; a pair's state is then read as the row
 * is. Each call is answered as its kind: a pair with a StorePairResult, a copy with its CopyResult.
 */
function finishStatement(done: readonly Done[]): {
  last: pg.QueryConfig;
  done: (r: pg.QueryResult<StateRow>) => (StorePairResult | CopyResult)[];
} {
  const q = new Params();
  const insert = insertStatement(
    q,
    done.flatMap((d) => d.inserts),
  );
  const outbox = outboxInsert(q, done.flatMap(outboxRowsOf));
  const pairs = done.flatMap(({ input, results }) => (isPair(input) ? [{ input, out: results[0]! }] : []));
  const deliveries = unnest(
    q,
    DELIVERY_PG_TYPES,
    pairs.flatMap(({ input, out }) => {
      const d = copyChanged(out) ? input.delivery : null;
      return d ? [[out.messageKey, ...deliveryRowValues(input.outgoing, d), input.nowMs]] : [];
    }),
  );
  const keys = q.add(pairs.map((p) => p.out.messageKey));
  const last = prepared(
    `WITH ins AS (${insert}), ob AS (${outbox}),
       up AS (
         INSERT INTO dm_delivery_state (${DELIVERY_COLUMNS})
         SELECT k, b, s, r, rev, re, st, att, acc, nxt, lease, rj, 1, NULL, upd
         FROM ${deliveries} AS u(k, b, s, r, rev, re, st, att, acc, nxt, lease, rj, upd)
         ${DELIVERY_ON_CONFLICT}
         RETURNING outgoing_key, state)
       SELECT outgoing_key, state FROM up
       UNION ALL
       SELECT outgoing_key, state FROM dm_delivery_state
       WHERE outgoing_key = ANY(${keys}::text[]) AND outgoing_key NOT IN (SELECT outgoing_key FROM up)`,
    q.values,
  );
  const answers = (r: pg.QueryResult<StateRow>): (StorePairResult | CopyResult)[] => {
    const states = new Map(r.rows.map((row) => [row.outgoing_key, row.state]));
    return done.map(({ input, results }) => {
      if (!isPair(input)) return results[0]!;
      const [outgoing, incoming] = results as [CopyResult, CopyResult];
      return { incoming, outgoing, deliveryState: states.get(outgoing.messageKey) ?? null };
    });
  };
  return { last, done: answers };
}

async function finishBatch(c: Client, done: readonly Done[]): Promise<(StorePairResult | CopyResult)[]> {
  const { last, done: answers } = finishStatement(done);
  return answers(await c.query<StateRow>(last));
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
  if (plans.some((p) => p.write === 'insert')) {
    const q = new Params();
    await c.query(prepared(insertStatement(q, plans), q.values));
  }
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

/** The INSERT of the plans' new rows (none when no plan inserts), its values added to q as arrays. */
function insertStatement(q: Params, plans: readonly CopyPlan[]): string {
  const rows = plans.flatMap((p) => (p.write === 'insert' ? [p.row] : []));
  const values = unnest(q, COPY_PG_TYPES, rows.map(copyRowValues));
  return `INSERT INTO signed_messages (${COPY_COLUMNS})
    SELECT * FROM ${values}`;
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
}

/**
 * `unnest(…)` of rows given as arrays of columns of the given types, its values added to q: a statement of
 * one text for any number of rows, so each connection prepares it once (db.ts, prepared).
 */
function unnest(q: Params, types: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const columns = types.map((type, i) => `${q.add(rows.map((row) => row[i]))}::${type}[]`);
  return `unnest(${columns.join(', ')})`;
}

/** The upsert of a store call's outbox rows (the nulls are none); their keys differ, one row per copy. */
function outboxInsert(q: Params, rows: readonly (OutboxRow | null)[]): string {
  const values = unnest(q, OUTBOX_PG_TYPES, rows.filter((r): r is OutboxRow => r !== null).map(outboxValues));
  return `INSERT INTO dm_sync_outbox (${OUTBOX_COLUMNS}) SELECT * FROM ${values} ${OUTBOX_ON_CONFLICT}`;
}
