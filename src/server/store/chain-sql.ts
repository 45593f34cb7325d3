/**
 * The upserts of the chain stores (docs/protocol.md §14), one text for both dialects: `param(n)` writes the n-th
 * parameter as the dialect does (SQLite `?`, PostgreSQL `$n`), so a changed column or conflict rule changes both.
 */
import { CHAIN_HEAD_COLUMNS } from './rows.js';

export interface ChainUpserts {
  /** chain_seq grows by $1 and answers its new value (on PostgreSQL the counter row's lock, decision 43). */
  nextSeq: string;
  /** chain_heads: login, head_index, head_hash, time_ms, global_seq (CHAIN_HEAD_COLUMNS). */
  setHead: string;
  /** chain_partner_cursors: partner, after_global_seq. */
  setPartnerCursor: string;
  /** chain_partner_acks: partner, login, head_index, head_hash, acked_at_ms; an ack never moves back. */
  ackPartner: string;
}

export function chainUpserts(param: (n: number) => string): ChainUpserts {
  const values = (n: number) => Array.from({ length: n }, (_, i) => param(i + 1)).join(', ');
  return {
    nextSeq: `INSERT INTO chain_seq (id, value) VALUES (1, ${values(1)})
      ON CONFLICT (id) DO UPDATE SET value = chain_seq.value + excluded.value RETURNING value`,
    setHead: `INSERT INTO chain_heads (${CHAIN_HEAD_COLUMNS}) VALUES (${values(5)})
      ON CONFLICT (login) DO UPDATE SET head_index = excluded.head_index, head_hash = excluded.head_hash,
        time_ms = excluded.time_ms, global_seq = excluded.global_seq`,
    setPartnerCursor: `INSERT INTO chain_partner_cursors (partner, after_global_seq) VALUES (${values(2)})
      ON CONFLICT (partner) DO UPDATE SET after_global_seq = excluded.after_global_seq`,
    ackPartner: `INSERT INTO chain_partner_acks (partner, login, head_index, head_hash, acked_at_ms)
      VALUES (${values(5)})
      ON CONFLICT (partner, login) DO UPDATE SET head_index = excluded.head_index, head_hash = excluded.head_hash,
        acked_at_ms = excluded.acked_at_ms WHERE excluded.head_index >= chain_partner_acks.head_index`,
  };
}
