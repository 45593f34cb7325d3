/**
 * Replication between a user's two access servers (docs/protocol.md §7): the server side of DmSyncBatch,
 * UserSettingsSyncBatch and MarkAllUserSettingsUnsynced, and the puller that runs a cycle at start-up,
 * every syncIntervalMs and on demand.
 */
import { eachAtOnce } from '../at-once.js';
import { fromBase64, toBase64 } from '../../protocol/bytes.js';
import type { Container } from '../../protocol/container.js';
import { messageKeyOf, ownerOf, pairProblem } from '../../protocol/container.js';
import { ShineError } from '../../protocol/errors.js';
import type { DeliveryStatusItem, OpAnswer, RepairSummary, SyncCycleSummary } from '../../protocol/ops.js';
import { MAX_SYNC_ACKS } from '../../protocol/ops.js';
import type { BackgroundQueue } from '../background/queue.js';
import { awaitedLater, untilAborted } from '../background/queue.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { Config } from '../config/config.js';
import type { BulkVerifier } from '../crypto/verify-pool.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import type { Directory } from '../directory/service.js';
import type { DmService } from '../dm/service.js';
import { decodeBlob } from '../../protocol/blob.js';
import type { FederationService } from '../federation/service.js';
import type { Logger } from '../log.js';
import type { Counter, Labels, Metrics } from '../metrics.js';
import type { Session } from '../sessions.js';
import type { StorePairInput, Store, SyncPageQuery } from '../store/types.js';
import type { SyncItem } from './anti-entropy.js';
import { addRepairStats, AntiEntropy, emptyRepairStats } from './anti-entropy.js';
import type { DeliveryReceipt, ReceiptExpectation } from '../../protocol/receipt.js';
import { checkReceipts, expectationFor, proofSigners } from '../delivery/receipts.js';
import type { ChainService } from '../chains/service.js';

export interface ReplicationDeps {
  /** User chains: their backfill and pending resyncs run in every cycle (docs/protocol.md §14.3). */
  chains?: Pick<ChainService, 'cycle'>;
  config: Config;
  clock: Clock;
  store: Pick<Store, 'directory' | 'messages' | 'processes' | 'replication' | 'settings'>;
  directory: Directory;
  dm: DmService;
  federation: FederationService;
  peers: PeerCaller;
  log: Logger;
  metrics: Metrics;
  background: BackgroundQueue;
  /** Checks a page's signatures together (a verify pool: off the event loop). */
  bulkVerifier: BulkVerifier;
}

export interface SyncBatchPayload {
  ownerLogin?: string | undefined;
  afterStoredAtMs?: number | undefined;
  afterMessageKey?: string | undefined;
  afterKey?: string | undefined;
  limit?: number | undefined;
  maxBytes?: number | undefined;
  ackSyncIds?: string[] | undefined;
  sourceServerLogin?: string | undefined;
}

type DmSyncAnswer = OpAnswer<'DmSyncBatch'>;
type SettingsSyncAnswer = OpAnswer<'UserSettingsSyncBatch'>;

const PAGE_LIMIT = 500;
/**
 * Owners a replication cycle pulls at once from one peer (docs/protocol.md §7). Each holds at most three pages
 * (PAGES_AHEAD and the one it stores) and has one page request in flight.
 */
const OWNERS_AT_ONCE = 8;
/**
 * Container bytes a page request asks for at most (the peer's default is 3 000 000): the answers of all the
 * owners' requests in flight at once, about 11 MB as base64, stay under the 16 MiB a peer's socket may hold
 * unsent before the peer cuts it off as a slow reader (`wsMaxBufferedBytes`).
 */
const PAGE_MAX_BYTES = 1_000_000;

interface SyncCursor {
  storedAtMs: number;
  key: string;
}

/** One page of either pull protocol of docs/protocol.md §7, with the cursor to ask from next. */
interface SyncPage<Item> {
  items: Item[];
  next: SyncCursor;
}
type FetchPage<Item> = (after: SyncCursor, acks: string[]) => Promise<SyncPage<Item>>;

/**
 * How a pull stores a page, in two steps: `check` starts as soon as the page arrives (while the page
 * before it is still being written) and must not write; `write` stores what `check` kept and returns
 * the syncIds to ack. A refused row is simply not among them.
 */
interface PageStorer<Item, Checked> {
  check(items: Item[]): Promise<Checked>;
  write(checked: Checked): Promise<string[]>;
}

/** The request fields both pull protocols share; each adds its own cursor key. */
function syncRequest(owner: string, after: SyncCursor, acks: string[]) {
  return {
    ownerLogin: owner,
    afterStoredAtMs: after.storedAtMs,
    limit: PAGE_LIMIT,
    maxBytes: PAGE_MAX_BYTES,
    ackSyncIds: acks,
  };
}
const DEFAULT_MAX_BYTES = 3_000_000;

