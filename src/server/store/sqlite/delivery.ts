/** The delivery area on SQLite: dm_delivery_state, one row per outgoing pair (docs/protocol.md §6). */
import type { Container } from '../../../protocol/container.js';
import type { DeliveryState } from '../../../protocol/ops.js';
import type { DeliveryDbRow } from '../rows.js';
import { DELIVERY_COLUMNS, DELIVERY_ON_CONFLICT, deliveryRowValues, proofJson, toDeliveryRow } from '../rows.js';
import type { DeliveryReceipt } from '../../../protocol/receipt.js';
import type { DeliveryRow, DeliveryStore, DeliveryUpdate, StorePairInput } from '../types.js';
import type { SqliteDb } from './db.js';
import { SqliteArea } from './db.js';
import { RECIPIENT_USES_SERVER } from './directory.js';

/**
 * (Re)starts the delivery row of an outgoing copy for its revision, unless the row already has this
 * revision or a newer one. Runs inside the transaction that stored the copy (messages.storePair).
 */
export function startDeliveryTx(
  db: SqliteDb,
  outgoing: Container,
  outgoingKey: string,
  d: NonNullable<StorePairInput['delivery']>,
  nowMs: number,
): void {
  db.sql(
    `INSERT INTO dm_delivery_state (${DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, NULL, ?)
     ${DELIVERY_ON_CONFLICT}`,
  ).run(outgoingKey, ...deliveryRowValues(outgoing, d), nowMs);
}

/** The state of an outgoing copy's delivery row, or null when it has none. */
export function deliveryStateOf(db: SqliteDb, outgoingKey: string): DeliveryState | null {
  const row = db.sql('SELECT state FROM dm_delivery_state WHERE outgoing_key = ?').get(outgoingKey) as
    { state: DeliveryState } | undefined;
  return row?.state ?? null;
}

/**
 * /debug/delivery's newest rows of a state. `accepted` sorts the rows of the due index (the waiting rows),
 * `failed` reads its own index backwards (migration 13), and `delivered`, most of the table, takes the
 * rows written last (rowids grow with each new row) and orders those.
 */
const LIST_DELIVERIES: Record<DeliveryState, string> = {
  accepted: `SELECT * FROM dm_delivery_state INDEXED BY dm_delivery_state_due WHERE state = 'accepted'
    ORDER BY accepted_at_ms DESC LIMIT ?`,
  failed: `SELECT * FROM dm_delivery_state INDEXED BY dm_delivery_state_failed WHERE state = 'failed'
    ORDER BY accepted_at_ms DESC LIMIT ?`,
  delivered: `SELECT * FROM (SELECT * FROM dm_delivery_state WHERE state = 'delivered' ORDER BY rowid DESC LIMIT ?)
    ORDER BY accepted_at_ms DESC`,
};

export class SqliteDeliveryStore extends SqliteArea implements DeliveryStore {
  async getDelivery(outgoingKey: string): Promise<DeliveryRow | null> {
    const row = this.sql('SELECT * FROM dm_delivery_state WHERE outgoing_key = ?').get(outgoingKey) as
      DeliveryDbRow | undefined;
    return row ? toDeliveryRow(row) : null;
  }

  async getDeliveries(outgoingKeys: readonly string[]): Promise<(DeliveryRow | null)[]> {
    if (outgoingKeys.length === 0) return [];
    // One statement, so one read of the WAL: a statement a key began and ended a read each, and a replication
    // page's GetDmDeliveryStatus cost about 2.5 times as much (bench/sqlite-reads.ts, docs/performance.md).
    const rows = this.sql('SELECT * FROM dm_delivery_state WHERE outgoing_key IN (SELECT value FROM json_each(?))').all(
      JSON.stringify(outgoingKeys),
    ) as DeliveryDbRow[];
    const byKey = new Map(rows.map((r) => [r.outgoing_key, r]));
    return outgoingKeys.map((key) => {
      const row = byKey.get(key);
      return row ? toDeliveryRow(row) : null;
    });
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
             receipt_json = ?, row_version = row_version + 1, updated_at_ms = ?
           WHERE outgoing_key = ? AND row_version = ?`,
        ).run(u.state, u.attempt, u.nextAttemptAtMs, u.lastError, proofJson(u.proof), nowMs, outgoingKey, rowVersion)
          .changes === 1,
    );
  }

  markDelivered(
    outgoingKey: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
    proof: DeliveryReceipt | null,
  ): Promise<boolean> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET state = 'delivered', next_attempt_at_ms = NULL, lease_until_ms = NULL,
             receipt_json = ?, row_version = row_version + 1, updated_at_ms = ?
           WHERE outgoing_key = ? AND state = 'accepted' AND revision_time_ms = ? AND reencrypted_at_ms = ?`,
        ).run(proofJson(proof), nowMs, outgoingKey, rev.revisionTimeMs, rev.reencryptedAtMs).changes === 1,
    );
  }

  setDeliveryProof(
    outgoingKey: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    proof: DeliveryReceipt | null,
  ): Promise<boolean> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET receipt_json = ?
           WHERE outgoing_key = ? AND state = 'delivered' AND revision_time_ms = ? AND reencrypted_at_ms = ?`,
        ).run(proofJson(proof), outgoingKey, rev.revisionTimeMs, rev.reencryptedAtMs).changes === 1,
    );
  }

  wakeDeliveriesFor(serverLogin: string, nowMs: number): Promise<number> {
    return this.db.write(
      () =>
        this.sql(
          `UPDATE dm_delivery_state SET next_attempt_at_ms = ?, row_version = row_version + 1
           WHERE state = 'accepted' AND next_attempt_at_ms > ? AND ${RECIPIENT_USES_SERVER}`,
        ).run(nowMs, nowMs, serverLogin).changes,
    );
  }

  async countAcceptedFor(serverLogin: string): Promise<number> {
    const row = this.sql(
      `SELECT COUNT(*) AS n FROM dm_delivery_state WHERE state = 'accepted' AND ${RECIPIENT_USES_SERVER}`,
    ).get(serverLogin) as { n: number };
    return row.n;
  }

  async countDeliveriesByState(): Promise<Record<DeliveryState, number>> {
    // Kept by migration 9's triggers: a read of three rows, where a count was a scan of the whole table.
    const rows = this.sql('SELECT state, n FROM dm_delivery_counts').all() as {
      state: DeliveryState;
      n: number;
    }[];
    const out: Record<DeliveryState, number> = { accepted: 0, delivered: 0, failed: 0 };
    for (const r of rows) out[r.state] = r.n;
    return out;
  }

  async listDeliveries(state: DeliveryState, limit: number): Promise<DeliveryRow[]> {
    // Each state by a path that reads about what it returns. `WHERE state = ? ORDER BY accepted_at_ms` sorted
    // every row of the state on the event loop: for `delivered`, most of the table (seconds at a million rows).
    const rows = this.sql(LIST_DELIVERIES[state]).all(limit) as DeliveryDbRow[];
    return rows.map(toDeliveryRow);
  }
}
