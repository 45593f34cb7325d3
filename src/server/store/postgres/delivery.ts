/** Delivery rows on PostgreSQL (dm_delivery_state). Every write is a conditional update (types.ts). */
import type { DeliveryState } from '../../../protocol/ops.js';
import type { DeliveryDbRow } from '../rows.js';
import { proofJson, toDeliveryRow } from '../rows.js';
import type { DeliveryReceipt } from '../../../protocol/receipt.js';
import type { DeliveryRow, DeliveryStore, DeliveryUpdate } from '../types.js';
import type { PgDb } from './db.js';
import { prepared } from './db.js';
import { PerTurn } from './per-turn.js';

interface DeliveredMark {
  outgoingKey: string;
  rev: { revisionTimeMs: number; reencryptedAtMs: number };
  nowMs: number;
  /** proofJson of the receipt. */
  proof: string | null;
}

export class PgDeliveryStore implements DeliveryStore {
  constructor(private readonly db: PgDb) {}

  /**
   * Each pair's `delivered` comes as its recipient's server answers, in bursts: the marks of one turn are one
   * statement and one commit (PerTurn, a key once a statement). A mark is made only on the revision it
   * names, from `accepted`: true when it made it.
   */
  private readonly delivered = new PerTurn<DeliveredMark, boolean>(
    async (marks) => {
      const r = await this.db.query<{ outgoing_key: string }>(
        prepared(
          `UPDATE dm_delivery_state d SET state = 'delivered', next_attempt_at_ms = NULL, lease_until_ms = NULL,
             receipt_json = u.proof, row_version = d.row_version + 1, updated_at_ms = u.now_ms
           FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[]) AS u(k, rev, re, now_ms, proof)
           WHERE d.outgoing_key = u.k AND d.state = 'accepted' AND d.revision_time_ms = u.rev
             AND d.reencrypted_at_ms = u.re
           RETURNING d.outgoing_key`,
          [
            marks.map((m) => m.outgoingKey),
            marks.map((m) => m.rev.revisionTimeMs),
            marks.map((m) => m.rev.reencryptedAtMs),
            marks.map((m) => m.nowMs),
            marks.map((m) => m.proof),
          ],
        ),
      );
      const made = new Set(r.rows.map((row) => row.outgoing_key));
      return marks.map((m) => made.has(m.outgoingKey));
    },
    (m) => m.outgoingKey,
  );

  async getDelivery(outgoingKey: string): Promise<DeliveryRow | null> {
    const r = await this.db.query<DeliveryDbRow>('SELECT * FROM dm_delivery_state WHERE outgoing_key = $1', [
      outgoingKey,
    ]);
    const row = r.rows[0];
    return row ? toDeliveryRow(row) : null;
  }

  async dueDeliveries(nowMs: number, limit: number): Promise<DeliveryRow[]> {
    // The partial index dm_delivery_state_due serves this (state = 'accepted', by next_attempt_at_ms).
    const r = await this.db.query<DeliveryDbRow>(
      `SELECT * FROM dm_delivery_state
       WHERE state = 'accepted' AND next_attempt_at_ms <= $1 AND (lease_until_ms IS NULL OR lease_until_ms <= $1)
       ORDER BY next_attempt_at_ms LIMIT $2`,
      [nowMs, limit],
    );
    return r.rows.map(toDeliveryRow);
  }

  async claimDelivery(outgoingKey: string, rowVersion: number, leaseUntilMs: number): Promise<DeliveryRow | null> {
    const r = await this.db.query<DeliveryDbRow>(
      `UPDATE dm_delivery_state SET lease_until_ms = $1, row_version = row_version + 1
       WHERE outgoing_key = $2 AND row_version = $3 AND state = 'accepted' RETURNING *`,
      [leaseUntilMs, outgoingKey, rowVersion],
    );
    const row = r.rows[0];
    return row ? toDeliveryRow(row) : null;
  }

  async finishDelivery(outgoingKey: string, rowVersion: number, u: DeliveryUpdate, nowMs: number): Promise<boolean> {
    const r = await this.db.query(
      `UPDATE dm_delivery_state SET state = $1, attempt = $2, next_attempt_at_ms = $3, last_error = $4,
         lease_until_ms = NULL, receipt_json = $8, row_version = row_version + 1, updated_at_ms = $5
       WHERE outgoing_key = $6 AND row_version = $7`,
      [u.state, u.attempt, u.nextAttemptAtMs, u.lastError, nowMs, outgoingKey, rowVersion, proofJson(u.proof)],
    );
    return r.rowCount === 1;
  }

  markDelivered(
    outgoingKey: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
    proof: DeliveryReceipt | null,
  ): Promise<boolean> {
    return this.delivered.call({ outgoingKey, rev, nowMs, proof: proofJson(proof) });
  }

  async setDeliveryProof(
    outgoingKey: string,
    rev: { revisionTimeMs: number; reencryptedAtMs: number },
    proof: DeliveryReceipt | null,
  ): Promise<boolean> {
    const r = await this.db.query(
      `UPDATE dm_delivery_state SET receipt_json = $1
       WHERE outgoing_key = $2 AND state = 'delivered' AND revision_time_ms = $3 AND reencrypted_at_ms = $4`,
      [proofJson(proof), outgoingKey, rev.revisionTimeMs, rev.reencryptedAtMs],
    );
    return r.rowCount === 1;
  }

  async wakeDeliveriesFor(serverLogin: string, nowMs: number, acceptedBeforeMs: number): Promise<number> {
    const r = await this.db.query(
      `UPDATE dm_delivery_state SET next_attempt_at_ms = $1, row_version = row_version + 1
       WHERE state = 'accepted' AND next_attempt_at_ms > $1 AND accepted_at_ms <= $2
         AND recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = $3)`,
      [nowMs, acceptedBeforeMs, serverLogin],
    );
    return r.rowCount ?? 0;
  }

  async countAcceptedFor(serverLogin: string): Promise<number> {
    const r = await this.db.query<{ n: number }>(
      `SELECT COUNT(*) AS n FROM dm_delivery_state WHERE state = 'accepted'
         AND recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = $1)`,
      [serverLogin],
    );
    return r.rows[0]?.n ?? 0;
  }

  async countDeliveriesByState(): Promise<Record<DeliveryState, number>> {
    const r = await this.db.query<{ state: DeliveryState; n: number }>(
      'SELECT state, COUNT(*) AS n FROM dm_delivery_state GROUP BY state',
    );
    const out: Record<DeliveryState, number> = { accepted: 0, delivered: 0, failed: 0 };
    for (const row of r.rows) out[row.state] = row.n;
    return out;
  }

  async listDeliveries(state: DeliveryState, limit: number): Promise<DeliveryRow[]> {
    const r = await this.db.query<DeliveryDbRow>(
      'SELECT * FROM dm_delivery_state WHERE state = $1 ORDER BY accepted_at_ms DESC LIMIT $2',
      [state, limit],
    );
    return r.rows.map(toDeliveryRow);
  }
}
