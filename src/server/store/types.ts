/**
 * The storage contract, split by area: each service depends only on the areas it uses. Two dialects
 * implement every area (src/server/store/sqlite, src/server/store/postgres). Every method is atomic: it
 * runs in one transaction and, when its promise resolves, what it wrote is on stable storage
 * (docs/protocol.md §9).
 *
 * What a stored copy does (latest revision wins, tombstones win, receipts set readAt, deletes remove
 * their targets, outbox rows follow copies) is decided by the pure functions of ./rules.ts, which both
 * dialects call. Decisions that need the network or the directory are made by the services above.
 *
 * Isolation. SQLite has one writer, so every write method is serializable there. On PostgreSQL several
 * processes share the database; each method's comment says what it needs ("Isolation: …") and the
 * PostgreSQL dialect provides it with row locks, per-key advisory transaction locks or conditional
 * updates.
 */
import type { Container } from '../../protocol/container.js';
import type { ServerDescriptor, UserProfile } from '../../protocol/identity.js';
import type { DeliveryState, DirectMessageEvent, HistoryItem } from '../../protocol/ops.js';
import type { DeliveryReceipt } from '../../protocol/receipt.js';
import type { PushStore } from '../push/store.js';

export type ProfileSource = 'local' | 'imported' | 'static';

export interface UserRecord {
  profile: UserProfile;
  source: ProfileSource;
  /** When this server last stored or refreshed the profile. */
  fetchedAtMs: number;
}

export interface ServerRecord {
  descriptor: ServerDescriptor;
  source: 'static' | 'peer' | 'self';
}

/** What happened to one copy. */
export type CopyOutcome = 'inserted' | 'updated' | 'unchanged' | 'tombstoned';

export interface CopyResult {
  messageKey: string;
  outcome: CopyOutcome;
  /** storedAtMs of the copy as it is now in the database (0 when tombstoned). */
  storedAtMs: number;
}

/** How to write the outbox row(s) for the copies of one store call (docs/protocol.md §7). */
export interface OutboxPolicy {
  /**
   * The copies' owners that get an outbox row (the local users among them), each with its row's
   * `synced` flag: true when the copy came from that owner's other access server, which holds it.
   */
  owners: ReadonlyMap<string, boolean>;
}

export interface StorePairInput {
  incoming: Container;
  outgoing: Container;
  nowMs: number;
  outbox: OutboxPolicy;
  /**
   * The delivery row to (re)start for this revision of the pair, or null for none (e.g. a pair whose
   * recipient is only on this server is written already `delivered`). Only applied when the pair's
   * outgoing copy was inserted or updated to a newer revision.
   */
  delivery: {
    state: DeliveryState;
    attempt: number;
    acceptedAtMs: number;
    nextAttemptAtMs: number | null;
    /**
     * Stores the row already leased until then (the process that stores it runs the first attempt at
     * once, so no other process's worker may claim it meanwhile — docs/protocol.md §6.6). Default none.
     */
    leaseUntilMs?: number | null;
    /** The delivery's proof (docs/protocol.md §13.1), with `delivered`. Default none. */
    proof?: DeliveryReceipt | null;
  } | null;
  /** The sending session's device: its own copies count as acknowledged (docs/protocol.md §5.3). */
  senderDevice?: { login: string; deviceId: string } | undefined;
  /** Stored by catch-up sync: never replayed to devices (docs/protocol.md §5.3). */
  silent?: boolean;
}

export interface StorePairResult {
  incoming: CopyResult;
  outgoing: CopyResult;
  /** The delivery state of the pair's current revision after the call. */
  deliveryState: DeliveryState | null;
}

export interface StoreCopyInput {
  copy: Container;
  nowMs: number;
  outbox: OutboxPolicy;
  /** Stored by catch-up sync: never replayed to devices (docs/protocol.md §5.3). */
  silent?: boolean;
}

export interface HistoryQuery {
  owner: string;
  peer: string;
  beforeTimeMs: number;
  beforeMessageKey: string;
  limit: number;
}

export interface ConversationRow {
  peerLogin: string;
  lastTimeMs: number;
  lastMessageKey: string;
  unreadCount: number;
}