/** A peer broke the pull protocol (a cursor that does not move, pages without end): that pull ends. */
class SyncProtocolError extends Error {
  override name = 'SyncProtocolError';
}

/** Whether cursor b lies strictly after a in the (storedAtMs, key) order pages are served in. */
const isAfter = (b: SyncCursor, a: SyncCursor): boolean =>
  b.storedAtMs > a.storedAtMs || (b.storedAtMs === a.storedAtMs && b.key > a.key);
const HOUR = 3_600_000;

/** A call that got no answer (PeerUnavailableError: unreachable, timed out, closed), not an error answer. */
const unavailable = (err: unknown): boolean => err instanceof Error && err.name === 'PeerUnavailableError';
/** How often POST /admin/sync asks again for the replication lock another process holds. */
const LOCK_RETRY_MS = 250;

/** A peer's return starts at most one cycle with it per this long (docs/protocol.md §7). */
const RETURN_DEBOUNCE_MS = 60_000;

export class ReplicationService {
  private timer: TimerHandle | null = null;
  private closed = false;
  /** Cycles scheduled because a peer showed life again, by peer, and when the last one started. */
  private readonly returnTimers = new Map<string, TimerHandle>();
  private readonly lastReturnAtMs = new Map<string, number>();
  private running: Promise<SyncCycleSummary | null> | null = null;
  private readonly skipped: Counter;
  private readonly pulled: Counter;
  private readonly syncErrors: Counter;
  private readonly cycles: Counter;
  /** The last finished cycle, for logs and /metrics. */
  lastCycle: (SyncCycleSummary & { finishedAtMs: number }) | null = null;
  /** DmDigest, DmKeys, DmFetch and the repair that runs after each owner's pull (docs/protocol.md §7). */
  readonly antiEntropy: AntiEntropy;

  constructor(private readonly deps: ReplicationDeps) {
    this.antiEntropy = new AntiEntropy({
      clock: deps.clock,
      store: deps.store,
      peers: deps.peers,
      log: deps.log,
      metrics: deps.metrics,
      checkPeer: (p, s) => this.checkPeer(p, s),
      storeRows: (peer, owner, items) => this.storeRows(peer, owner, items),
    });
    const m = deps.metrics;
    this.pulled = m.counter('sync_rows_pulled_total', 'Rows stored by catch-up sync, by kind');
    this.syncErrors = m.counter('sync_errors_total', 'Failed sync exchanges with a peer server');
    this.cycles = m.counter(
      'sync_cycles_total',
      'Replication cycles finished, by result (ok, or errors when an exchange with a peer failed)',
    );
    this.skipped = m.counter(
      'sync_cycles_skipped_total',
      'Periodic replication cycles skipped because another process of this server was running one',
      [],
    );
    m.gauge('sync_cycle_running', 'Whether a replication cycle is running now (1) or not (0)', () =>
      this.running ? 1 : 0,
    );
    const last =
      <T>(pick: (c: NonNullable<ReplicationService['lastCycle']>) => T, none: T) =>
      () =>
        this.lastCycle ? pick(this.lastCycle) : none;
    m.gauge(
      'sync_last_cycle_timestamp_seconds',
      'When the last replication cycle finished (0: none yet)',
      last((c) => c.finishedAtMs / 1000, 0),
    );
    m.gauge(
      'sync_last_cycle_duration_seconds',
      'How long the last replication cycle took',
      last((c) => c.durationMs / 1000, 0),
    );
    m.gauge(
      'sync_last_cycle_rows',
      'Rows the last replication cycle stored, by kind',
      last(
        (c): [Labels, number][] => [
          [{ kind: 'dm' }, c.dmRows],
          [{ kind: 'settings' }, c.settingsRows],
        ],
        [],
      ),
    );
    m.gauge(
      'sync_last_cycle_errors',
      'Failed exchanges with peers in the last replication cycle',
      last((c) => c.errors, 0),
    );
  }

  // ---- server side ----

  /** Checks common to the sync ops: the caller is the owner's other access server (docs/protocol.md §7). */
  private async checkPeer(
    p: { ownerLogin?: string | undefined; sourceServerLogin?: string | undefined },
    session: Session,
  ): Promise<string> {
    const source = this.deps.federation.sourceOf(session, p.sourceServerLogin);
    const owner = p.ownerLogin ?? '';
    if (owner === '') throw new ShineError('EMPTY_OWNER_LOGIN', 'ownerLogin is required');
    const { config, directory } = this.deps;
    const entry = await directory.lookup(owner, { noImport: true });
    if (!entry || !entry.accessServers.includes(config.serverLogin)) {
      throw new ShineError('LOCAL_SERVER_NOT_ACCESS_SERVER', `this server is not an access server of ${owner}`);
    }
    if (!source || source === config.serverLogin || !entry.accessServers.includes(source)) {
      throw new ShineError('NOT_PEER', `the caller is not the other access server of ${owner}`);
    }
    return owner;
  }

