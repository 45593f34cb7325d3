/**
 * User chains on the server (docs/protocol.md §14): AddBlock, GetChain and ChainEvent for users; ReceiveBlock and
 * GetChainHeads between partners; the push of new blocks to every partner, the backfill that pulls what partners
 * hold beyond our heads, and the resync of a diverged chain from its owner's first access server.
 */
import { decodeBase64With } from '../../protocol/blob.js';
import type { Block } from '../../protocol/block.js';
import { decodeBlock } from '../../protocol/block.js';
import { toBase64, toHex } from '../../protocol/bytes.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { eventFrame } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import type { ChainEventPayload, OpAnswer, OpPayload } from '../../protocol/ops.js';
import { DEFAULT_CHAIN_PAGE, MAX_CHAIN_HEADS, MAX_CHAIN_PAGE } from '../../protocol/ops.js';
import { sha256 } from '../crypto/sha256.js';
import type { BackgroundQueue } from '../background/queue.js';
import { untilAborted } from '../background/queue.js';
import type { Clock } from '../clock.js';
import type { Fanout } from '../cluster/fanout.js';
import type { Config } from '../config/config.js';
import type { BulkVerifier, VerifyJob } from '../crypto/verify-pool.js';
import { inlineBulkVerifier } from '../crypto/verify-pool.js';
import { ConfigError } from '../config/config.js';
import type { Directory } from '../directory/service.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import { KeyedMutex } from '../keyed-mutex.js';
import { eachAtOnce } from '../at-once.js';
import type { Logger } from '../log.js';
import type { Counter, Metrics } from '../metrics.js';
import type { Session, UserSession } from '../sessions.js';
import { chainLink, takeWithinBytes } from '../store/rules.js';
import type { ChainBlockInput, ChainHead, ChainLink, ResyncMarker, Store } from '../store/types.js';

export interface ChainDeps {
  config: Pick<Config, 'serverLogin' | 'chainPartners' | 'peers' | 'maxTimeSkewMs' | 'retryScheduleMs'>;
  clock: Clock;
  store: Pick<Store, 'chains' | 'directory'>;
  directory: Pick<Directory, 'lookup'>;
  fanout: Pick<Fanout, 'sendToUser'>;
  verifier: SignatureVerifier;
  /** The verify pool: a pulled page's signatures are checked in one call, off the event loop. */
  bulkVerifier: BulkVerifier;
  peers: PeerCaller;
  /** The calling server of a server session (docs/protocol.md §5.4). */
  sourceOf(session: Session, sourceServerLogin: string | undefined): string | null;
  log: Logger;
  metrics: Metrics;
  background: BackgroundQueue;
}

/** What the chain part of one replication cycle did (docs/protocol.md §14.3). */
export interface ChainCycleSummary {
  partners: number;
  blocksPulled: number;
  resyncs: number;
  errors: number;
}

/** What /debug/chains?login= shows. */
export interface ChainDebug {
  login: string;
  head: { index: number; hash: string; globalSeq: number } | null;
  partners: { partner: string; ackedIndex: number | null; ackedHash: string | null; ackedAtMs: number | null }[];
  resync: ResyncMarker | null;
}

/**
 * Blocks a push reads from its chain's tail at a time (each is then sent by its own ReceiveBlock): with PUSH_LANES
 * chains in hand, at most about 67 MB of blocks are held for one partner.
 */
const PUSH_PAGE = 16;
/** Block bytes in one GetChain answer (at least one block): base64 makes it about 2.7 MB of JSON. */
const MAX_CHAIN_PAGE_BYTES = 2_000_000;
/**
 * Chains sent to one partner at the same time (their blocks share the partner's commits). Each waits a round trip
 * per block, so between distant servers the lanes set how fast blocks are mirrored (docs/protocol.md decision 58).
 */
const PUSH_LANES = 64;
/**
 * Chains a backfill catches up at once from one partner, each with one GetChain in flight: their answers, at most
 * about 2.7 MB of JSON each, stay under the 16 MiB a partner's socket may hold unsent before the partner cuts it off
 * as a slow reader (`wsMaxBufferedBytes`).
 */
const CHAINS_AT_ONCE = 4;

/** SHA-256 of a block's whole bytes as hex: node:crypto on the server (docs/protocol.md §14.1). */
const serverBlockHash = (bytes: Uint8Array): string => sha256(bytes, 'hex');

