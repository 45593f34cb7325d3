/** Delivery rows on PostgreSQL (dm_delivery_state). Every write is a conditional update (types.ts). */
import type { DeliveryState } from '../../../protocol/ops.js';
import type { DeliveryDbRow } from '../rows.js';
import { proofJson, toDeliveryRow } from '../rows.js';
import type { DeliveryReceipt } from '../../../protocol/receipt.js';
import type { DeliveryRow, DeliveryStore, DeliveryUpdate } from '../types.js';
import type { PgDb } from './db.js';
import { prepared } from './db.js';
import { PerTurn, rowsByKey } from './per-turn.js';

interface Claim {
  outgoingKey: string;
  rowVersion: number;
  leaseUntilMs: number;
}

interface Finish {
  outgoingKey: string;
  rowVersion: number;
  update: DeliveryUpdate;
  nowMs: number;
}

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

  /**
   * The rows asked for in one turn are one statement (PerTurn): a GetDmDeliveryStatus of a replication page
   * asks for 500 at once, which were 500 round trips.
   */
  private readonly rows = new PerTurn<string, DeliveryRow | null>((keys) =>
    rowsByKey(this.db, 'dm_delivery_state', keys, toDeliveryRow),
  );

  getDelivery(outgoingKey: string): Promise<DeliveryRow | null> {
    return this.rows.call(outgoingKey);
  }

  getDeliveries(outgoingKeys: readonly string[]): Promise<(DeliveryRow | null)[]> {
    return outgoingKeys.length === 0
      ? Promise.resolve([])
      : rowsByKey(this.db, 'dm_delivery_state', outgoingKeys, toDeliveryRow);
  }

  async dueDeliveries(nowMs: number, limit: number): Promise<DeliveryRow[]> {
    // The partial index dm_delivery_state_due serves this (state = 'accepted', by next_attempt_at_ms).
    const r = await this.db.query<DeliveryDbRow>(
      prepared(
        `SELECT * FROM dm_delivery_state
         WHERE state = 'accepted' AND next_attempt_at_ms <= $1 AND (lease_until_ms IS NULL OR lease_until_ms <= $1)
         ORDER BY next_attempt_at_ms LIMIT $2`,
        [nowMs, limit],
      ),
    );
    return r.rows.map(toDeliveryRow);
  }

  /**
   * A backlog's attempts (a peer back after an outage) claim and finish rows in bursts: the claims of one
   * turn are one statement, and so are the finishes (PerTurn). Each keeps its compare-and-set on the row
   * version; two calls of one row are served one statement after the other, in the order asked.
   */
  private readonly claims = new PerTurn<Claim, DeliveryRow | null>(
    async (claims) => {
      const r = await this.db.query<DeliveryDbRow>(
        prepared(
          `UPDATE dm_delivery_state d SET lease_until_ms = u.lease, row_version = d.row_version + 1
           FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(k, v, lease)
           WHERE d.outgoing_key = u.k AND d.row_version = u.v AND d.state = 'accepted'
           RETURNING d.*`,
          [claims.map((c) => c.outgoingKey), claims.map((c) => c.rowVersion), claims.map((c) => c.leaseUntilMs)],
        ),
      );
      const claimed = new Map(r.rows.map((row) => [row.outgoing_key, toDeliveryRow(row)]));
      return claims.map((c) => claimed.get(c.outgoingKey) ?? null);
    },
    (c) => c.outgoingKey,
  );

  private readonly finishes = new PerTurn<Finish, boolean>(
    async (finishes) => {
      const r = await this.db.query<{ outgoing_key: string }>(
        prepared(
          `UPDATE dm_delivery_state d SET state = u.state, attempt = u.attempt, next_attempt_at_ms = u.next,
             last_error = u.err, lease_until_ms = NULL, receipt_json = u.proof, row_version = d.row_version + 1,
             updated_at_ms = u.now_ms
           FROM unnest($1::text[], $2::bigint[], $3::text[], $4::integer[], $5::bigint[], $6::text[], $7::text[],
             $8::bigint[]) AS u(k, v, state, attempt, next, err, proof, now_ms)
           WHERE d.outgoing_key = u.k AND d.row_version = u.v
           RETURNING d.outgoing_key`,
          [
            finishes.map((f) => f.outgoingKey),
            finishes.map((f) => f.rowVersion),
            finishes.map((f) => f.update.state),
            finishes.map((f) => f.update.attempt),
            finishes.map((f) => f.update.nextAttemptAtMs),
            finishes.map((f) => f.update.lastError),
            finishes.map((f) => proofJson(f.update.proof)),
            finishes.map((f) => f.nowMs),
          ],
        ),
      );
      const made = new Set(r.rows.map((row) => row.outgoing_key));
      return finishes.map((f) => made.has(f.outgoingKey));
    },
    (f) => f.outgoingKey,
  );

  claimDelivery(outgoingKey: string, rowVersion: number, leaseUntilMs: number): Promise<DeliveryRow | null> {
    return this.claims.call({ outgoingKey, rowVersion, leaseUntilMs });
  }

  finishDelivery(outgoingKey: string, rowVersion: number, update: DeliveryUpdate, nowMs: number): Promise<boolean> {
    return this.finishes.call({ outgoingKey, rowVersion, update, nowMs });
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

  async wakeDeliveriesFor(serverLogin: string, nowMs: number): Promise<number> {
    const r = await this.db.query(
      `UPDATE dm_delivery_state SET next_attempt_at_ms = $1, row_version = row_version + 1
       WHERE state = 'accepted' AND next_attempt_at_ms > $1
         AND recipient_login IN (SELECT login FROM user_access_servers_current WHERE server_login = $2)`,
      [nowMs, serverLogin],
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
