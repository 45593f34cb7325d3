/**
 * Anti-entropy between a user's two access servers (docs/protocol.md §7, "Anti-entropy"): the server side
 * of DmDigest, DmKeys and DmFetch, and the repair that compares an owner's outbox with the peer's by
 * digests of time ranges, splits the ranges that differ until they are small, lists their keys and
 * fetches what this server lacks or holds in an older revision. Fetched rows are stored like synced ones.
 *
 * The `synced` flags trust both sides' memories; this does not: a server restored from an old backup
 * finds and fills its holes here, with no event and no re-delivery.
 */
import { eachAtOnce } from '../at-once.js';
import { fromBase64, toBase64 } from '../../protocol/bytes.js';
import { compareRevision, incomingKeyOf, outgoingKeyOf, parseSyncId, syncIdOf } from '../../protocol/container.js';
import { ShineError } from '../../protocol/errors.js';
import type { OpAnswer, OpName, OpPayload, RepairStats } from '../../protocol/ops.js';
import { MAX_DIGEST_BUCKETS, MAX_FETCH_BYTES, MAX_FETCH_KEYS, MAX_KEYS_ITEMS } from '../../protocol/ops.js';
import { awaitedLater, untilAborted } from '../background/queue.js';
import type { Clock } from '../clock.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import type { Logger } from '../log.js';
import type { Counter, Metrics } from '../metrics.js';
import type { Session } from '../sessions.js';
import { outboxCopyKeys, takeWithinBytes } from '../store/rules.js';
import type { DigestBucket, Store, TimeRange } from '../store/types.js';

/** A row as DmSyncBatch carries it: what the puller's page storer takes. */
export type SyncItem = OpAnswer<'DmSyncBatch'>['items'][number];

export interface AntiEntropyDeps {
  clock: Clock;
  store: Pick<Store, 'replication'>;
  peers: PeerCaller;
  log: Logger;
  metrics: Metrics;
  /** The sync ops' check of the caller (the owner's other access server); answers the owner or throws. */
  checkPeer(
    p: { ownerLogin?: string | undefined; sourceServerLogin?: string | undefined },
    s: Session,
  ): Promise<string>;
  /** Verifies and stores rows like a sync page (silently; pairs get delivery rows); answers the syncIds stored. */
  storeRows(peer: string, owner: string, items: SyncItem[]): Promise<string[]>;
}

export const emptyRepairStats = (): RepairStats => ({
  rangesCompared: 0,
  differences: 0,
  peerBehind: 0,
  copiesRepaired: 0,
  roundTrips: 0,
  bytes: 0,
});

export function addRepairStats(into: RepairStats, add: RepairStats): void {
  for (const k of Object.keys(emptyRepairStats()) as (keyof RepairStats)[]) into[k] += add[k];
}

/** A range of at most this many copies (on either side) is compared key by key. */
const LEAF_COPIES = 256;
/** Buckets per split: about this many copies each, so most sub-ranges are leaves after one split. */
const COPIES_PER_BUCKET = 128;
/** The comparison covers message times up to this far past the clock (a copy's timeMs is never later). */
const WINDOW_AHEAD_MS = 86_400_000;
/** Ranges split or listed at once. */
const CONCURRENCY = 8;

/**
 * Range i of a split of [from, to) into n: [from + ⌊i·w/n⌋, from + ⌊(i+1)·w/n⌋), w = to − from (exact for
 * every safe integer: the products can pass 2^53).
 */
export function splitRange(range: TimeRange, n: number): TimeRange[] {
  const from = BigInt(range.fromTimeMs);
  const w = BigInt(range.toTimeMs - range.fromTimeMs);
  const at = (i: number) => Number(from + (BigInt(i) * w) / BigInt(n));
  return Array.from({ length: n }, (_, i) => ({ fromTimeMs: at(i), toTimeMs: at(i + 1) }));
}

const sameDigest = (a: { count: number; xor: Uint8Array }, b: { count: number; xor: Uint8Array }): boolean =>
  a.count === b.count && Buffer.from(a.xor).equals(Buffer.from(b.xor));

interface Revision {
  revisionTimeMs: number;
  reencryptedAtMs: number;
}

export class AntiEntropy {
  private readonly compared: Counter;
  private readonly differing: Counter;
  private readonly repaired: Counter;
  private readonly runs: Counter;

  constructor(private readonly deps: AntiEntropyDeps) {
    const m = deps.metrics;
    this.compared = m.counter(
      'repair_ranges_compared_total',
      'Outbox time ranges whose digests anti-entropy compared',
      [],
    );
    this.differing = m.counter(
      'repair_differences_total',
      'Copies a peer held that this server lacked or held in an older revision, found by anti-entropy',
      [],
    );
    this.repaired = m.counter('repair_copies_repaired_total', 'Copies anti-entropy fetched from a peer and stored', []);
    this.runs = m.counter('repair_runs_total', 'Anti-entropy repairs of one owner with one peer, by result');
  }