/** A block from a payload: TOO_LARGE before decoding, BAD_BLOB for anything the decoder refuses. */
const decodeBlockB64 = (b64: string): Block => decodeBase64With(b64, decodeBlock, 'block');

/** A decoded block as the store takes it. */
export const blockInput = (block: Block): ChainBlockInput => ({
  login: block.login,
  index: block.index,
  prevHash: toHex(block.prevHash),
  hash: serverBlockHash(block.bytes),
  timeMs: block.timeMs,
  bytes: block.bytes,
});

/** A block as checkSigned took it, or the error it threw for it. */
type Checked = { input: ChainBlockInput } | { err: unknown };

/** The checked block's input, or its error thrown: a page's bad block is refused where the caller meets it. */
function accepted(c: Checked): ChainBlockInput {
  if ('err' in c) throw c.err;
  return c.input;
}

const headDetails = (head: ChainHead | null) => ({ headIndex: head?.index ?? -1, headHash: head?.hash ?? null });

/** A peer could not answer now (unreachable, timed out, overloaded): worth another try later. */
function retryable(err: unknown): boolean {
  if (err instanceof ShineError) return err.status >= 500 || err.status === 429;
  return true;
}

/** Where a stored block came from: a user, a partner's push, our pull, or a resync. */
type Via = 'add' | 'receive' | 'pull';

export class ChainService {
  /** Per partner: the chains to push and the first index to push from. */
  private readonly outgoing = new Map<string, Map<string, number>>();
  /** Per partner: the senders running, and the chains one of them is sending now. */
  private readonly lanes = new Map<string, number>();
  private readonly sending = new Map<string, Set<string>>();
  /** Per partner: the senders waiting out a retry (they take no queued chain meanwhile). */
  private readonly sleeping = new Map<string, number>();
  /** Per partner and login: the last block it acknowledged (debug; persisted after each push run). */
  private readonly acked = new Map<string, Map<string, { index: number; hash: string; atMs: number }>>();
  /** One catch-up or resync of a chain at a time in this process. */
  private readonly chainLock = new KeyedMutex();
  /** Chains replaced by a resync since start (a cycle reports its own share). */
  private resyncsDone = 0;
  private readonly stored: Counter;
  private readonly pushed: Counter;
  private readonly pulled: Counter;
  private readonly resyncs: Counter;
  private readonly gaps: Counter;

  constructor(private readonly deps: ChainDeps) {
    const m = deps.metrics;
    this.stored = m.counter('chain_blocks_stored_total', 'Chain blocks stored, by how they came (add, receive, pull)', [
      'via',
    ]);
    this.pushed = m.counter('chain_blocks_pushed_total', 'Chain blocks a partner acknowledged (ReceiveBlock)', [
      'partner',
    ]);
    this.pulled = m.counter('chain_blocks_pulled_total', 'Chain blocks stored by backfill from a partner', ['partner']);
    this.resyncs = m.counter('chain_resyncs_total', 'Chain resyncs from the authoritative server, by result', [
      'result',
    ]);
    this.gaps = m.counter(
      'chain_gaps_total',
      'CHAIN_GAP answers: given to a partner (answered) or met while pushing (received)',
      ['side'],
    );
  }

  private get partners(): readonly string[] {
    return this.deps.config.chainPartners;
  }

  /** Every partner must be a known peer (docs/protocol.md §14.3): checked at start-up. */
  async checkPartners(): Promise<void> {
    const { config, store } = this.deps;
    for (const partner of this.partners) {
      const known =
        config.peers.some((p) => p.serverLogin === partner) || (await store.directory.getServer(partner)) !== null;
      if (!known) throw new ConfigError('chainPartners', `${partner} is not a known peer server`);
    }
  }

  /** Resumes the resyncs a crash left (docs/protocol.md §14.3, start-up recovery), in the background. */
  start(): void {
    this.deps.background.run('chain resyncs left at start-up', {}, async (signal) => {
      for (const marker of await this.deps.store.chains.resyncMarkers()) {
        if (signal.aborted) return;
        this.deps.log.info('chain resync resumed at start-up', { ...marker });
        await this.resync(marker).catch((err: unknown) =>
          this.deps.log.warn('chain resync failed; the next cycle retries', { login: marker.login, err: String(err) }),
        );
      }
    });
  }

  // ---- users ----