  async dmSyncBatch(p: SyncBatchPayload, session: Session): Promise<DmSyncAnswer> {
    const owner = await this.checkPeer(p, session);
    const page = await this.deps.store.replication.dmSyncPage(pageQuery(owner, p, p.afterMessageKey));
    const last = page.items.at(-1);
    return {
      ownerLogin: owner,
      items: page.items.map((r) => ({
        syncId: r.syncId,
        primaryMessageKey: r.primaryMessageKey,
        storedAtMs: r.storedAtMs,
        blobsB64: r.blobs.map(toBase64),
      })),
      hasMore: page.hasMore,
      nextStoredAtMs: last?.storedAtMs ?? p.afterStoredAtMs ?? 0,
      nextMessageKey: last?.primaryMessageKey ?? p.afterMessageKey ?? '',
    };
  }

  async settingsSyncBatch(p: SyncBatchPayload, session: Session): Promise<SettingsSyncAnswer> {
    const owner = await this.checkPeer(p, session);
    const page = await this.deps.store.replication.settingsSyncPage(pageQuery(owner, p, p.afterKey));
    const last = page.items.at(-1);
    return {
      ownerLogin: owner,
      items: page.items.map((r) => ({
        syncId: r.syncId,
        key: r.key,
        valueB64: toBase64(r.value),
        updatedAtMs: r.updatedAtMs,
        storedAtMs: r.storedAtMs,
      })),
      hasMore: page.hasMore,
      nextStoredAtMs: last?.storedAtMs ?? p.afterStoredAtMs ?? 0,
      nextKey: last?.key ?? p.afterKey ?? '',
    };
  }

  /** MarkAllUserSettingsUnsynced from the owner's other access server (admins use markUnsynced directly). */
  async markUnsyncedOp(
    p: { ownerLogin?: string | undefined; sourceServerLogin?: string | undefined },
    session: Session,
  ): Promise<{ updated: number; dmUpdated: number }> {
    if (!p.ownerLogin) throw new ShineError('FORBIDDEN', 'only an admin may mark every owner unsynced');
    const owner = await this.checkPeer(p, session);
    return this.deps.store.replication.markUnsynced(owner);
  }

  // ---- puller ----

  /**
   * Runs a cycle now and then every syncIntervalMs, in the background; a cycle due while another process
   * of this server runs one is skipped (that process pulls for all of them) and counted.
   */
  start(): void {
    const tick = (): void => {
      this.deps.background.run('replication cycle', {}, async () => {
        if ((await this.tryCycle()) === null) this.skipped.inc();
      });
      this.timer = this.deps.clock.setTimer(this.deps.config.syncIntervalMs, tick);
    };
    tick();
  }

  /** Stops scheduling; a running cycle ends at the background queue's abort, which shutdown sends first. */
  close(): void {
    this.closed = true;
    this.timer?.cancel();
    for (const t of this.returnTimers.values()) t.cancel();
    this.returnTimers.clear();
  }

  /**
   * A peer server showed life after failures (it connected to this server, or answered again after
   * errors): a cycle with it starts within syncOnReturnMs — halfway, so signs close together (our dial and
   * its own) make one cycle — and at most once a minute per peer, so a partition heals in seconds.
   */
  peerReturned(peer: string): void {
    const { clock, config, background } = this.deps;
    if (this.closed || config.serverLogin === 'local' || this.returnTimers.has(peer)) return;
    const now = clock.now();
    const last = this.lastReturnAtMs.get(peer);
    const at = Math.max(
      now + Math.floor(config.syncOnReturnMs / 2),
      last === undefined ? 0 : last + RETURN_DEBOUNCE_MS,
    );
    this.returnTimers.set(
      peer,
      clock.setTimer(at - now, () => {
        this.returnTimers.delete(peer);
        if (this.closed) return;
        this.lastReturnAtMs.set(peer, clock.now());
        background.run('replication cycle on a peer’s return', { peer }, async () => {
          // After a cycle running now, which may have met the peer while it was away.
          while (this.running) await this.running.catch(() => null);
          if (this.closed) return;
          this.running = this.lockedCycle(peer).finally(() => {
            this.running = null;
          });
          await this.running;
        });
      }),
    );
  }

  /**
   * One replication cycle now (POST /admin/sync): joins the one running in this process, or waits while
   * another process of this server runs one and then runs its own, so the answer always describes a
   * cycle that started after the request.
   */
  async runCycle(): Promise<SyncCycleSummary> {
    const { clock, background } = this.deps;
    for (;;) {
      const summary = await this.tryCycle();
      if (summary) return summary;
      await untilAborted(new Promise<void>((resolve) => clock.setTimer(LOCK_RETRY_MS, resolve)), background.signal);
    }
  }