  // ---- server side ----

  private async range(p: OpPayload<'DmKeys'>, s: Session): Promise<{ owner: string; range: TimeRange }> {
    const owner = await this.deps.checkPeer(p, s);
    if (p.toTimeMs <= p.fromTimeMs) throw new ShineError('BAD_FIELDS', 'toTimeMs must be after fromTimeMs');
    return { owner, range: { fromTimeMs: p.fromTimeMs, toTimeMs: p.toTimeMs } };
  }

  async digestOp(p: OpPayload<'DmDigest'>, s: Session): Promise<OpAnswer<'DmDigest'>> {
    const { owner, range } = await this.range(p, s);
    const buckets = await this.deps.store.replication.dmDigest(owner, splitRange(range, p.buckets));
    return {
      items: buckets.map((b) =>
        Object.assign(
          {},
          rangeOf(b),
          { count: b.count, xorSha256B64: toBase64(b.xor) },
          b.minTimeMs === null ? {} : { minTimeMs: b.minTimeMs, maxTimeMs: b.maxTimeMs! },
        ),
      ),
    };
  }

  async keysOp(p: OpPayload<'DmKeys'>, s: Session): Promise<OpAnswer<'DmKeys'>> {
    const { owner, range } = await this.range(p, s);
    const rows = await this.deps.store.replication.dmKeys(owner, range, MAX_KEYS_ITEMS + 1);
    const items: OpAnswer<'DmKeys'>['items'] = [];
    let hasMore = false;
    for (const row of rows) {
      const keys = outboxCopyKeys(row.primaryMessageKey, row.copies);
      // A row's copies are listed together or not at all.
      if (items.length + keys.length > MAX_KEYS_ITEMS) {
        hasMore = true;
        break;
      }
      const revision = parseSyncId(row.syncId);
      if (!revision) continue;
      for (const messageKey of keys)
        items.push({ messageKey, revisionTimeMs: revision.revisionTimeMs, reencryptedAtMs: revision.reencryptedAtMs });
    }
    return { items, hasMore };
  }

  async fetchOp(p: OpPayload<'DmFetch'>, s: Session): Promise<OpAnswer<'DmFetch'>> {
    const owner = await this.deps.checkPeer(p, s);
    // A copy is in the row of its own key, or (an incoming copy of a pair the owner sent) of its pair's outgoing key.
    const rowKeys = new Set<string>();
    for (const key of p.messageKeys) {
      rowKeys.add(key);
      const pairKey = outgoingKeyOf(key);
      if (pairKey) rowKeys.add(pairKey);
    }
    const held = new Map<string, { blob: Uint8Array; storedAtMs: number; row: string }>();
    for (const row of await this.deps.store.replication.dmRows(owner, [...rowKeys])) {
      const keys = outboxCopyKeys(row.primaryMessageKey, row.blobs.length);
      keys.forEach((k, i) =>
        held.set(k, { blob: row.blobs[i]!, storedAtMs: row.storedAtMs, row: row.primaryMessageKey }),
      );
    }
    // The asked copies grouped by the row that holds them, rows in the order of their first key; the answer takes
    // whole rows while they fit in MAX_FETCH_BYTES (the first always), so it fits in a frame.
    const rows = new Map<string, { messageKey: string; blob: Uint8Array; storedAtMs: number }[]>();
    for (const messageKey of new Set(p.messageKeys)) {
      const copy = held.get(messageKey);
      if (!copy) continue;
      const copies = rows.get(copy.row);
      if (copies) copies.push({ messageKey, ...copy });
      else rows.set(copy.row, [{ messageKey, ...copy }]);
    }
    const cut = takeWithinBytes(rows.values(), Infinity, MAX_FETCH_BYTES, (copies) =>
      copies.reduce((n, c) => n + c.blob.length, 0),
    );
    const items = cut.items
      .flat()
      .map((c) => ({ messageKey: c.messageKey, blobB64: toBase64(c.blob), storedAtMs: c.storedAtMs }));
    return { items, hasMore: cut.hasMore };
  }

  // ---- puller ----