  async addBlock(p: OpPayload<'AddBlock'>, session: UserSession): Promise<OpAnswer<'AddBlock'>> {
    const block = decodeBlockB64(p.blockB64);
    if (block.login !== session.login)
      throw new ShineError('NOT_SENDER', 'a session adds blocks to its own chain only');
    const input = await this.checkSigned(block);
    const result = await this.deps.store.chains.append(input);
    if (result.link !== 'stored' && result.link !== 'known') {
      if (result.link === 'time') throw new ShineError('BAD_TIME', "timeMs is before the previous block's");
      throw new ShineError('CHAIN_CONFLICT', `the block does not follow the head (${result.link})`, {
        details: headDetails(result.head),
      });
    }
    if (result.link === 'stored') {
      this.stored.inc({ via: 'add' });
      const event: ChainEventPayload = {
        login: input.login,
        index: input.index,
        blockHash: input.hash,
        blockB64: p.blockB64,
      };
      this.deps.fanout.sendToUser(input.login, eventFrame('ChainEvent', event), session.id);
      this.schedulePush(input.login, input.index, null);
    }
    return { login: input.login, index: input.index, blockHash: input.hash, globalSeq: result.globalSeq! };
  }

  async getChain(p: OpPayload<'GetChain'>): Promise<OpAnswer<'GetChain'>> {
    const limit = Math.min(MAX_CHAIN_PAGE, Math.max(1, p.limit ?? DEFAULT_CHAIN_PAGE));
    const fromIndex = p.fromIndex ?? 0;
    const { chains } = this.deps.store;
    // The head first: items never run past it, so a page is always a prefix of one complete chain.
    const head = await chains.head(p.login);
    const wanted = Math.min(limit, (head?.index ?? -1) - fromIndex + 1);
    const rows = wanted > 0 ? await chains.blocks(p.login, fromIndex, wanted) : [];
    // A page stays far below the 4 MiB frame: blocks of up to 64 KiB fill it long before 500 of them.
    const { items } = takeWithinBytes(rows, limit, MAX_CHAIN_PAGE_BYTES, (r) => r.bytes.length);
    return Object.assign({ login: p.login }, headDetails(head), {
      items: items.map((r) => ({ index: r.index, blockHash: r.hash, blockB64: toBase64(r.bytes) })),
      hasMore: head !== null && items.length > 0 && items.at(-1)!.index < head.index,
    });
  }

  // ---- partners ----

  /** The calling partner of a server op, else 403 NOT_PARTNER. */
  private partnerOf(session: Session, sourceServerLogin: string | undefined): string {
    const source = this.deps.sourceOf(session, sourceServerLogin);
    if (!source || !this.partners.includes(source)) {
      throw new ShineError('NOT_PARTNER', 'the calling server is not a chain partner of this server');
    }
    return source;
  }

  async receiveBlock(p: OpPayload<'ReceiveBlock'>, session: Session): Promise<OpAnswer<'ReceiveBlock'>> {
    const source = this.partnerOf(session, p.sourceServerLogin);
    const block = decodeBlockB64(p.blockB64);
    const input = await this.checkSigned(block);
    const result = await this.appendFrom(input, source, 'receive');
    switch (result.link) {
      case 'stored':
      case 'known':
        return { login: input.login, index: input.index, result: result.link };
      case 'time':
        throw new ShineError('BAD_TIME', "timeMs is before the previous block's");
      case 'gap':
        this.gaps.inc({ side: 'answered' });
        this.deps.background.run('chain backfill after a gap', { login: input.login, partner: source }, (signal) =>
          this.chainLock
            .run(input.login, () => this.catchUp(source, input.login, null, signal))
            .catch((err: unknown) =>
              this.deps.log.warn('chain catch-up after a gap failed; the next cycle retries', {
                login: input.login,
                partner: source,
                err: String(err),
              }),
            ),
        );
        throw new ShineError('CHAIN_GAP', 'blocks before this one are missing here', {
          details: headDetails(result.head),
        });
      default:
        this.deps.background.run('chain divergence', { login: input.login, partner: source }, () =>
          this.chainLock.run(input.login, () => this.diverged(input.login, source)),
        );
        throw new ShineError('CHAIN_DIVERGED', `the block disagrees with this server's chain (${result.link})`, {
          details: headDetails(result.head),
        });
    }
  }

