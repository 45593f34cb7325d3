/**
 * User chains on PostgreSQL (docs/protocol.md §14). Every append and replacement first takes the row lock of the
 * one chain_seq row, so appends are serialised and globalSeq grows in commit order across processes (decision 43).
 */
import type pg from 'pg';
import { chainUpserts } from '../chain-sql.js';
import { chainLink, holdsIndex } from '../rules.js';
import type { ChainBlockDbRow, ChainHeadDbRow } from '../rows.js';
import { CHAIN_BLOCK_COLUMNS, CHAIN_HEAD_COLUMNS, chainBlockOf, chainHeadOf } from '../rows.js';
import type {
  AppendBlockResult,
  ChainBlockInput,
  ChainBlockRow,
  ChainHead,
  ChainStore,
  PartnerAck,
  ResyncMarker,
} from '../types.js';
import type { PgDb, Queryable } from './db.js';

const UPSERT = chainUpserts((n) => `$${n}`);

async function headIn(q: Queryable, login: string): Promise<ChainHead | null> {
  const r = await q.query<ChainHeadDbRow>(`SELECT ${CHAIN_HEAD_COLUMNS} FROM chain_heads WHERE login = $1`, [login]);
  return chainHeadOf(r.rows[0]);
}

async function blockSeqIn(q: Queryable, login: string, index: number): Promise<{ hash: string; seq: number } | null> {
  const r = await q.query<{ hash: string; global_seq: number }>(
    'SELECT hash, global_seq FROM chain_blocks WHERE login = $1 AND idx = $2',
    [login, index],
  );
  const row = r.rows[0];
  return row ? { hash: row.hash, seq: row.global_seq } : null;
}

/** Takes the counter row's lock and the next n values; answers the last. */
async function nextSeq(c: pg.ClientBase, n: number): Promise<number> {
  const r = await c.query<{ value: number }>(UPSERT.nextSeq, [n]);
  return r.rows[0]!.value;
}

async function insertBlocks(c: pg.ClientBase, blocks: readonly ChainBlockInput[], firstSeq: number): Promise<void> {
  // In slices, so one statement never carries more than a few MB of parameters.
  for (let i = 0; i < blocks.length; i += 100) {
    const slice = blocks.slice(i, i + 100);
    await c.query(
      `INSERT INTO chain_blocks (login, idx, hash, time_ms, global_seq, block)
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bytea[])`,
      [
        slice.map((b) => b.login),
        slice.map((b) => b.index),
        slice.map((b) => b.hash),
        slice.map((b) => b.timeMs),
        slice.map((_, k) => firstSeq + i + k),
        slice.map((b) => Buffer.from(b.bytes)),
      ],
    );
  }
}

async function setHead(c: pg.ClientBase, h: ChainHead): Promise<void> {
  await c.query(UPSERT.setHead, [h.login, h.index, h.hash, h.timeMs, h.globalSeq]);
}

const markerOf = (r: { login: string; source: string; started_at_ms: number }): ResyncMarker => ({
  login: r.login,
  source: r.source,
  startedAtMs: r.started_at_ms,
});

export class PgChainStore implements ChainStore {
  constructor(private readonly db: PgDb) {}

  head(login: string): Promise<ChainHead | null> {
    return headIn(this.db, login);
  }

  async blocks(login: string, fromIndex: number, limit: number): Promise<ChainBlockRow[]> {
    const r = await this.db.query<ChainBlockDbRow>(
      `SELECT ${CHAIN_BLOCK_COLUMNS} FROM chain_blocks WHERE login = $1 AND idx >= $2 ORDER BY idx LIMIT $3`,
      [login, fromIndex, limit],
    );
    return r.rows.map(chainBlockOf);
  }

  async hashAt(login: string, index: number): Promise<string | null> {
    return (await blockSeqIn(this.db, login, index))?.hash ?? null;
  }