  /**
   * Compares owner's outbox with the peer's and fetches what this server lacks or holds older. For two
   * equal histories: one DmDigest call of one bucket, and this server's digest from its index. Counts into stats as
   * it goes, so a repair that fails part way still tells what it did.
   */
  async repairOwner(
    peer: string,
    owner: string,
    signal: AbortSignal,
    stats: RepairStats = emptyRepairStats(),
  ): Promise<RepairStats> {
    try {
      await this.repair(peer, owner, signal, stats);
      this.runs.inc({ result: 'ok' });
    } catch (err) {
      this.runs.inc({ result: 'error' });
      throw err;
    } finally {
      this.compared.inc({}, stats.rangesCompared);
      this.differing.inc({}, stats.differences);
      this.repaired.inc({}, stats.copiesRepaired);
      const level = stats.differences > 0 || stats.peerBehind > 0 ? 'info' : 'debug';
      this.deps.log[level]('anti-entropy repair', { peer, owner, ...stats });
    }
    return stats;
  }

  private async repair(peer: string, owner: string, signal: AbortSignal, stats: RepairStats): Promise<void> {
    const call: PeerCall = async (op, payload) => {
      const answer = await untilAborted(this.deps.peers.call(peer, op, payload), signal);
      stats.roundTrips++;
      stats.bytes += JSON.stringify(payload).length + JSON.stringify(answer).length;
      return answer;
    };
    /** Both sides' digests of range split into n; the sub-ranges that differ, with their larger count. */
    const differing = async (range: TimeRange, n: number): Promise<Differing[]> => {
      const ranges = splitRange(range, n);
      const [theirs, ours] = await Promise.all([
        call('DmDigest', Object.assign({ ownerLogin: owner }, range, { buckets: n })),
        this.deps.store.replication.dmDigest(owner, ranges),
      ]);
      if (theirs.items.length !== n)
        throw new ShineError('INTERNAL', `DmDigest answered ${theirs.items.length} of ${n}`);
      stats.rangesCompared += n;
      return ranges.flatMap((r, i) => {
        const t = theirs.items[i]!;
        const remote = { count: t.count, xor: fromBase64(t.xorSha256B64) ?? new Uint8Array(0) };
        const local: DigestBucket = ours[i]!;
        if (sameDigest(remote, local)) return [];
        return [{ range: narrowed(r, local, t), copies: Math.max(remote.count, local.count) }];
      });
    };

    // 1. Split what differs, level by level, down to ranges small enough to list.
    const leaves: TimeRange[] = [];
    let level = await differing({ fromTimeMs: 0, toTimeMs: this.deps.clock.now() + WINDOW_AHEAD_MS }, 1);
    while (level.length > 0) {
      const next: Differing[] = [];
      await eachAtOnce(level, CONCURRENCY, async ({ range, copies }) => {
        const width = range.toTimeMs - range.fromTimeMs;
        if (copies <= LEAF_COPIES || width <= 1) leaves.push(range);
        else
          next.push(
            ...(await differing(
              range,
              Math.min(MAX_DIGEST_BUCKETS, width, Math.max(2, Math.ceil(copies / COPIES_PER_BUCKET))),
            )),
          );
      });
      level = next;
    }
    // 2. List the small ranges on both sides: the rows this server lacks or holds older.
    const wanted: WantedRow[] = [];
    await eachAtOnce(leaves, CONCURRENCY, async (leaf) => {
      wanted.push(...(await this.diffLeaf(peer, owner, leaf, call, stats)));
    });
    // 3. Fetch them in batches of whole rows (up to MAX_FETCH_KEYS keys), each batch stored while the next is
    // fetched. An answer cut at the peer's byte limit (large copies) leaves rows out: they are asked again, and
    // the batches after it ask for as many rows as it carried (twice that again after an answer not cut), so after
    // the first cut the peer mostly reads only rows it answers. A row the peer answered in part (it lacks a copy) is
    // skipped by storeFetched, as one deleted meanwhile; the next repair looks at it again.
    const queue = wanted;
    let taken = 0;
    let rowsPerAsk = Infinity;
    const fetchNext = () => {
      const rows: WantedRow[] = [];
      let keys = 0;
      while (taken < queue.length && rows.length < rowsPerAsk && keys + queue[taken]!.keys.length <= MAX_FETCH_KEYS) {
        keys += queue[taken]!.keys.length;
        rows.push(queue[taken++]!);
      }
      if (rows.length === 0) return null;
      return awaitedLater(
        call('DmFetch', { ownerLogin: owner, messageKeys: rows.flatMap((r) => r.keys) }).then((a) => ({ rows, a })),
      );
    };
    let next = fetchNext();
    while (next) {
      const { rows, a } = await next;
      if (a.hasMore) {
        const answered = new Set(a.items.map((c) => c.messageKey));
        const rest = rows.filter((r) => !r.keys.some((k) => answered.has(k)));
        if (rest.length === rows.length) throw new ShineError('INTERNAL', 'DmFetch answered hasMore with no row');
        queue.push(...rest);
        rowsPerAsk = rows.length - rest.length;
      } else if (rowsPerAsk !== Infinity) rowsPerAsk *= 2;
      next = fetchNext();
      stats.copiesRepaired += await this.storeFetched(peer, owner, rows, a.items);
    }
  }