  async getChainHeads(p: OpPayload<'GetChainHeads'>, session: Session): Promise<OpAnswer<'GetChainHeads'>> {
    this.partnerOf(session, p.sourceServerLogin);
    const limit = Math.min(MAX_CHAIN_HEADS, Math.max(1, p.limit ?? MAX_CHAIN_HEADS));
    const heads = await this.deps.store.chains.headsAfter(p.afterGlobalSeq, limit + 1);
    const items = heads.slice(0, limit);
    return {
      items: items.map((h) => ({ login: h.login, headIndex: h.index, headHash: h.hash, globalSeq: h.globalSeq })),
      nextGlobalSeq: items.at(-1)?.globalSeq ?? p.afterGlobalSeq,
      hasMore: heads.length > limit,
    };
  }

  // ---- checks and appends ----

  /** Signature by the login's key from the directory (an unknown user is imported), then the time bound. */
  private async checkSigned(block: Block): Promise<ChainBlockInput> {
    const [checked] = await this.checkBlocks([block], inlineBulkVerifier(this.deps.verifier));
    return accepted(checked!);
  }

  /** checkSigned for a pulled page (base64 blocks): each decoded, every signature checked in one verify-pool call. */
  private checkPage(blocksB64: readonly string[]): Promise<Checked[]> {
    const blocks = blocksB64.map((b64): Block | { err: unknown } => {
      try {
        return decodeBlockB64(b64);
      } catch (err) {
        return { err };
      }
    });
    return this.checkBlocks(blocks, this.deps.bulkVerifier);
  }

  /**
   * checkSigned's checks for many blocks, in its order (owner, signature, time bound), with every signature going to
   * `bulk` in one call; each owner is looked up once per call. Per block its input or the error checkSigned throws.
   */
  private async checkBlocks(blocks: readonly (Block | { err: unknown })[], bulk: BulkVerifier): Promise<Checked[]> {
    const { directory, clock, config } = this.deps;
    const out: Checked[] = [];
    const jobs: VerifyJob[] = [];
    const signed: { at: number; block: Block }[] = [];
    const keys = new Map<string, Uint8Array | null>();
    for (const block of blocks) {
      try {
        if ('err' in block) throw block.err;
        if (!keys.has(block.login)) keys.set(block.login, (await directory.lookup(block.login))?.signKey ?? null);
        const publicKey = keys.get(block.login);
        if (!publicKey) throw new ShineError('USER_NOT_FOUND', `unknown user ${block.login}`);
        jobs.push({ signature: block.signature, message: block.bytes.subarray(0, block.signedLength), publicKey });
        signed.push({ at: out.length, block });
        out.push({ err: null }); // set below, once the signature is checked
      } catch (err) {
        out.push({ err });
      }
    }
    const verified = jobs.length > 0 ? await bulk.verifyMany(jobs) : [];
    const now = clock.now();
    signed.forEach(({ at, block }, k) => {
      if (!verified[k])
        out[at] = {
          err: new ShineError('BAD_SIGNATURE', "the block's signature does not verify with its login's key"),
        };
      else if (block.timeMs > now + config.maxTimeSkewMs)
        out[at] = { err: new ShineError('BAD_TIME', 'timeMs is in the future') };
      else out[at] = { input: blockInput(block) };
    });
    return out;
  }

  /** Appends a block a partner holds; a stored one is pushed on to every other partner. */
  private async appendFrom(
    input: ChainBlockInput,
    source: string,
    via: Via,
  ): Promise<{ link: ChainLink; head: ChainHead | null }> {
    const result = await this.deps.store.chains.append(input);
    if (result.link === 'stored' || result.link === 'known') this.noteAck(source, input.login, input.index, input.hash);
    if (result.link === 'stored') {
      this.stored.inc({ via });
      this.schedulePush(input.login, input.index, source);
    }
    return result;
  }

  private noteAck(partner: string, login: string, index: number, hash: string): void {
    let m = this.acked.get(partner);
    if (!m) this.acked.set(partner, (m = new Map()));
    const prev = m.get(login);
    if (!prev || prev.index <= index) m.set(login, { index, hash, atMs: this.deps.clock.now() });
  }

  // ---- push (docs/protocol.md §14.3) ----