  async append(block: ChainBlockInput): Promise<AppendBlockResult> {
    // A block held already (partners push the same block more than once) is answered without the counter's lock.
    const held = await blockSeqIn(this.db, block.login, block.index);
    if (held?.hash === block.hash)
      return { link: 'known', head: await headIn(this.db, block.login), globalSeq: held.seq };
    return this.db.tx(async (c) => {
      // The counter row first: its lock orders every append, so the head read below cannot move until COMMIT.
      const seq = await nextSeq(c, 1);
      const head = await headIn(c, block.login);
      const held = holdsIndex(head, block.index) ? await blockSeqIn(c, block.login, block.index) : null;
      const link = chainLink(head, block, held?.hash ?? null);
      if (link === 'known') return { link, head, globalSeq: held!.seq };
      if (link !== 'stored') return { link, head, globalSeq: null };
      await insertBlocks(c, [block], seq);
      const next = { login: block.login, index: block.index, hash: block.hash, timeMs: block.timeMs, globalSeq: seq };
      await setHead(c, next);
      return { link, head: next, globalSeq: seq };
    });
  }

  replace(login: string, blocks: readonly ChainBlockInput[]): Promise<{ replaced: ChainHead | null; head: ChainHead }> {
    return this.db.tx(async (c) => {
      const last = await nextSeq(c, blocks.length);
      const replaced = await headIn(c, login);
      await c.query('DELETE FROM chain_blocks WHERE login = $1', [login]);
      await insertBlocks(c, blocks, last - blocks.length + 1);
      const top = blocks.at(-1)!;
      const head = { login, index: top.index, hash: top.hash, timeMs: top.timeMs, globalSeq: last };
      await setHead(c, head);
      await c.query('DELETE FROM chain_resync WHERE login = $1', [login]);
      return { replaced, head };
    });
  }

  async headsAfter(afterGlobalSeq: number, limit: number): Promise<ChainHead[]> {
    const r = await this.db.query<ChainHeadDbRow>(
      `SELECT ${CHAIN_HEAD_COLUMNS} FROM chain_heads WHERE global_seq > $1 ORDER BY global_seq LIMIT $2`,
      [afterGlobalSeq, limit],
    );
    return r.rows.map((row) => chainHeadOf(row)!);
  }

  async markResync(marker: ResyncMarker): Promise<ResyncMarker> {
    const r = await this.db.query<{ login: string; source: string; started_at_ms: number }>(
      `WITH ins AS (
         INSERT INTO chain_resync (login, source, started_at_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
         RETURNING login, source, started_at_ms)
       SELECT * FROM ins UNION ALL SELECT login, source, started_at_ms FROM chain_resync WHERE login = $1`,
      [marker.login, marker.source, marker.startedAtMs],
    );
    return markerOf(r.rows[0]!);
  }

  async resyncMarkers(): Promise<ResyncMarker[]> {
    const r = await this.db.query<{ login: string; source: string; started_at_ms: number }>(
      'SELECT login, source, started_at_ms FROM chain_resync ORDER BY login',
    );
    return r.rows.map(markerOf);
  }

  async clearResync(login: string): Promise<void> {
    await this.db.query('DELETE FROM chain_resync WHERE login = $1', [login]);
  }

  async partnerCursor(partner: string): Promise<number> {
    const r = await this.db.query<{ after_global_seq: number }>(
      'SELECT after_global_seq FROM chain_partner_cursors WHERE partner = $1',
      [partner],
    );
    return r.rows[0]?.after_global_seq ?? 0;
  }

  async setPartnerCursor(partner: string, afterGlobalSeq: number): Promise<void> {
    await this.db.query(UPSERT.setPartnerCursor, [partner, afterGlobalSeq]);
  }

  async ackPartner(ack: PartnerAck): Promise<void> {
    await this.db.query(UPSERT.ackPartner, [ack.partner, ack.login, ack.index, ack.hash, ack.ackedAtMs]);
  }

  async partnerAcks(login: string): Promise<PartnerAck[]> {
    const r = await this.db.query<{
      partner: string;
      login: string;
      head_index: number;
      head_hash: string;
      acked_at_ms: number;
    }>(
      'SELECT partner, login, head_index, head_hash, acked_at_ms FROM chain_partner_acks WHERE login = $1 ORDER BY partner',
      [login],
    );
    return r.rows.map((row) => ({
      partner: row.partner,
      login: row.login,
      index: row.head_index,
      hash: row.head_hash,
      ackedAtMs: row.acked_at_ms,
    }));
  }
}