/** A stored copy as events and replay need it: the DirectMessage event with raw bytes. */
export type StoredCopy = Omit<DirectMessageEvent, 'blobB64'> & { blob: Uint8Array };

export interface SettingRow {
  key: string;
  value: Uint8Array;
  updatedAtMs: number;
  storedAtMs: number;
}

export interface SetSettingInput {
  owner: string;
  key: string;
  value: Uint8Array;
  updatedAtMs: number;
  nowMs: number;
  /** True when the value came from the owner's other access server. */
  synced: boolean;
}

/** A delivery row (docs/protocol.md §6) of one outgoing pair. */
export interface DeliveryRow {
  outgoingKey: string;
  baseKey: string;
  senderLogin: string;
  recipientLogin: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  state: DeliveryState;
  /** Index in the retry schedule of the next regular attempt. */
  attempt: number;
  acceptedAtMs: number;
  nextAttemptAtMs: number | null;
  leaseUntilMs: number | null;
  rowVersion: number;
  lastError: string | null;
  /** The receipt proving the delivery of this revision (docs/protocol.md §13.1), or null. */
  proof: DeliveryReceipt | null;
}

export interface DeliveryUpdate {
  state: DeliveryState;
  attempt: number;
  nextAttemptAtMs: number | null;
  lastError: string | null;
  /** The proof kept with the row (null or omitted: none). */
  proof?: DeliveryReceipt | null;
}

/** One page of a sync protocol (docs/protocol.md §7), after the acks of the previous page were applied. */
export interface SyncPageQuery {
  owner: string;
  ackSyncIds: readonly string[];
  afterStoredAtMs: number;
  afterKey: string;
  limit: number;
  maxBytes: number;
}

export interface DmSyncRow {
  syncId: string;
  primaryMessageKey: string;
  storedAtMs: number;
  blobs: Uint8Array[];
}

export interface SyncPage<T> {
  items: T[];
  hasMore: boolean;
}

/** A half-open range of message times, [fromTimeMs, toTimeMs). */
export interface TimeRange {
  fromTimeMs: number;
  toTimeMs: number;
}

/** The copies of one range of an owner's outbox (docs/protocol.md §7, DmDigest). */
export interface DigestBucket extends TimeRange {
  count: number;
  /** The xor of the copies' digests (32 zero bytes when empty). */
  xor: Uint8Array;
  /** The earliest and latest message timeMs among them (null when empty). */
  minTimeMs: number | null;
  maxTimeMs: number | null;
}

/** An outbox row as DmKeys lists it: its copies follow from the key and their number (rules.outboxCopyKeys). */
export interface OutboxKeyRow {
  primaryMessageKey: string;
  syncId: string;
  copies: number;
}

/** Small per-server values (keys, identities) in server_meta. */
export interface MetaStore {
  getMeta(key: string): Promise<string | null>;
  /** Isolation: a single upsert; the last writer wins. */
  setMeta(key: string, value: string): Promise<void>;
}

/** The directory's tables: users, their current access servers, server descriptors (docs/protocol.md §4). */
export interface DirectoryStore {
  getUser(login: string): Promise<UserRecord | null>;
  /**
   * Writes the profile and its access servers; the caller has checked signature and version rules.
   * Isolation: the user row and its access-server rows change together (row lock on the user).
   */
  putUser(profile: UserProfile, source: ProfileSource, nowMs: number): Promise<void>;
  getServer(serverLogin: string): Promise<ServerRecord | null>;
  /** Isolation: a single upsert. */
  putServer(descriptor: ServerDescriptor, source: ServerRecord['source']): Promise<void>;
  listServers(): Promise<ServerRecord[]>;
  /** Servers that share at least one user with serverLogin. */
  peerServersOf(serverLogin: string): Promise<string[]>;
  /** Logins whose current access servers include both servers. */
  sharedUsers(serverA: string, serverB: string): Promise<string[]>;
}