  /** Pushes login's chain from index on to every partner except `except`, in the background. */
  schedulePush(login: string, fromIndex: number, except: string | null): void {
    for (const partner of this.partners) {
      if (partner === except) continue;
      let m = this.outgoing.get(partner);
      if (!m) this.outgoing.set(partner, (m = new Map()));
      m.set(login, Math.min(m.get(login) ?? fromIndex, fromIndex));
      const lanes = this.lanes.get(partner) ?? 0;
      // A lane neither sending nor waiting out a retry is about to take a queued chain: one more starts while the
      // chains a lane could take outnumber those lanes, so a lane waiting for the partner holds up no chain queued
      // behind it. A chain queued again while a lane sends it waits for that lane.
      const sending = this.sending.get(partner);
      let takeable = m.size;
      for (const inHand of sending ?? []) if (m.has(inHand)) takeable--;
      const idle = lanes - (sending?.size ?? 0) - (this.sleeping.get(partner) ?? 0);
      if (lanes < PUSH_LANES && takeable > idle) {
        this.lanes.set(partner, lanes + 1);
        this.deps.background.run('chain push', { partner }, (signal) => this.pushWorker(partner, m, signal));
      }
    }
  }

  /**
   * One sender to partner: takes the queued chains no other sender has in hand, one after another; while the
   * partner cannot be reached, waits out the retry schedule (offsets from the first failure, up to an hour) and
   * then gives up: the partner's backfill fetches what is left.
   */
  private async pushWorker(partner: string, queue: Map<string, number>, signal: AbortSignal): Promise<void> {
    const { clock, config, log } = this.deps;
    let failingSince: number | null = null;
    let attempt = 0;
    let sending = this.sending.get(partner);
    if (!sending) this.sending.set(partner, (sending = new Set()));
    try {
      while (!signal.aborted) {
        const next = [...queue].find(([login]) => !sending.has(login));
        if (!next) return;
        const [login, from] = next;
        queue.delete(login);
        sending.add(login);
        // What the partner acknowledged is not sent again (a CHAIN_GAP answer moves back if it lost it).
        const progress = { next: Math.max(from, (this.acked.get(partner)?.get(login)?.index ?? -1) + 1) };
        try {
          await this.pushChain(partner, login, progress).finally(() => sending.delete(login));
          failingSince = null;
          attempt = 0;
        } catch (err) {
          if (!retryable(err)) {
            log.warn('chain push refused by partner', { partner, login, err: String(err) });
            continue;
          }
          queue.set(login, Math.min(queue.get(login) ?? progress.next, progress.next));
          failingSince ??= clock.now();
          const offset = config.retryScheduleMs[++attempt];
          if (offset === undefined) {
            log.warn('chain push to partner given up; its backfill will fetch the rest', {
              partner,
              chains: queue.size,
              err: String(err),
            });
            queue.clear();
            return;
          }
          const wait = Math.max(0, failingSince + offset - clock.now());
          this.sleeping.set(partner, (this.sleeping.get(partner) ?? 0) + 1);
          try {
            await untilAborted(new Promise<void>((resolve) => clock.setTimer(wait, resolve)), signal);
          } finally {
            this.sleeping.set(partner, this.sleeping.get(partner)! - 1);
          }
        }
      }
    } finally {
      this.lanes.set(partner, (this.lanes.get(partner) ?? 1) - 1);
    }
  }

  /** ReceiveBlock of login's blocks from progress.next to our head; CHAIN_GAP moves back to the partner's head. */
  private async pushChain(partner: string, login: string, progress: { next: number }): Promise<void> {
    const { store, peers, log } = this.deps;
    let last: { index: number; hash: string } | null = null;
    try {
      for (;;) {
        const rows = await store.chains.blocks(login, progress.next, PUSH_PAGE);
        if (rows.length === 0) return;
        for (const row of rows) {
          try {
            await peers.call(partner, 'ReceiveBlock', { blockB64: toBase64(row.bytes) });
          } catch (err) {
            const theirs = err instanceof ShineError ? err.details?.headIndex : undefined;
            if (
              err instanceof ShineError &&
              err.code === 'CHAIN_GAP' &&
              theirs !== undefined &&
              theirs + 1 < row.index
            ) {
              this.gaps.inc({ side: 'received' });
              progress.next = theirs + 1;
              break;
            }
            if (err instanceof ShineError && err.code === 'CHAIN_DIVERGED') {
              log.warn('partner holds another chain', { partner, login, index: row.index });
              return;
            }
            throw err;
          }
          this.pushed.inc({ partner });
          last = { index: row.index, hash: row.hash };
          progress.next = row.index + 1;
        }
      }
    } finally {
      if (last) {
        this.noteAck(partner, login, last.index, last.hash);
        await store.chains
          .ackPartner({ partner, login, index: last.index, hash: last.hash, ackedAtMs: this.deps.clock.now() })
          .catch((err: unknown) => log.warn('chain ack not recorded', { partner, login, err: String(err) }));
      }
    }
  }