  /**
   * A cycle under the server-wide replication lock (docs/protocol.md §9.2: one process at a time), or
   * null when another process holds it. A call while a cycle runs in this process joins it.
   */
  tryCycle(): Promise<SyncCycleSummary | null> {
    this.running ??= this.lockedCycle().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** A cycle under the replication lock: with every peer, or with onlyPeer. */
  private async lockedCycle(onlyPeer?: string): Promise<SyncCycleSummary | null> {
    const out: { summary: SyncCycleSummary | null } = { summary: null };
    await this.deps.store.processes.exclusively('replication', async () => {
      out.summary = await this.cycle(this.deps.background.signal, onlyPeer);
    });
    return out.summary;
  }

  private async cycle(signal: AbortSignal, onlyPeer?: string): Promise<SyncCycleSummary> {
    const { store, config, clock, log } = this.deps;
    const started = clock.now();
    const summary: SyncCycleSummary = {
      peers: 0,
      users: 0,
      dmRows: 0,
      settingsRows: 0,
      repairedCopies: 0,
      chainBlocksPulled: 0,
      chainResyncs: 0,
      errors: 0,
      durationMs: 0,
    };
    if (config.serverLogin === 'local') return summary;
    for (const peer of await store.directory.peerServersOf(config.serverLogin)) {
      if (onlyPeer !== undefined && peer !== onlyPeer) continue;
      summary.peers++;
      const owners = await store.directory.sharedUsers(config.serverLogin, peer);
      let peerDown = false;
      // An owner's pull waits for its peer's answers (a round trip each, long between distant servers) far more
      // than it works.
      await eachAtOnce(
        owners,
        OWNERS_AT_ONCE,
        async (owner) => {
          summary.users++;
          const repaired = emptyRepairStats();
          try {
            // Each count is added once its pull is done (`x += await …` would read x before the wait, and lose
            // what the other owners' pulls added meanwhile).
            const settingsRows = await this.pullSettings(peer, owner, signal);
            summary.settingsRows += settingsRows;
            const dmRows = await this.pullDm(peer, owner, signal);
            summary.dmRows += dmRows;
            await this.antiEntropy.repairOwner(peer, owner, signal, repaired);
          } catch (err) {
            if (signal.aborted) return;
            summary.errors++;
            this.syncErrors.inc({ peer });
            if (err instanceof SyncProtocolError)
              log.error('sync with peer broken off', { peer, owner, err: err.message });
            else log.warn('sync with peer failed', { peer, owner, err: String(err) });
            if (unavailable(err)) peerDown = true; // the next owners would fail alike
          } finally {
            summary.repairedCopies += repaired.copiesRepaired; // copies stored before a failure are repaired too
          }
        },
        () => peerDown || signal.aborted,
      );
      if (signal.aborted) break;
    }
    if (this.deps.chains && !signal.aborted) {
      const chains = await this.deps.chains.cycle(signal, onlyPeer);
      summary.chainBlocksPulled = chains.blocksPulled;
      summary.chainResyncs = chains.resyncs;
      summary.errors += chains.errors;
    }
    summary.durationMs = clock.now() - started;
    this.lastCycle = Object.assign({}, summary, { finishedAtMs: clock.now() });
    this.cycles.inc({ result: summary.errors === 0 ? 'ok' : 'errors' });
    log.info('sync cycle done', { ...summary });
    return summary;
  }

  /**
   * POST /admin/repair: anti-entropy now for owner (or every shared user) with each peer server that
   * shares them; another process's cycle or repair may run meanwhile (stores are idempotent).
   */
  async repairNow(owner: string | null): Promise<RepairSummary> {
    const { store, config, clock, log } = this.deps;
    const started = clock.now();
    const summary: RepairSummary = Object.assign({ peers: 0, owners: 0, errors: 0 }, emptyRepairStats(), {
      durationMs: 0,
    });
    const signal = this.deps.background.signal;
    if (config.serverLogin !== 'local') {
      for (const peer of await store.directory.peerServersOf(config.serverLogin)) {
        const owners = (await store.directory.sharedUsers(config.serverLogin, peer)).filter(
          (o) => !owner || o === owner,
        );
        if (owners.length > 0) summary.peers++;
        let peerDown = false;
        const repairOne = async (o: string): Promise<void> => {
          summary.owners++;
          const stats = emptyRepairStats();
          try {
            await this.antiEntropy.repairOwner(peer, o, signal, stats);
          } catch (err) {
            if (signal.aborted) return; // the server is stopping: not the owner's failure
            summary.errors++;
            log.warn('anti-entropy repair failed', { peer, owner: o, err: String(err) });
            if (unavailable(err)) peerDown = true; // the next owners would fail alike
          } finally {
            addRepairStats(summary, stats); // what a failed repair did before it failed, too
          }
        };
        const stop = () => peerDown || signal.aborted;
        // The first owner alone: a peer that does not answer is found by one owner's call and counted once, not
        // once for each owner that would be under way beside it; then OWNERS_AT_ONCE at a time, as a cycle does.
        await eachAtOnce(owners.slice(0, 1), OWNERS_AT_ONCE, repairOne, stop);
        await eachAtOnce(owners.slice(1), OWNERS_AT_ONCE, repairOne, stop);
      }
    }
    summary.durationMs = clock.now() - started;
    return summary;
  }

  /** Verifies and stores rows as a sync page is stored (for anti-entropy); answers the syncIds stored. */
  async storeRows(peer: string, owner: string, items: SyncItem[]): Promise<string[]> {
    if (items.length === 0) return [];
    return this.writePage(peer, owner, await this.checkPage(peer, owner, items));
  }

  private pullSettings(peer: string, owner: string, signal: AbortSignal): Promise<number> {
    const fetchPage: FetchPage<SettingsSyncAnswer['items'][number]> = async (after, acks) => {
      const page = await untilAborted(
        this.deps.peers.call(
          peer,
          'UserSettingsSyncBatch',
          Object.assign({}, syncRequest(owner, after, acks), { afterKey: after.key }),
        ),
        signal,
      );
      return { items: page.items, next: { storedAtMs: page.nextStoredAtMs, key: page.nextKey } };
    };
    return this.pullAll(peer, owner, 'UserSettingsSyncBatch', fetchPage, {
      check: async (items) => items,
      write: (items) => this.storeSettings(peer, owner, items),
    });
  }

  /** Applies a settings page (last writer wins); a row with a bad value or a future time is refused. */
  private async storeSettings(peer: string, owner: string, items: SettingsSyncAnswer['items']): Promise<string[]> {
    const { clock, config, store } = this.deps;
    const acks: string[] = [];
    for (const item of items) {
      const value = fromBase64(item.valueB64);
      const now = clock.now();
      // The client's rule (SetUserSetting) holds for synced rows too: a future time would win every later edit.
      const problem =
        !value || typeof item.key !== 'string' || item.key.length === 0 || item.key.length > 128
          ? 'bad settings row'
          : item.updatedAtMs > now + config.maxTimeSkewMs
            ? 'updatedAtMs is too far in the future'
            : null;
      if (problem) {
        this.refuseRow(peer, owner, String(item.key), problem);
        continue;
      }
      await store.settings.setSetting({
        owner,
        key: item.key,
        value: value!,
        updatedAtMs: item.updatedAtMs,
        nowMs: now,
        synced: true,
      });
      acks.push(item.syncId);
    }
    return acks;
  }

  private pullDm(peer: string, owner: string, signal: AbortSignal): Promise<number> {
    const fetchPage: FetchPage<DmSyncAnswer['items'][number]> = async (after, acks) => {
      const page = await untilAborted(
        this.deps.peers.call(
          peer,
          'DmSyncBatch',
          Object.assign({}, syncRequest(owner, after, acks), { afterMessageKey: after.key }),
        ),
        signal,
      );
      return { items: page.items, next: { storedAtMs: page.nextStoredAtMs, key: page.nextMessageKey } };
    };
    return this.pullAll(peer, owner, 'DmSyncBatch', fetchPage, {
      check: (items) => this.checkPage(peer, owner, items),
      write: (checked) => this.writePage(peer, owner, checked),
    });
  }

  /** A row that is not stored: left unacked (it stays unsynced at the peer), counted and logged. */
  private refuseRow(peer: string, owner: string, key: string, why: string): void {
    this.syncErrors.inc({ peer });
    this.deps.log.warn('sync row refused', { peer, owner, key, err: why });
  }

  /**
   * Pulls pages to the end (docs/protocol.md §7): each page is stored, then acked with the next request, until a
   * page is empty. A row committed just as a page was read can sort behind the cursor (same storedAtMs
   * millisecond, smaller key); so a pass that moved the cursor is followed by one more from the start,
   * where only unsynced rows are left, and such a row still arrives in this cycle (rows refused in the
   * first pass are passed over in the second). A peer whose cursor does not move forward, or that
   * pages past syncMaxPages, ends the pull with a SyncProtocolError. Returns rows stored.
   *
   * Pipelined: the request for the next page goes out as soon as a page arrives (its cursor is known then),
   * while fewer than PAGES_AHEAD pages wait to be stored, and each page is checked as soon as it arrives; so
   * the peer reads and the verify thread checks the pages ahead while this server writes one. One request
   * is in flight at a time. The acks of a page ride on the first request sent after its page committed; an
   * empty page with acks still owed is followed by one more request carrying them (which may bring rows
   * committed meanwhile).
   */
  private async pullAll<Item extends { syncId: string }, Checked>(
    peer: string,
    owner: string,
    op: 'DmSyncBatch' | 'UserSettingsSyncBatch',
    fetchPage: FetchPage<Item>,
    storer: PageStorer<Item, Checked>,
  ): Promise<number> {
    const kind = op === 'DmSyncBatch' ? 'dm' : 'settings';
    let total = 0;
    let pagesInPull = 0;
    const refused = new Set<string>();
    // Requests made ahead of need stop where the pull would have to end anyway (syncMaxPages pages and one more).
    const budget = { requests: 0, max: this.deps.config.syncMaxPages + 1 };
    for (let pass = 0; pass < 2; pass++) {
      // However the pass ends (a failed write, a broken peer), the pages ahead are neither asked for nor checked.
      using pages = new PageChain<Item, Checked>(fetchPage, budget, (items) => {
        const kept = pass === 0 ? items : items.filter((i) => !refused.has(i.syncId));
        return { items: kept, checked: kept.length > 0 ? awaitedLater(storer.check(kept)) : null };
      });
      let after: SyncCursor = { storedAtMs: 0, key: '' };
      let stored = 0;
      pages.request(after);
      for (;;) {
        const taken = pages.take();
        if (taken === null) {
          // The chain ended with an empty page: acks still owed go with one more request from the same cursor.
          if (!pages.owesAcks) break;
          pages.request(after);
          continue;
        }
        const { page, items, checked } = await taken;
        if (page.items.length === 0) continue;
        if (!isAfter(page.next, after))
          throw new SyncProtocolError(`${op} cursor did not advance past ${after.storedAtMs}/${after.key}`);
        if (++pagesInPull > this.deps.config.syncMaxPages)
          throw new SyncProtocolError(`${op} still has more after ${this.deps.config.syncMaxPages} pages`);
        stored++;
        after = page.next;
        const acks = checked ? await storer.write(await checked) : [];
        pages.committed(acks);
        if (pass === 0 && acks.length < items.length) {
          const acked = new Set(acks);
          for (const i of items) if (!acked.has(i.syncId)) refused.add(i.syncId);
        }
        total += acks.length;
        this.pulled.inc({ kind }, acks.length);
      }
      if (stored === 0) break;
    }
    return total;
  }

  /**
   * Outbox flags for a page's pairs, by recipient. The owner's rows came from its other access server
   * (synced); a recipient who is a user of this server too gets a row of its own (docs/protocol.md §7: every event
   * stored for a local owner has one), synced only when the peer is that recipient's other server too.
   */
  private async pairOutboxes(
    peer: string,
    owner: string,
    rows: Container[][],
  ): Promise<Map<string, ReadonlyMap<string, boolean>>> {
    const { directory, config } = this.deps;
    const byRecipient = new Map<string, ReadonlyMap<string, boolean>>();
    for (const copies of rows) {
      const recipient = copies[0]!.toLogin;
      if (copies.length !== 2 || byRecipient.has(recipient)) continue;
      const owners = new Map([[owner, true]]);
      if (recipient !== owner) {
        const servers = (await directory.lookup(recipient, { noImport: true }))?.accessServers ?? [];
        if (servers.includes(config.serverLogin)) owners.set(recipient, servers.includes(peer));
      }
      byRecipient.set(recipient, owners);
    }
    return byRecipient;
  }

  /**
   * Checks one DM page without writing: decodes it, keeps the owner's own rows whose signatures verify
   * (the rest are refused and left unacked), and asks the peer which of its pairs were delivered.
   */
  private async checkPage(peer: string, owner: string, items: DmSyncAnswer['items']): Promise<CheckedDmPage> {
    const { dm } = this.deps;
    const shaped: { item: DmSyncAnswer['items'][number]; copies: Container[] }[] = [];
    for (const item of items) {
      try {
        const copies = item.blobsB64.map((b) => decodeBlob(b));
        if (copies.length < 1 || copies.length > 2) throw new Error(`${copies.length} blobs`);
        if (copies.length === 2 && pairProblem(copies[0]!, copies[1]!)) throw new Error('not a pair');
        // The peer may only hand over the owner's own rows: a pair it sent, or a copy it owns.
        const primary = copies.at(-1)!;
        const belongs = copies.length === 2 ? primary.fromLogin === owner : ownerOf(primary) === owner;
        if (!belongs || messageKeyOf(primary) !== item.primaryMessageKey) throw new Error(`not a row of ${owner}`);
        shaped.push({ item, copies });
      } catch (err) {
        // One bad row must not stop the owner's replication: it is skipped (left unacked) and the rest goes on.
        this.refuseRow(peer, owner, item.primaryMessageKey, err instanceof Error ? err.message : String(err));
      }
    }
    // Every signature of the page at once (with a verify pool, off the event loop); meanwhile the peer is
    // asked which pairs it delivered and their proofs are checked, so the verify thread never waits out
    // the round trip. A proof of a row that is then refused is not used.
    const pairKeys = shaped.filter((d) => d.copies.length === 2).map((d) => d.item.primaryMessageKey);
    const [problems, proofs] = await Promise.all([
      dm.checkSignedRows(
        shaped.map((d) => d.copies),
        this.deps.bulkVerifier,
      ),
      this.deliveryStatus(peer, pairKeys).then((remote) => this.deliveryProofs(peer, shaped, remote)),
    ]);
    const decoded = shaped.filter((d, i) => {
      const problem = problems[i];
      if (problem) this.refuseRow(peer, owner, d.item.primaryMessageKey, problem.message);
      return !problem;
    });
    return { decoded, proofs };
  }

  /** The peer's delivery status of the pairs outgoingKeys, by key; empty when it cannot say. */
  private async deliveryStatus(peer: string, outgoingKeys: string[]): Promise<Map<string, DeliveryStatusItem>> {
    const remote = new Map<string, DeliveryStatusItem>();
    if (outgoingKeys.length === 0) return remote;
    try {
      const answer = await this.deps.peers.call(peer, 'GetDmDeliveryStatus', { messageKeys: outgoingKeys });
      for (const s of 'items' in answer ? answer.items : [answer]) remote.set(s.messageKey, s);
    } catch (err) {
      this.deps.log.debug('delivery status for synced pairs unavailable', { peer, err: String(err) });
    }
    return remote;
  }

  /**
   * The proofs of the pairs the peer says it delivered (docs/protocol.md §6.8, §13.1): each must be a
   * receipt by one of the recipient's servers that verifies and matches this server's incoming copy
   * (byte-identical to the peer's). A `delivered` without one is not taken (decision 33).
   */
  private async deliveryProofs(
    peer: string,
    decoded: CheckedDmPage['decoded'],
    remote: Map<string, DeliveryStatusItem>,
  ): Promise<Map<string, DeliveryReceipt>> {
    const { directory, bulkVerifier, log } = this.deps;
    const asked: { outgoingKey: string; x: unknown; want: ReceiptExpectation }[] = [];
    // A page is one owner's: its pairs go to a few recipients, each looked up once per page.
    const signers = new Map<string, readonly string[] | undefined>();
    for (const { copies } of decoded) {
      if (copies.length !== 2) continue;
      const [incoming, outgoing] = copies as [Container, Container];
      const status = remote.get(messageKeyOf(outgoing));
      if (!status?.delivered) continue;
      if (!signers.has(incoming.toLogin))
        signers.set(incoming.toLogin, await proofSigners(directory, incoming.toLogin));
      const servers = signers.get(incoming.toLogin);
      const want = expectationFor(Object.assign({}, incoming, { messageKey: messageKeyOf(incoming) }), servers);
      asked.push({ outgoingKey: messageKeyOf(outgoing), x: status.proof, want });
    }
    const proofs = new Map<string, DeliveryReceipt>();
    const checked = await checkReceipts(asked, directory, bulkVerifier);
    checked.forEach((c, i) => {
      const key = asked[i]!.outgoingKey;
      if ('receipt' in c) proofs.set(key, c.receipt);
      else log.warn('peer says delivered without a valid proof', { peer, key, err: `BAD_RECEIPT: ${c.problem}` });
    });
    return proofs;
  }

  /**
   * Stores a checked page silently (no events, no push, no forwarding); pairs get delivery rows per
   * docs/protocol.md §6.8. Returns the syncIds to ack.
   */
  private async writePage(peer: string, owner: string, { decoded, proofs }: CheckedDmPage): Promise<string[]> {
    const { store, clock, config } = this.deps;
    const now = clock.now();
    const outbox = await this.pairOutboxes(
      peer,
      owner,
      decoded.map((d) => d.copies),
    );
    // The page's writes are issued together, in page order, so they share group commits instead of
    // paying one fsync per row; the page is acked only after all of them committed.
    const writes = decoded.map(({ item, copies }): Promise<unknown> => {
      if (copies.length === 1)
        return store.messages.storeCopy({
          copy: copies[0]!,
          nowMs: now,
          outbox: { owners: new Map([[owner, true]]) },
          silent: true,
        });
      const [incoming, outgoing] = copies as [Container, Container];
      const proof = proofs.get(messageKeyOf(outgoing));
      // Old history is never re-sent: past the hour from the source's storedAtMs it is failed unless delivered there.
      let delivery: StorePairInput['delivery'];
      if (proof)
        delivery = { state: 'delivered', attempt: 0, acceptedAtMs: item.storedAtMs, nextAttemptAtMs: null, proof };
      else if (now >= item.storedAtMs + (config.retryScheduleMs.at(-1) ?? HOUR))
        delivery = { state: 'failed', attempt: 0, acceptedAtMs: item.storedAtMs, nextAttemptAtMs: null };
      else
        delivery = { state: 'accepted', attempt: 0, acceptedAtMs: item.storedAtMs, nextAttemptAtMs: item.storedAtMs };
      return store.messages.storePair({
        incoming,
        outgoing,
        nowMs: now,
        outbox: { owners: outbox.get(incoming.toLogin)! },
        delivery,
        silent: true,
      });
    });
    const failed = (await Promise.allSettled(writes)).find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    return decoded.map((d) => d.item.syncId);
  }
}

/** A DM page that checkPage kept: its rows that verify, and the peer's delivery status of its pairs. */
interface CheckedDmPage {
  decoded: { item: DmSyncAnswer['items'][number]; copies: Container[] }[];
  /** The checked proofs of the pairs delivered there, by outgoing key. */
  proofs: Map<string, DeliveryReceipt>;
}

const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));