/** Stored copies (docs/protocol.md §3, §5.2). */
export interface MessageStore {
  /**
   * Stores both copies of a pair, its delivery row and outbox rows in one transaction.
   * Isolation: serializable per owner — two processes storing copies of one owner (the same copy, a
   * receipt and its target, a delete and its target) must not interleave (an owner lock, taken in
   * login order when a pair has two owners).
   */
  storePair(input: StorePairInput): Promise<StorePairResult>;
  /** Stores one copy (an incoming copy from another server, or a single copy from sync). Isolation: as storePair. */
  storeCopy(input: StoreCopyInput): Promise<CopyResult>;
  getCopy(messageKey: string): Promise<StoredCopy | null>;
  getDirectMessages(q: HistoryQuery): Promise<{ items: HistoryItem[]; hasMore: boolean }>;
  getConversations(owner: string, limit: number): Promise<ConversationRow[]>;
}

/** Delivery rows (docs/protocol.md §6). Every write is a compare-and-set on row_version or state. */
export interface DeliveryStore {
  getDelivery(outgoingKey: string): Promise<DeliveryRow | null>;
  /** The rows of outgoingKeys in their order (null where there is none), read by one statement. */
  getDeliveries(outgoingKeys: readonly string[]): Promise<(DeliveryRow | null)[]>;
  /** Rows due at nowMs (state accepted, not leased), oldest first, through the partial index. */
  dueDeliveries(nowMs: number, limit: number): Promise<DeliveryRow[]>;
  /**
   * Leases a row if it still has rowVersion; returns the leased row (new rowVersion) or null.
   * Isolation: a conditional update; of several processes claiming one row, exactly one gets it.
   */
  claimDelivery(outgoingKey: string, rowVersion: number, leaseUntilMs: number): Promise<DeliveryRow | null>;
  /** Writes an attempt's outcome if the row still has rowVersion; false when someone else changed it. */
  finishDelivery(outgoingKey: string, rowVersion: number, update: DeliveryUpdate, nowMs: number): Promise<boolean>;
  /** Marks the given revision delivered, with its proof, if it is still accepted; true when it changed. */
  markDelivered(
    outgoingKey: string,
    revision: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
    proof: DeliveryReceipt | null,
  ): Promise<boolean>;
  /** Sets the proof of the given revision if its row is delivered for it; true when it changed. */
  setDeliveryProof(
    outgoingKey: string,
    revision: { revisionTimeMs: number; reencryptedAtMs: number },
    proof: DeliveryReceipt | null,
  ): Promise<boolean>;
  /**
   * Makes accepted rows whose recipient uses serverLogin due now; returns how many. A leased row (its first
   * attempt or a worker's attempt still running) stays leased: dueDeliveries leaves it out until the lease
   * is released or runs out.
   */
  wakeDeliveriesFor(serverLogin: string, nowMs: number): Promise<number>;
  /** Accepted rows (not yet delivered) whose recipient uses serverLogin, for /debug/peers. */
  countAcceptedFor(serverLogin: string): Promise<number>;
  countDeliveriesByState(): Promise<Record<DeliveryState, number>>;
  /** Rows in a state, newest first, for /debug/delivery. */
  listDeliveries(state: DeliveryState, limit: number): Promise<DeliveryRow[]>;
}

/** The outboxes a user's other access server pulls (docs/protocol.md §7). */
export interface ReplicationStore {
  /**
   * Applies acks (only where the syncId is still the row's current one), then returns unsynced DM
   * outbox rows. Isolation: each ack is a conditional update on sync_id, so an ack never marks a newer
   * revision synced.
   */
  dmSyncPage(q: SyncPageQuery): Promise<SyncPage<DmSyncRow>>;
  /** The same over user_settings; afterKey is a setting key. */
  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>>;
  /** Marks settings and DM outbox rows of owner (or of everyone) unsynced. */
  markUnsynced(owner: string | null): Promise<{ updated: number; dmUpdated: number }>;
  /** Outbox rows of owner by synced flag, for /debug/outbox. */
  outboxCounts(owner: string): Promise<{ synced: number; unsynced: number }>;
  /**
   * Per range (ascending, disjoint) the number of owner's outbox copies whose message timeMs lies in it
   * and the xor of their digests; read from an index, never a blob.
   */
  dmDigest(owner: string, ranges: readonly TimeRange[]): Promise<DigestBucket[]>;
  /** Owner's outbox rows with message timeMs in the range, in (timeMs, primaryMessageKey) order, at most limit. */
  dmKeys(owner: string, range: TimeRange, limit: number): Promise<OutboxKeyRow[]>;
  /** Owner's outbox rows with these primary keys, with their blobs (those that exist). */
  dmRows(owner: string, primaryKeys: readonly string[]): Promise<DmSyncRow[]>;
}