  // ---- backfill and resync (docs/protocol.md §14.3) ----

  /** The chain part of a replication cycle: backfill from every partner (or onlyPeer), then pending resyncs. */
  async cycle(signal: AbortSignal, onlyPeer?: string): Promise<ChainCycleSummary> {
    const summary: ChainCycleSummary = { partners: 0, blocksPulled: 0, resyncs: 0, errors: 0 };
    const resyncsBefore = this.resyncsDone;
    for (const partner of this.partners) {
      if (signal.aborted) break;
      if (onlyPeer !== undefined && partner !== onlyPeer) continue;
      summary.partners++;
      try {
        summary.blocksPulled += await this.backfill(partner, signal);
      } catch (err) {
        summary.errors++;
        this.deps.log.warn('chain backfill from partner failed', { partner, err: String(err) });
      }
    }
    for (const marker of await this.deps.store.chains.resyncMarkers()) {
      if (signal.aborted) break;
      try {
        await this.resync(marker);
      } catch (err) {
        summary.errors++;
        this.deps.log.warn('chain resync failed; the marker stays', { err: String(err), ...marker });
      }
    }
    summary.resyncs = this.resyncsDone - resyncsBefore;
    return summary;
  }

  /** GetChainHeads from the partner's cursor; each chain it holds beyond ours is caught up; the cursor follows. */
  private async backfill(partner: string, signal: AbortSignal): Promise<number> {
    const { store, peers } = this.deps;
    let cursor = await store.chains.partnerCursor(partner);
    let pulled = 0;
    for (;;) {
      const page = await peers.call(partner, 'GetChainHeads', { afterGlobalSeq: cursor, limit: MAX_CHAIN_HEADS });
      // CHAINS_AT_ONCE chains are caught up at once: each waits for the partner's pages far more than it works. The
      // first failure starts no more of them, and ends the backfill (the cursor stays) once those under way end.
      await eachAtOnce(
        page.items,
        CHAINS_AT_ONCE,
        async (item) => {
          const n = await this.chainLock.run(item.login, () =>
            this.catchUp(partner, item.login, { index: item.headIndex, hash: item.headHash }, signal),
          );
          pulled += n;
        },
        () => signal.aborted,
      );
      if (signal.aborted) return pulled;
      if (page.nextGlobalSeq > cursor) {
        cursor = page.nextGlobalSeq;
        await store.chains.setPartnerCursor(partner, cursor);
      }
      if (!page.hasMore || page.items.length === 0) return pulled;
    }
  }

  /**
   * Brings login's chain up to the partner's head (theirs: from GetChainHeads, or null to ask): nothing when we hold
   * it already, a divergence when the partner's block at one of our indexes has another hash, else the tail pulled
   * with GetChain (each page's signatures checked in one verify-pool call) and appended block by block. Answers the
   * blocks stored.
   */
  private async catchUp(
    partner: string,
    login: string,
    theirs: { index: number; hash: string } | null,
    signal: AbortSignal,
  ): Promise<number> {
    const { store, peers } = this.deps;
    const ours = await store.chains.head(login);
    if (theirs && ours && ours.index >= theirs.index) {
      if ((await store.chains.hashAt(login, theirs.index)) !== theirs.hash) await this.diverged(login, partner);
      return 0;
    }
    let from = ours ? ours.index : 0;
    let pulled = 0;
    for (;;) {
      const page = await peers.call(partner, 'GetChain', { login, fromIndex: from, limit: MAX_CHAIN_PAGE });
      if (ours && from === ours.index) {
        const first = page.items[0];
        if (page.headIndex < ours.index || !first) return pulled; // the partner is behind: its own backfill pulls
        if (first.blockHash !== ours.hash) {
          await this.diverged(login, partner);
          return pulled;
        }
      }
      const fresh = page.items.filter((item) => !ours || item.index > ours.index);
      for (const checked of await this.checkPage(fresh.map((item) => item.blockB64))) {
        if (signal.aborted) break;
        const result = await this.appendFrom(accepted(checked), partner, 'pull');
        if (result.link === 'stored') {
          pulled++;
          this.pulled.inc({ partner });
        } else if (result.link !== 'known') {
          await this.diverged(login, partner);
          return pulled;
        }
      }
      const last = page.items.at(-1);
      if (!page.hasMore || !last || signal.aborted) return pulled;
      from = last.index + 1;
    }
  }