/** A sync page request with the docs/protocol.md §7 defaults; each protocol names its own cursor key. */
function pageQuery(owner: string, p: SyncBatchPayload, afterKey: string | undefined): SyncPageQuery {
  return {
    owner,
    ackSyncIds: p.ackSyncIds ?? [],
    afterStoredAtMs: p.afterStoredAtMs ?? 0,
    afterKey: afterKey ?? '',
    limit: clamp(p.limit ?? PAGE_LIMIT, 1, PAGE_LIMIT),
    // More than the default would not fit in a frame (4 MiB) as base64: a larger ask gets the default.
    maxBytes: Math.min(p.maxBytes ?? DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES),
  };
}

/** Pages a pull keeps requested or waiting to be stored, beyond the one it is storing (ReplicationService.pullAll). */
const PAGES_AHEAD = 2;

interface ChainedPage<Item, Checked> {
  page: SyncPage<Item>;
  /** The page's items this pass keeps, and their check, started as the page arrived. */
  items: Item[];
  checked: Promise<Checked> | null;
}

/**
 * The requests of one pass of a pull, in cursor order: the next request goes out when the page before it
 * arrives, while fewer than PAGES_AHEAD pages are requested or waiting and the pull's budget of requests
 * lasts, and one request is in flight at a time. A page that is empty, or whose cursor does not move, ends
 * the chain (the pull reads why); so does a request that fails, whose error the pull meets when it takes
 * that page. Acks committed and not yet sent ride on the next request. The pull's own requests (a pass's
 * first, and one after an empty page) go whatever the budget says: the pull bounds the pages it takes.
 */