/** ServerAuth nonces (docs/protocol.md §5.1), shared by every process of the server. */
export interface NonceStore {
  /**
   * Records a ServerAuth nonce; false when (serverLogin, nonce) was seen after sinceMs. Prunes older ones.
   * Isolation: the insert is the check (a primary key), so two processes never both accept one nonce.
   */
  rememberS2sNonce(serverLogin: string, nonceB64: string, nowMs: number, sinceMs: number): Promise<boolean>;
}

/** Per-device delivery to sessions (docs/protocol.md §5.3). */
export interface DeviceStore {
  /**
   * Records that a device logged in; returns when it was first seen (now, for a new device).
   * Isolation: an upsert; of two processes logging in one new device, one sees isNew.
   */
  touchDevice(login: string, deviceId: string, nowMs: number): Promise<{ firstSeenAtMs: number; isNew: boolean }>;
  /**
   * Copies of owner stored since the device was first seen and not acknowledged at their revision,
   * in (storedAtMs, messageKey) order after the cursor. Only copies stored at or after the device's
   * replay floor are read (advanceReplayFloor).
   */
  pendingForDevice(
    login: string,
    deviceId: string,
    after: { storedAtMs: number; messageKey: string } | null,
    limit: number,
  ): Promise<StoredCopy[]>;
  /**
   * Acknowledges the current revision of each named copy of login for the device; returns how many exist.
   * Isolation: an acknowledgement only moves forward (a conditional upsert).
   */
  ackForDevice(login: string, deviceId: string, messageKeys: readonly string[], nowMs: number): Promise<number>;
  /**
   * Raises the device's replay floor to floorMs (never lowers it). The caller vouches that every copy
   * pendingForDevice could return below floorMs is acknowledged, and that no copy will be stored below it
   * later: a copy's storedAtMs is the storing process's clock, and each new revision takes a new one.
   */
  advanceReplayFloor(login: string, deviceId: string, floorMs: number): Promise<void>;
  /** Forgets devices not seen since cutoffMs (and their acknowledgements). */
  forgetDevicesBefore(cutoffMs: number): Promise<number>;
}

/** Synced user settings (docs/protocol.md §5.2). */
export interface SettingsStore {
  /**
   * Last writer wins by updatedAtMs, ties by value bytes (rules.settingWins); returns the stored row and
   * whether it changed. Isolation: read and write under a lock on the (owner, key) row.
   */
  setSetting(input: SetSettingInput): Promise<{ applied: boolean; updatedAtMs: number }>;
  /**
   * One GetUserSettings answer's rows: owner's settings (or only keys) after afterKey in the byte order of the keys'
   * UTF-8, deleted ones left out, whole rows while rules.settingAnswerBytes adds up to maxBytes (the first always).
   * Reads no value past the cut.
   */
  settingsPage(q: SettingsPageQuery): Promise<{ items: SettingRow[]; hasMore: boolean }>;
}

export interface SettingsPageQuery {
  owner: string;
  keys?: readonly string[] | undefined;
  afterKey: string;
  maxBytes: number;
}

/** One process of this server, as its heartbeat row shows it (docs/protocol.md §9.2). */
export interface ProcessRecord {
  processId: string;
  startedAtMs: number;
  heartbeatAtMs: number;
  /** Whether the process fans events out through Redis. */
  redis: boolean;
}

/** The processes of one server on one database, and the work only one of them may do at a time. */
export interface ProcessStore {
  /** Writes (or refreshes) this process's heartbeat row. */
  heartbeat(record: ProcessRecord): Promise<void>;
  /** Processes whose heartbeat is not older than sinceMs. */
  liveProcesses(sinceMs: number): Promise<ProcessRecord[]>;
  removeProcess(processId: string): Promise<void>;
  /**
   * Runs fn if no other process holds the named lock, holding it meanwhile; returns false without
   * running fn when another process holds it. SQLite (one process) always runs fn.
   */
  exclusively(name: string, fn: () => Promise<void>): Promise<boolean>;
}

