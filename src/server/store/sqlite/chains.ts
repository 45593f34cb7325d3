/** User chains on SQLite (docs/protocol.md §14): appends and replacements under the one writer. */
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
import { SqliteArea } from './db.js';

const UPSERT = chainUpserts(() => '?');

export class SqliteChainStore extends SqliteArea implements ChainStore {
  async head(login: string): Promise<ChainHead | null> {
    return this.headNow(login);
  }

  private headNow(login: string): ChainHead | null {
    return chainHeadOf(
      this.sql(`SELECT ${CHAIN_HEAD_COLUMNS} FROM chain_heads WHERE login = ?`).get(login) as ChainHeadDbRow,
    );
  }

  private blockSeqNow(login: string, index: number): { hash: string; seq: number } | null {
    const r = this.sql('SELECT hash, global_seq FROM chain_blocks WHERE login = ? AND idx = ?').get(login, index) as
      { hash: string; global_seq: number } | undefined;
    return r ? { hash: r.hash, seq: r.global_seq } : null;
  }

  async blocks(login: string, fromIndex: number, limit: number): Promise<ChainBlockRow[]> {
    const rows = this.sql(
      `SELECT ${CHAIN_BLOCK_COLUMNS} FROM chain_blocks WHERE login = ? AND idx >= ? ORDER BY idx LIMIT ?`,
    ).all(login, fromIndex, limit) as ChainBlockDbRow[];
    return rows.map(chainBlockOf);
  }

  async hashAt(login: string, index: number): Promise<string | null> {
    return this.blockSeqNow(login, index)?.hash ?? null;
  }

  /** The next globalSeq values: n of them, the last one answered. */
  private nextSeq(n: number): number {
    return (this.sql(UPSERT.nextSeq).get(n) as { value: number }).value;
  }

  private insertBlock(b: ChainBlockInput, seq: number): void {
    this.sql('INSERT INTO chain_blocks (login, idx, hash, time_ms, global_seq, block) VALUES (?, ?, ?, ?, ?, ?)').run(
      b.login,
      b.index,
      b.hash,
      b.timeMs,
      seq,
      Buffer.from(b.bytes),
    );
  }

  private setHead(h: ChainHead): void {
    this.sql(UPSERT.setHead).run(h.login, h.index, h.hash, h.timeMs, h.globalSeq);
  }

  append(block: ChainBlockInput): Promise<AppendBlockResult> {
    return this.db.write(() => {
      const head = this.headNow(block.login);
      const held = holdsIndex(head, block.index) ? this.blockSeqNow(block.login, block.index) : null;
      const link = chainLink(head, block, held?.hash ?? null);
      if (link === 'known') return { link, head, globalSeq: held!.seq };
      if (link !== 'stored') return { link, head, globalSeq: null };
      const globalSeq = this.nextSeq(1);
      this.insertBlock(block, globalSeq);
      const next = { login: block.login, index: block.index, hash: block.hash, timeMs: block.timeMs, globalSeq };
      this.setHead(next);
      return { link, head: next, globalSeq };
    });
  }

  replace(login: string, blocks: readonly ChainBlockInput[]): Promise<{ replaced: ChainHead | null; head: ChainHead }> {
    return this.db.write(() => {
      const replaced = this.headNow(login);
      const last = this.nextSeq(blocks.length);
      this.sql('DELETE FROM chain_blocks WHERE login = ?').run(login);
      blocks.forEach((b, i) => this.insertBlock(b, last - blocks.length + 1 + i));
      const top = blocks.at(-1)!;
      const head = { login, index: top.index, hash: top.hash, timeMs: top.timeMs, globalSeq: last };
      this.setHead(head);
      this.sql('DELETE FROM chain_resync WHERE login = ?').run(login);
      return { replaced, head };
    });
  }

  async headsAfter(afterGlobalSeq: number, limit: number): Promise<ChainHead[]> {
    const rows = this.sql(
      `SELECT ${CHAIN_HEAD_COLUMNS} FROM chain_heads WHERE global_seq > ? ORDER BY global_seq LIMIT ?`,
    ).all(afterGlobalSeq, limit) as ChainHeadDbRow[];
    return rows.map((r) => chainHeadOf(r)!);
  }

  markResync(marker: ResyncMarker): Promise<ResyncMarker> {
    return this.db.write(() => {
      this.sql('INSERT INTO chain_resync (login, source, started_at_ms) VALUES (?, ?, ?) ON CONFLICT DO NOTHING').run(
        marker.login,
        marker.source,
        marker.startedAtMs,
      );
      const r = this.sql('SELECT login, source, started_at_ms FROM chain_resync WHERE login = ?').get(marker.login) as {
        login: string;
        source: string;
        started_at_ms: number;
      };
      return { login: r.login, source: r.source, startedAtMs: r.started_at_ms };
    });
  }

  async resyncMarkers(): Promise<ResyncMarker[]> {
    const rows = this.sql('SELECT login, source, started_at_ms FROM chain_resync ORDER BY login').all() as {
      login: string;
      source: string;
      started_at_ms: number;
    }[];
    return rows.map((r) => ({ login: r.login, source: r.source, startedAtMs: r.started_at_ms }));
  }

  clearResync(login: string): Promise<void> {
    return this.db.write(() => {
      this.sql('DELETE FROM chain_resync WHERE login = ?').run(login);
    });
  }

  async partnerCursor(partner: string): Promise<number> {
    const r = this.sql('SELECT after_global_seq FROM chain_partner_cursors WHERE partner = ?').get(partner) as
      { after_global_seq: number } | undefined;
    return r?.after_global_seq ?? 0;
  }

  setPartnerCursor(partner: string, afterGlobalSeq: number): Promise<void> {
    return this.db.write(() => {
      this.sql(UPSERT.setPartnerCursor).run(partner, afterGlobalSeq);
    });
  }

  ackPartner(ack: PartnerAck): Promise<void> {
    return this.db.write(() => {
      this.sql(UPSERT.ackPartner).run(ack.partner, ack.login, ack.index, ack.hash, ack.ackedAtMs);
    });
  }

  async partnerAcks(login: string): Promise<PartnerAck[]> {
    const rows = this.sql(
      'SELECT partner, login, head_index, head_hash, acked_at_ms FROM chain_partner_acks WHERE login = ? ORDER BY partner',
    ).all(login) as { partner: string; login: string; head_index: number; head_hash: string; acked_at_ms: number }[];
    return rows.map((r) => ({
      partner: r.partner,
      login: r.login,
      index: r.head_index,
      hash: r.head_hash,
      ackedAtMs: r.acked_at_ms,
    }));
  }
}