class PageChain<Item, Checked> implements Disposable {
  private closed = false;
  private readonly waiting: Promise<ChainedPage<Item, Checked>>[] = [];
  /** Where the next request starts, once the page before it has arrived and the chain goes on. */
  private nextCursor: SyncCursor | null = null;
  private inFlight = false;
  private owed: string[] = [];

  constructor(
    private readonly fetchPage: FetchPage<Item>,
    private readonly budget: { requests: number; max: number },
    private readonly onArrival: (items: Item[]) => { items: Item[]; checked: Promise<Checked> | null },
  ) {}

  /** Starts (or restarts, after an empty page) the chain at a cursor. */
  request(after: SyncCursor): void {
    this.nextCursor = after;
    this.pump(true);
  }

  /** The next page in order, or null when the chain has ended and every page was taken. */
  take(): Promise<ChainedPage<Item, Checked>> | null {
    // Past the budget the chain waits for the pull to take its pages; it goes on when the pull asks.
    if (this.waiting.length === 0 && this.nextCursor !== null) this.pump(true);
    const next = this.waiting.shift() ?? null;
    this.pump();
    return next;
  }

  /** Records a stored page's acks, to be sent with the next request. */
  committed(acks: string[]): void {
    this.owed.push(...acks);
    this.pump();
  }

  get owesAcks(): boolean {
    return this.owed.length > 0;
  }

  /** Ends the chain: no request leaves after this, and a page that arrives is not checked. */
  [Symbol.dispose](): void {
    this.closed = true;
  }

  private pump(asked = false): void {
    if (this.closed || this.inFlight || this.nextCursor === null || this.waiting.length >= PAGES_AHEAD) return;
    if (!asked && this.budget.requests >= this.budget.max) return;
    this.budget.requests++;
    const after = this.nextCursor;
    this.nextCursor = null;
    this.inFlight = true;
    const acks = this.owed.splice(0, MAX_SYNC_ACKS);
    const arrived = this.fetchPage(after, acks).then(
      (page) => {
        this.inFlight = false;
        if (page.items.length > 0 && isAfter(page.next, after)) {
          this.nextCursor = page.next;
          this.pump();
        }
        return Object.assign({ page }, this.closed ? { items: [], checked: null } : this.onArrival(page.items));
      },
      (err: unknown) => {
        this.inFlight = false;
        throw err;
      },
    );
    this.waiting.push(awaitedLater(arrived));
  }
}