  /**
   * A partner's chain disagrees with ours. The owner's first access server (its signed profile) is authoritative:
   * it keeps its chain; any other server marks the chain and resyncs it from there.
   */
  private async diverged(login: string, reportedBy: string): Promise<void> {
    const { directory, config, clock, store, log } = this.deps;
    const owner = await directory.lookup(login);
    const authoritative = owner?.accessServers[0];
    if (!authoritative || authoritative === config.serverLogin) {
      log.warn('chain diverged from a partner; this server keeps its chain', {
        login,
        partner: reportedBy,
        authoritative,
      });
      return;
    }
    const marker = await store.chains.markResync({ login, source: authoritative, startedAtMs: clock.now() });
    log.warn('chain diverged; resync from the authoritative server', { partner: reportedBy, ...marker });
    // A failed resync leaves the marker, which every cycle retries; the caller's backfill goes on.
    await this.resyncLocked(marker).catch((err: unknown) =>
      log.warn('chain resync failed; the marker stays', { err: String(err), ...marker }),
    );
  }

  /**
   * Downloads the whole chain from the marker's source, verifies it from genesis, and replaces our copy with it in
   * one transaction that also removes the marker; the replaced head is logged. Throws (the marker stays) when the
   * source cannot be reached or its chain does not verify.
   */
  resync(marker: ResyncMarker): Promise<void> {
    return this.chainLock.run(marker.login, () => this.resyncLocked(marker));
  }

  /** resync() for a caller that holds the chain's lock already. */
  private async resyncLocked(marker: ResyncMarker): Promise<void> {
    const { store, peers, log } = this.deps;
    const blocks: ChainBlockInput[] = [];
    for (let from = 0; ;) {
      const page = await peers.call(marker.source, 'GetChain', {
        login: marker.login,
        fromIndex: from,
        limit: MAX_CHAIN_PAGE,
      });
      for (const checked of await this.checkPage(page.items.map((item) => item.blockB64))) {
        const input = accepted(checked);
        const prev = blocks.at(-1) ?? null;
        const link = chainLink(prev, input, null);
        if (input.login !== marker.login || link !== 'stored') {
          this.resyncs.inc({ result: 'refused' });
          throw new ShineError('BAD_BLOB', `${marker.source}'s chain of ${marker.login} breaks at ${input.index}`);
        }
        blocks.push(input);
      }
      const last = page.items.at(-1);
      if (!page.hasMore || !last) break;
      from = last.index + 1;
    }
    if (blocks.length === 0) {
      await store.chains.clearResync(marker.login);
      log.warn('chain resync: the authoritative server holds no chain; ours is kept', { ...marker });
      return;
    }
    const { replaced, head } = await store.chains.replace(marker.login, blocks);
    this.resyncs.inc({ result: 'done' });
    this.resyncsDone++;
    log.warn('chain replaced by resync', {
      login: marker.login,
      source: marker.source,
      startedAtMs: marker.startedAtMs,
      replacedIndex: replaced?.index ?? -1,
      replacedHash: replaced?.hash ?? null,
      headIndex: head.index,
      headHash: head.hash,
    });
  }

  /** /debug/chains?login=: the head, each partner's acknowledged head, the resync marker. */
  async debug(login: string): Promise<ChainDebug> {
    const { store } = this.deps;
    const head = await store.chains.head(login);
    const stored = new Map((await store.chains.partnerAcks(login)).map((a) => [a.partner, a]));
    const marker = (await store.chains.resyncMarkers()).find((m) => m.login === login) ?? null;
    return {
      login,
      head: head && { index: head.index, hash: head.hash, globalSeq: head.globalSeq },
      partners: this.partners.map((partner) => {
        const mem = this.acked.get(partner)?.get(login);
        const db = stored.get(partner);
        const ack =
          mem && (!db || mem.index >= db.index) ? mem : db ? Object.assign({}, db, { atMs: db.ackedAtMs }) : null;
        return {
          partner,
          ackedIndex: ack?.index ?? null,
          ackedHash: ack?.hash ?? null,
          ackedAtMs: ack?.atMs ?? null,
        };
      }),
      resync: marker,
    };
  }
}