/** A stored copy as `shine check` re-verifies it: the columns that must agree with its blob. */
export interface CheckCopyRow {
  messageKey: string;
  owner: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  blob: Uint8Array;
}

/** What the database's own check of its pages and indexes found (docs/operations.md, `shine check`). */
export interface IntegrityReport {
  /** What was checked, in words (it differs by dialect). */
  method: string;
  problems: string[];
}

/** An outbox row to upsert (dm_sync_outbox; the owner's outbox key is its copy's messageKey). */
export interface OutboxRow {
  owner: string;
  primaryMessageKey: string;
  syncId: string;
  storedAtMs: number;
  blobs: Uint8Array[];
  synced: boolean;
  /** The message's own timeMs (from its key), where anti-entropy places the row (docs/protocol.md §7). */
  timeMs: number;
  /** The xor of sha256(`messageKey|revisionTimeMs|reencryptedAtMs`) over the row's copies (rules.outboxDigest). */
  digest: Uint8Array;
}

/** An outbox row whose owner has no copy of that key. */

export interface OrphanOutboxRow {
  owner: string;
  primaryMessageKey: string;
  blobs: Uint8Array[];
}

/** Rows that do not agree with the stored copies (docs/operations.md, `shine check`). */
export interface RowFindings {
  /** Delivery rows (outgoing keys) of a pair of which neither copy exists. */
  deliveryWithoutCopy: string[];
  /** Outbox rows whose owner holds no copy of their key. */
  outboxWithoutCopy: OrphanOutboxRow[];
  /** Device acknowledgements (owner|device|messageKey) of a copy that does not exist. */
  acksWithoutCopy: string[];
  /** Device acknowledgements (owner|device|messageKey) of a device that does not exist. */
  acksWithoutDevice: string[];
  /** Outbox rows (owner|key) whose syncId names another revision than their copy's. */
  outboxBehindCopy: string[];
  /** Copies (owner|key) of a user of this server (an access server of theirs is this database's `self`) without an outbox row. */
  outboxMissing: string[];
  /** Delivery rows (outgoing keys) whose revision is newer than their outgoing copy's. */
  deliveryAheadOfCopy: string[];
}

/** What `shine check` reads and the few repairs it may make; every repair re-checks its condition. */
export interface CheckStore {
  /** The database's own check of pages and indexes. */
  integrity(): Promise<IntegrityReport>;
  /** Rebuilds every index of the schema (safe: an index holds nothing a table does not). */
  rebuildIndexes(): Promise<void>;
  /** Stored copies in messageKey order after afterKey. */
  copiesPage(afterKey: string, limit: number): Promise<CheckCopyRow[]>;
  findRows(): Promise<RowFindings>;
  /** Removes those delivery rows whose pair still has no copy; returns how many. */
  removeDeliveriesWithoutCopy(outgoingKeys: readonly string[]): Promise<number>;
  /** Removes the outbox row if its owner still has no copy of its key; true when removed. */
  removeOutboxWithoutCopy(owner: string, primaryMessageKey: string): Promise<boolean>;
  /** Removes acknowledgements whose copy or device does not exist; returns how many. */
  removeOrphanAcks(): Promise<number>;
  /**
   * Writes the outbox row of a copy again (unsynced) if the owner's copy still has the row's revision
   * (its syncId); true when written.
   */
  rewriteOutbox(row: OutboxRow): Promise<boolean>;
}

// ---- user chains (docs/protocol.md §14) ----

/** A chain's last block as the store keeps it; hashes are 64 lowercase hex digits, as on the wire. */
export interface ChainHead {
  login: string;
  index: number;
  hash: string;
  timeMs: number;
  /** The server-local event-log position of the head's block (docs/protocol.md §14.2). */
  globalSeq: number;
}

/** A block to append: its decoded fields the store checks the link with, and its bytes. */
export interface ChainBlockInput {
  login: string;
  index: number;
  /** The previous block's hash (hex); 64 zeros for a genesis block. */
  prevHash: string;
  hash: string;
  timeMs: number;
  bytes: Uint8Array;
}

