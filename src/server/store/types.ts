/**
 * The storage contract. SQLite (src/server/store/sqlite) implements it now; a PostgreSQL
 * implementation will satisfy the same interface. Every method is atomic: it runs in one transaction
 * and, when its promise resolves, what it wrote is on stable storage (docs/protocol.md §9).
 *
 * The store holds the data rules that must hold inside one transaction (latest revision wins,
 * tombstones win, receipts set readAt, outbox rows follow copies). Decisions that need the network or
 * the directory are made by the services above it.
 */
import type { Container } from '../../protocol/container.js';
import type { ServerDescriptor, UserProfile } from '../../protocol/identity.js';
import type { DeliveryState, DirectMessageEvent, HistoryItem } from '../../protocol/ops.js';

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
  delivery: { state: DeliveryState; attempt: number; acceptedAtMs: number; nextAttemptAtMs: number | null } | null;
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
}

export interface DeliveryUpdate {
  state: DeliveryState;
  attempt: number;
  nextAttemptAtMs: number | null;
  lastError: string | null;
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

export interface Store {
  /** Creates or migrates the schema. Idempotent. */
  migrate(): Promise<void>;
  /** Cheap liveness check for /healthz. */
  ping(): Promise<void>;
  close(): Promise<void>;

  getMeta(key: string): Promise<string | null>;
  setMeta(key: string, value: string): Promise<void>;

  // ---- directory (docs/protocol.md §4) ----
  getUser(login: string): Promise<UserRecord | null>;
  /** Writes the profile and its access servers; the caller has checked signature and version rules. */
  putUser(profile: UserProfile, source: ProfileSource, nowMs: number): Promise<void>;
  getServer(serverLogin: string): Promise<ServerRecord | null>;
  putServer(descriptor: ServerDescriptor, source: ServerRecord['source']): Promise<void>;
  listServers(): Promise<ServerRecord[]>;

  // ---- direct messages (docs/protocol.md §3, §5.2) ----
  /** Stores both copies of a pair, its delivery row and outbox rows in one transaction. */
  storePair(input: StorePairInput): Promise<StorePairResult>;
  /** Stores one copy (an incoming copy from another server, or a single copy from sync). */
  storeCopy(input: StoreCopyInput): Promise<CopyResult>;
  getCopy(messageKey: string): Promise<StoredCopy | null>;
  getDirectMessages(q: HistoryQuery): Promise<{ items: HistoryItem[]; hasMore: boolean }>;
  getConversations(owner: string, limit: number): Promise<ConversationRow[]>;

  // ---- delivery rows (docs/protocol.md §6) ----
  getDelivery(outgoingKey: string): Promise<DeliveryRow | null>;
  /** Rows due at nowMs (state accepted, not leased), oldest first, through the partial index. */
  dueDeliveries(nowMs: number, limit: number): Promise<DeliveryRow[]>;
  /** Leases a row if it still has rowVersion; returns the leased row (new rowVersion) or null. */
  claimDelivery(outgoingKey: string, rowVersion: number, leaseUntilMs: number): Promise<DeliveryRow | null>;
  /** Writes an attempt's outcome if the row still has rowVersion; false when someone else changed it. */
  finishDelivery(outgoingKey: string, rowVersion: number, update: DeliveryUpdate, nowMs: number): Promise<boolean>;
  /** Marks the given revision delivered if it is still accepted; true when it changed. */
  markDelivered(
    outgoingKey: string,
    revision: { revisionTimeMs: number; reencryptedAtMs: number },
    nowMs: number,
  ): Promise<boolean>;
  /**
   * Makes accepted rows whose recipient uses serverLogin due now; returns how many. Rows accepted after
   * acceptedBeforeMs are left alone: their first attempt may still be running outside the worker.
   */
  wakeDeliveriesFor(serverLogin: string, nowMs: number, acceptedBeforeMs: number): Promise<number>;
  /** Accepted rows (not yet delivered) whose recipient uses serverLogin, for /debug/peers. */
  countAcceptedFor(serverLogin: string): Promise<number>;
  countDeliveriesByState(): Promise<Record<DeliveryState, number>>;
  /** Rows in a state, newest first, for /debug/delivery. */
  listDeliveries(state: DeliveryState, limit: number): Promise<DeliveryRow[]>;

  // ---- replication (docs/protocol.md §7) ----
  /** Applies acks (only where the syncId is still the row's current one), then returns unsynced DM outbox rows. */
  dmSyncPage(q: SyncPageQuery): Promise<SyncPage<DmSyncRow>>;
  /** The same over user_settings; afterKey is a setting key. */
  settingsSyncPage(q: SyncPageQuery): Promise<SyncPage<SettingRow & { syncId: string }>>;
  /** Marks settings and DM outbox rows of owner (or of everyone) unsynced. */
  markUnsynced(owner: string | null): Promise<{ updated: number; dmUpdated: number }>;
  /** Servers that share at least one user with serverLogin. */
  peerServersOf(serverLogin: string): Promise<string[]>;
  /** Logins whose current access servers include both servers. */
  sharedUsers(serverA: string, serverB: string): Promise<string[]>;
  /** Outbox rows of owner by synced flag, for /debug/outbox. */
  outboxCounts(owner: string): Promise<{ synced: number; unsynced: number }>;

  // ---- server sessions (docs/protocol.md §5.1) ----
  /** Records a ServerAuth nonce; false when (serverLogin, nonce) was seen after sinceMs. Prunes older ones. */
  rememberS2sNonce(serverLogin: string, nonceB64: string, nowMs: number, sinceMs: number): Promise<boolean>;

  // ---- per-device delivery to sessions (docs/protocol.md §5.3) ----
  /** Records that a device logged in; returns when it was first seen (now, for a new device). */
  touchDevice(login: string, deviceId: string, nowMs: number): Promise<{ firstSeenAtMs: number; isNew: boolean }>;
  /**
   * Copies of owner stored since the device was first seen and not acknowledged at their revision,
   * in (storedAtMs, messageKey) order after the cursor.
   */
  pendingForDevice(
    login: string,
    deviceId: string,
    after: { storedAtMs: number; messageKey: string } | null,
    limit: number,
  ): Promise<StoredCopy[]>;
  /** Acknowledges the current revision of each named copy of login for the device; returns how many exist. */
  ackForDevice(login: string, deviceId: string, messageKeys: readonly string[], nowMs: number): Promise<number>;
  /** Forgets devices not seen since cutoffMs (and their acknowledgements). */
  forgetDevicesBefore(cutoffMs: number): Promise<number>;

  // ---- settings (docs/protocol.md §5.2) ----
  /** Last writer wins by updatedAtMs, ties by value bytes; returns the stored row and whether it changed. */
  setSetting(input: SetSettingInput): Promise<{ applied: boolean; updatedAtMs: number }>;
  getSettings(owner: string, keys?: readonly string[]): Promise<SettingRow[]>;
}