  /** One small range's keys on both sides: the peer's rows with a copy this server lacks or holds older. */
  private async diffLeaf(
    peer: string,
    owner: string,
    range: TimeRange,
    call: PeerCall,
    stats: RepairStats,
  ): Promise<WantedRow[]> {
    const theirs = await call('DmKeys', { ownerLogin: owner, ...range });
    if (theirs.hasMore)
      this.deps.log.warn('anti-entropy: more copies in one range than DmKeys lists', { peer, owner, ...range });
    const ours = new Map<string, Revision>();
    for (const row of await this.deps.store.replication.dmKeys(owner, range, 2 * MAX_KEYS_ITEMS)) {
      const revision = parseSyncId(row.syncId);
      if (revision) for (const k of outboxCopyKeys(row.primaryMessageKey, row.copies)) ours.set(k, revision);
    }
    const remote = new Map(theirs.items.map((i) => [i.messageKey, i]));
    for (const [key, revision] of ours) {
      const r = remote.get(key);
      if (!r || compareRevision(r, revision) < 0) stats.peerBehind++;
    }
    const behind = (k: string): boolean => {
      const mine = ours.get(k);
      return !mine || compareRevision(mine, remote.get(k)!) < 0;
    };
    // The peer's rows: a pair (both copies listed) under its outgoing key, else each copy alone.
    const rows = new Map<string, string[]>();
    for (const key of remote.keys()) {
      const pairKey = outgoingKeyOf(key);
      const isPair = pairKey !== null && remote.has(pairKey) && remote.has(incomingKeyOf(pairKey));
      rows.set(isPair ? pairKey : key, isPair ? [incomingKeyOf(pairKey), pairKey] : [key]);
    }
    const wanted: WantedRow[] = [];
    for (const [primary, keys] of rows) {
      const differing = keys.filter(behind).length;
      if (differing === 0) continue;
      stats.differences += differing;
      wanted.push({ primary, keys, revision: remote.get(primary)! });
    }
    return wanted;
  }

  /** Stores fetched rows as pulled ones (a row the peer no longer holds whole is skipped); answers copies stored. */
  private async storeFetched(
    peer: string,
    owner: string,
    rows: WantedRow[],
    got: OpAnswer<'DmFetch'>['items'],
  ): Promise<number> {
    const byKey = new Map(got.map((i) => [i.messageKey, i]));
    const items: SyncItem[] = [];
    for (const row of rows) {
      const copies = row.keys.map((k) => byKey.get(k));
      if (copies.some((c) => !c)) continue; // deleted at the peer meanwhile: nothing to store
      items.push({
        syncId: syncIdOf(row.primary, row.revision.revisionTimeMs, row.revision.reencryptedAtMs),
        primaryMessageKey: row.primary,
        storedAtMs: copies[0]!.storedAtMs ?? this.deps.clock.now(),
        blobsB64: copies.map((c) => c!.blobB64),
      });
    }
    const stored = new Set(await this.deps.storeRows(peer, owner, items));
    return items.filter((i) => stored.has(i.syncId)).reduce((n, i) => n + i.blobsB64.length, 0);
  }
}

type PeerCall = <K extends OpName>(op: K, payload: OpPayload<K>) => Promise<OpAnswer<K>>;

/** A range whose digests differ, with the larger of its two counts. */
interface Differing {
  range: TimeRange;
  copies: number;
}

/** A row of the peer's to fetch: its key, its copies' keys, its revision there. */
interface WantedRow {
  primary: string;
  keys: string[];
  revision: Revision;
}

const rangeOf = (r: TimeRange): TimeRange => ({ fromTimeMs: r.fromTimeMs, toTimeMs: r.toTimeMs });

/**
 * A differing range cut down to where either side has copies, when the peer says where its are
 * (minTimeMs/maxTimeMs), so the next split divides the copies rather than empty time.
 */
function narrowed(
  range: TimeRange,
  local: DigestBucket,
  remote: { count: number; minTimeMs?: number | undefined; maxTimeMs?: number | undefined },
): TimeRange {
  if (remote.count > 0 && (remote.minTimeMs === undefined || remote.maxTimeMs === undefined)) return range;
  const mins = [local.minTimeMs, remote.count > 0 ? remote.minTimeMs! : null].filter((t): t is number => t !== null);
  const maxs = [local.maxTimeMs, remote.count > 0 ? remote.maxTimeMs! : null].filter((t): t is number => t !== null);
  if (mins.length === 0) return range;
  return {
    fromTimeMs: Math.max(range.fromTimeMs, Math.min(...mins)),
    toTimeMs: Math.min(range.toTimeMs, Math.max(...maxs) + 1),
  };
}