export interface ChainBlockRow {
  index: number;
  hash: string;
  timeMs: number;
  globalSeq: number;
  bytes: Uint8Array;
}

/**
 * What an append found (src/server/store/rules.ts, chainLink): `stored` (new head), `known` (this very block is
 * held), `gap` (index beyond head + 1), `mismatch` (head + 1 with another prevHash, or a genesis block with a
 * non-zero one), `diverged` (another block is held at that index), `time` (timeMs before the head's).
 */
export type ChainLink = 'stored' | 'known' | 'gap' | 'mismatch' | 'diverged' | 'time';

export interface AppendBlockResult {
  link: ChainLink;
  /** The head after the call (null: the chain is empty). */
  head: ChainHead | null;
  /** globalSeq of the block, when stored or known. */
  globalSeq: number | null;
}

/** A chain marked for a full download from its authoritative server (docs/protocol.md §14.3). */
export interface ResyncMarker {
  login: string;
  source: string;
  startedAtMs: number;
}

/** A partner's last acknowledged block of one chain. */
export interface PartnerAck {
  partner: string;
  login: string;
  index: number;
  hash: string;
  ackedAtMs: number;
}

/**
 * User chains (docs/protocol.md §14). Isolation: every append and replacement takes the one globalSeq counter
 * row first (its row lock on PostgreSQL, the single writer on SQLite), so globalSeq grows in commit order and
 * a GetChainHeads cursor never skips a chain (decision 43).
 */
export interface ChainStore {
  head(login: string): Promise<ChainHead | null>;
  /** Blocks from fromIndex on, at most limit, in index order. */
  blocks(login: string, fromIndex: number, limit: number): Promise<ChainBlockRow[]>;
  /** The hash of the block at index, or null. */
  hashAt(login: string, index: number): Promise<string | null>;
  /** Appends a block when it follows the head (checked inside the transaction); otherwise says why not. */
  append(block: ChainBlockInput): Promise<AppendBlockResult>;
  /**
   * Replaces a whole chain (blocks verified from genesis by the caller) and removes its resync marker, in one
   * transaction; answers the head replaced.
   */
  replace(login: string, blocks: readonly ChainBlockInput[]): Promise<{ replaced: ChainHead | null; head: ChainHead }>;
  /** Heads whose globalSeq is after the cursor, in globalSeq order. */
  headsAfter(afterGlobalSeq: number, limit: number): Promise<ChainHead[]>;
  /** Writes the marker unless one is there already; answers the marker in force. */
  markResync(marker: ResyncMarker): Promise<ResyncMarker>;
  resyncMarkers(): Promise<ResyncMarker[]>;
  clearResync(login: string): Promise<void>;
  partnerCursor(partner: string): Promise<number>;
  setPartnerCursor(partner: string, afterGlobalSeq: number): Promise<void>;
  /** Records that partner holds login's chain up to index (never moves an ack back). */
  ackPartner(ack: PartnerAck): Promise<void>;
  partnerAcks(login: string): Promise<PartnerAck[]>;
}

/** Every area of one database, with its lifecycle. Services take the areas they use, one by one. */
export interface Store {
  /** Which dialect this is. */
  readonly dialect: 'sqlite' | 'postgres';
  readonly meta: MetaStore;
  readonly directory: DirectoryStore;
  readonly messages: MessageStore;
  readonly delivery: DeliveryStore;
  readonly replication: ReplicationStore;
  readonly nonces: NonceStore;
  readonly devices: DeviceStore;
  readonly settings: SettingsStore;
  readonly push: PushStore;
  readonly processes: ProcessStore;
  readonly check: CheckStore;
  readonly chains: ChainStore;
  /**
   * Transactions committed and writes in them since the store opened (SQLite groups many writes into
   * one commit; on PostgreSQL each write is its own transaction), and WAL checkpoints run by SQLite's
   * checkpoint threads (0 on PostgreSQL, which checkpoints by itself), for /metrics and benchmarks.
   */
  commitStats(): { commits: number; writes: number; checkpoints: number };
  /** Creates or migrates the schema. Idempotent; on PostgreSQL one process at a time. */
  migrate(): Promise<void>;
  /** Cheap liveness check for /healthz. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
