/**
 * Operation payload schemas and answer types (docs/protocol.md §5). The server validates every payload against
 * these before a handler runs; the SDK uses the same types.
 */
import { z } from 'zod';
import { DEVICE_ID_RE, LOGIN_RE } from './login.js';
import type { DeliveryReceipt } from './receipt.js';

const login = z.string().regex(LOGIN_RE);
const b64 = z.string().max(4 * 1024 * 1024);
const ms = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);

const profile = z.object({
  login: z.string(),
  signKeyB64: z.string(),
  encKeyB64: z.string(),
  accessServers: z.array(z.string()),
  version: z.number(),
  updatedAtMs: z.number(),
  signatureB64: z.string(),
});

/** Pair ops take possibly-empty strings here: emptiness is reported as BAD_FIELDS by the pair check. */
const pair = z.object({ incomingBlobB64: z.string().optional(), outgoingBlobB64: z.string().optional() });

/** Call ids (docs/protocol.md §5.6): 1..64 of [A-Za-z0-9_-], like a deviceId. */
export const CALL_ID_RE = DEVICE_ID_RE;
/** The largest call payload, decoded (docs/protocol.md §5.6). */
export const MAX_CALL_PAYLOAD = 16 * 1024;
/** What a client may send with CallSignal; `invite` travels between servers only. */
export const CALL_SIGNAL_KINDS = ['answer', 'ice', 'reject', 'busy', 'hangup', 'cancel'] as const;
export type CallSignalKind = (typeof CALL_SIGNAL_KINDS)[number];
export type CallKind = 'invite' | CallSignalKind;

/** A call's common fields. The payload's size is the handler's to check: too long is 413 TOO_LARGE, not 400. */
const call = z.object({ toLogin: login, callId: z.string().regex(CALL_ID_RE), payloadB64: z.string() });

/** Acknowledgements one sync batch request may carry (docs/protocol.md §7). */
export const MAX_SYNC_ACKS = 1000;

/** The fields both sync protocols share (docs/protocol.md §7); each adds its own cursor key. */
const syncBatch = z.object({
  ownerLogin: z.string().max(64).optional(),
  afterStoredAtMs: ms.optional(),
  limit: z.number().int().optional(),
  maxBytes: z.number().int().min(1).optional(),
  ackSyncIds: z.array(z.string().max(300)).max(MAX_SYNC_ACKS).optional(),
  sourceServerLogin: z.string().max(64).optional(),
});

/** Anti-entropy limits (docs/protocol.md §7): buckets per DmDigest, keys per DmKeys answer, keys per DmFetch. */
export const MAX_DIGEST_BUCKETS = 4096;
export const MAX_KEYS_ITEMS = 1000;
export const MAX_FETCH_KEYS = 200;
/**
 * Container bytes in one DmFetch answer (at least one row): about 1.3 MB as base64, well inside a frame's 4 MiB, and
 * as much as one page of the cycle's pull asks for (docs/protocol.md decision 59).
 */
export const MAX_FETCH_BYTES = 1_000_000;

/** An owner's half-open range of message times, [fromTimeMs, toTimeMs), as the anti-entropy ops take it. */
const timeRange = z.object({
  ownerLogin: z.string().max(64).optional(),
  fromTimeMs: ms,
  toTimeMs: ms,
  sourceServerLogin: z.string().max(64).optional(),
});

/** User chains (docs/protocol.md §14.2): blocks per GetChain page (default 100) and chains per GetChainHeads page. */
export const MAX_CHAIN_PAGE = 500;
export const DEFAULT_CHAIN_PAGE = 100;
export const MAX_CHAIN_HEADS = 1000;

export const opSchemas = {
  AuthChallenge: z.object({}),
  AuthLogin: z.object({ login: z.string(), deviceId: z.string().regex(DEVICE_ID_RE), signatureB64: b64 }),
  RegisterUser: z.object({ profile }),
  GetUserProfile: z.object({ login: z.string().min(1).max(64) }),
  SendMessagePair: pair,
  DeleteMessage: pair,
  DeleteConversation: pair,
  GetDirectMessages: z.object({
    peerLogin: login,
    beforeTimeMs: ms.optional(),
    beforeMessageKey: z.string().max(256).optional(),
    limit: z.number().int().optional(),
  }),
  GetConversations: z.object({ limit: z.number().int().optional() }),
  AckSessionDelivery: z.object({ messageKeys: z.array(z.string().min(1).max(256)).max(1000) }),
  SetUserSetting: z.object({ key: z.string().min(1).max(128), valueB64: b64, updatedAtMs: ms }),
  GetUserSettings: z.object({
    keys: z.array(z.string().min(1).max(128)).max(1000).optional(),
    afterKey: z.string().max(128).optional(),
  }),

  // WebPush (docs/protocol.md §5.5); endpoint and keys are checked by the push area (BAD_FIELDS)
  GetWebPushConfig: z.object({}),
  UpsertPushToken: z.object({
    deviceId: z.string().regex(DEVICE_ID_RE).optional(),
    endpoint: z.string().min(1).max(4096),
    p256dhB64: z.string().max(256),
    authB64: z.string().max(256),
  }),
  DeletePushToken: z.object({ endpoint: z.string().min(1).max(4096) }),
  SendTestWebPush: z.object({}),
  CallInviteBroadcast: call,
  CallSignal: call.extend({ kind: z.enum(CALL_SIGNAL_KINDS) }),
  // User chains (docs/protocol.md §14.2); GetChain needs no session.
  AddBlock: z.object({ blockB64: b64 }),
  GetChain: z.object({
    login,
    fromIndex: ms.optional(),
    limit: z.number().int().optional(),
  }),

  // server operations (docs/protocol.md §5.1, §5.4)
  ServerAuth: z.object({
    serverLogin: z.string().min(1).max(64),
    targetServerLogin: z.string().min(1).max(64),
    timestampMs: ms,
    nonceB64: z.string().min(1).max(128),
    signatureB64: z.string().max(128),
  }),
  ReceiveIncomingMessage: z.object({
    incomingBlobB64: z.string().optional(),
    sourceServerLogin: z.string().max(64).optional(),
  }),
  ReceiveOutcomingMessage: pair.extend({ sourceServerLogin: z.string().max(64).optional() }),
  // Delivery proofs (docs/protocol.md §13.1): any socket, like GetUserProfile.
  GetServerDescriptor: z.object({ serverLogin: z.string().min(1).max(64) }),
  GetDmDeliveryStatus: z.object({
    messageKey: z.string().max(256).optional(),
    messageKeys: z.array(z.string().max(256)).max(500).optional(),
    sourceServerLogin: z.string().max(64).optional(),
  }),
  ReceiveCallSignal: call.extend({
    fromLogin: login,
    kind: z.enum(['invite', ...CALL_SIGNAL_KINDS]),
    sourceServerLogin: z.string().max(64).optional(),
  }),
  DmSyncBatch: syncBatch.extend({ afterMessageKey: z.string().max(256).optional() }),
  UserSettingsSyncBatch: syncBatch.extend({ afterKey: z.string().max(128).optional() }),
  MarkAllUserSettingsUnsynced: z.object({
    ownerLogin: z.string().max(64).optional(),
    sourceServerLogin: z.string().max(64).optional(),
  }),
  DmDigest: timeRange.extend({ buckets: z.number().int().min(1).max(MAX_DIGEST_BUCKETS) }),
  DmKeys: timeRange,
  DmFetch: z.object({
    ownerLogin: z.string().max(64).optional(),
    messageKeys: z.array(z.string().max(256)).max(MAX_FETCH_KEYS),
    sourceServerLogin: z.string().max(64).optional(),
  }),
  ReceiveBlock: z.object({ blockB64: b64, sourceServerLogin: z.string().max(64).optional() }),
  GetChainHeads: z.object({
    afterGlobalSeq: ms,
    limit: z.number().int().optional(),
    sourceServerLogin: z.string().max(64).optional(),
  }),
} as const;

export type OpName = keyof typeof opSchemas;
export type OpPayload<K extends OpName> = z.infer<(typeof opSchemas)[K]>;

// ---- answers (docs/protocol.md §5): what the server sends back; peer answers are checked against these ----

const num = z.number();
const deliveryState = z.enum(['accepted', 'delivered', 'failed']);
export type DeliveryState = z.infer<typeof deliveryState>;

const callDelivery = z.object({ deliveredWsSessions: num, deliveredWebPushSessions: num });

const pairAnswer = z.object({
  messageKey: z.string(),
  baseKey: z.string(),
  incomingKey: z.string(),
  outgoingKey: z.string(),
  deliveryState,
  deliveredWsSessions: num,
  deliveredWebPushSessions: num,
});
export type PairAnswer = z.infer<typeof pairAnswer>;

/** The fields every view of one stored copy carries. */
const copyFields = z.object({
  messageKey: z.string(),
  baseKey: z.string(),
  messageType: num,
  fromLogin: z.string(),
  toLogin: z.string(),
  timeMs: num,
  revisionTimeMs: num,
  reencryptedAtMs: num,
});
export type CopyFields = z.infer<typeof copyFields>;

/**
 * A delivery receipt as clients get it (docs/protocol.md §13.1; src/protocol/receipt.ts checks and
 * verifies it). Server ops carry receipts as `unknown` instead: a malformed one from a peer is that
 * server's BAD_RECEIPT, not a failed call.
 */
const deliveryReceipt = z.object({
  serverLogin: z.string(),
  messageKey: z.string(),
  revisionTimeMs: num,
  reencryptedAtMs: num,
  storedAtMs: num,
  containerSha256B64: z.string(),
  signatureB64: z.string(),
});

const historyItem = copyFields.extend({
  createdAtMs: num,
  readAtMs: num.nullable(),
  deliveryState: deliveryState.nullable(),
  /** Type 2 only, when its revision is delivered and the delivery is proven (docs/protocol.md §13.1). */
  deliveryProof: deliveryReceipt.optional(),
  blobB64: z.string(),
});
export type HistoryItem = z.infer<typeof historyItem>;

/** `proof`: the delivery receipt of a delivered pair (docs/protocol.md §13.1); absent from older servers. */
const deliveryStatusItem = z.object({
  messageKey: z.string(),
  known: z.boolean(),
  delivered: z.boolean(),
  proof: z.unknown().optional(),
});
export type DeliveryStatusItem = z.infer<typeof deliveryStatusItem>;

/** The answer schema of every op, by the same names as opSchemas (a missing one fails the typecheck). */
export const opAnswerSchemas = {
  AuthChallenge: z.object({ serverLogin: z.string(), challengeB64: z.string(), expiresAtMs: num }),
  AuthLogin: z.object({ login: z.string(), deviceId: z.string(), sessionId: z.string() }),
  RegisterUser: z.object({ profile }),
  GetUserProfile: z.object({ profile }),
  GetServerDescriptor: z.object({
    descriptor: z.object({
      serverLogin: z.string(),
      wsUrl: z.string(),
      signKeyB64: z.string(),
      signatureB64: z.string(),
    }),
  }),
  SendMessagePair: pairAnswer,
  DeleteMessage: pairAnswer,
  DeleteConversation: pairAnswer,
  GetDirectMessages: z.object({
    items: z.array(historyItem),
    hasMore: z.boolean(),
    nextBeforeTimeMs: num,
    nextBeforeMessageKey: z.string(),
  }),
  GetConversations: z.object({
    items: z.array(z.object({ peerLogin: z.string(), lastTimeMs: num, lastMessageKey: z.string(), unreadCount: num })),
  }),
  AckSessionDelivery: z.object({ acked: num }),
  SetUserSetting: z.object({ key: z.string(), updatedAtMs: num, applied: z.boolean() }),
  GetUserSettings: z.object({
    items: z.array(z.object({ key: z.string(), valueB64: z.string(), updatedAtMs: num })),
    hasMore: z.boolean().optional(),
    nextKey: z.string().optional(),
  }),
  GetWebPushConfig: z.object({ vapidPublicKey: z.string() }),
  UpsertPushToken: z.object({ stored: z.literal(true) }),
  DeletePushToken: z.object({ deleted: num }),
  SendTestWebPush: z.object({ sent: num, failed: num }),
  CallInviteBroadcast: callDelivery,
  CallSignal: z.object({ deliveredWsSessions: num }),
  ReceiveCallSignal: callDelivery,
  ServerAuth: z.object({ serverLogin: z.string(), targetServerLogin: z.string() }),
  ReceiveIncomingMessage: z.object({
    messageKey: z.string(),
    baseKey: z.string(),
    deliveredWsSessions: num,
    deliveredWebPushSessions: num,
    /** The signed receipt of the copy as stored (docs/protocol.md §13.1); absent from older servers. */
    receipt: z.unknown().optional(),
  }),
  ReceiveOutcomingMessage: pairAnswer,
  // One key asked (messageKey): its item; several (messageKeys): all of them.
  GetDmDeliveryStatus: z.union([z.object({ items: z.array(deliveryStatusItem) }), deliveryStatusItem]),
  DmSyncBatch: z.object({
    ownerLogin: z.string(),
    items: z.array(
      z.object({ syncId: z.string(), primaryMessageKey: z.string(), storedAtMs: num, blobsB64: z.array(z.string()) }),
    ),
    hasMore: z.boolean(),
    nextStoredAtMs: num,
    nextMessageKey: z.string(),
  }),
  UserSettingsSyncBatch: z.object({
    ownerLogin: z.string(),
    items: z.array(
      z.object({ syncId: z.string(), key: z.string(), valueB64: z.string(), updatedAtMs: num, storedAtMs: num }),
    ),
    hasMore: z.boolean(),
    nextStoredAtMs: num,
    nextKey: z.string(),
  }),
  MarkAllUserSettingsUnsynced: z.object({ updated: num, dmUpdated: num }),
  DmDigest: z.object({
    items: z.array(
      z.object({
        fromTimeMs: num,
        toTimeMs: num,
        count: num,
        xorSha256B64: z.string(),
        minTimeMs: num.optional(),
        maxTimeMs: num.optional(),
      }),
    ),
  }),
  DmKeys: z.object({
    items: z.array(z.object({ messageKey: z.string(), revisionTimeMs: num, reencryptedAtMs: num })),
    hasMore: z.boolean().optional(),
  }),
  DmFetch: z.object({
    items: z.array(z.object({ messageKey: z.string(), blobB64: z.string(), storedAtMs: num.optional() })),
    hasMore: z.boolean().optional(),
  }),
  AddBlock: z.object({ login: z.string(), index: num, blockHash: z.string(), globalSeq: num }),
  GetChain: z.object({
    login: z.string(),
    headIndex: num,
    headHash: z.string().nullable(),
    items: z.array(z.object({ index: num, blockHash: z.string(), blockB64: z.string() })),
    hasMore: z.boolean(),
  }),
  ReceiveBlock: z.object({ login: z.string(), index: num, result: z.enum(['stored', 'known']) }),
  GetChainHeads: z.object({
    items: z.array(z.object({ login: z.string(), headIndex: num, headHash: z.string(), globalSeq: num })),
    nextGlobalSeq: num,
    hasMore: z.boolean(),
  }),
} as const satisfies { [K in OpName]: z.ZodType };

export type OpAnswer<K extends OpName> = z.infer<(typeof opAnswerSchemas)[K]>;

/** The payload schema of op, typed by its name (indexing the table with a generic name would lose that). */
export function payloadSchema<K extends OpName>(op: K): z.ZodType<OpPayload<K>> {
  const table: { [N in OpName]: z.ZodType<OpPayload<N>> } = opSchemas;
  return table[op];
}

/** The answer schema of op, typed by its name. */
export function answerSchema<K extends OpName>(op: K): z.ZodType<OpAnswer<K>> {
  const table: { [N in OpName]: z.ZodType<OpAnswer<N>> } = opAnswerSchemas;
  return table[op];
}

/** Every op's answer type by name (SDK convenience; derived, never written by hand). */
export type OpResults = { [K in OpName]: OpAnswer<K> };
/** Sessions and pushes a call invite or signal reached (docs/protocol.md §5.6). */
export type CallDelivery = OpAnswer<'CallInviteBroadcast'>;

/** The CallInvite event (docs/protocol.md §5.3, §5.6). */
export interface CallInviteEvent {
  fromLogin: string;
  callId: string;
  payloadB64: string;
}

/** The CallSignal event (docs/protocol.md §5.3, §5.6). */
export interface CallSignalEvent extends CallInviteEvent {
  kind: CallSignalKind;
}

/** The ChainEvent event (docs/protocol.md §14.2): a block AddBlock stored, to the owner's other sessions. */
export interface ChainEventPayload {
  login: string;
  index: number;
  blockHash: string;
  blockB64: string;
}

/** The DirectMessage event (docs/protocol.md §5.3). */
export interface DirectMessageEvent extends CopyFields {
  storedAtMs: number;
  blobB64: string;
}

export interface DeliveryStateChangedEvent {
  baseKey: string;
  outgoingKey: string;
  deliveryState: DeliveryState;
  /** With `delivered`, when the delivery is proven (docs/protocol.md §13.1). */
  deliveryProof?: DeliveryReceipt;
}

/** What one anti-entropy repair of one owner with one peer did (docs/protocol.md §7, "Anti-entropy"). */
export interface RepairStats {
  /** Ranges whose digests were compared. */
  rangesCompared: number;
  /** Copies the peer holds that this server lacks or holds in an older revision. */
  differences: number;
  /** Copies this server holds that the peer lacks or holds older (the peer's own repair fetches them). */
  peerBehind: number;
  /** Copies fetched and stored. */
  copiesRepaired: number;
  /** Calls to the peer, and the JSON bytes of their payloads and answers. */
  roundTrips: number;
  bytes: number;
}

/** The answer of POST /admin/repair (docs/protocol.md §8): the repairs of each owner with each peer, added up. */
export interface RepairSummary extends RepairStats {
  peers: number;
  owners: number;
  errors: number;
  durationMs: number;
}

/** What one replication cycle did: the answer of POST /admin/sync (docs/protocol.md §8). */
export interface SyncCycleSummary {
  peers: number;
  users: number;
  dmRows: number;
  settingsRows: number;
  /** Copies anti-entropy fetched after the pulls (docs/protocol.md §7). */
  repairedCopies: number;
  /** Chain blocks the backfill stored, and chains replaced by a resync (docs/protocol.md §14.3). */
  chainBlocksPulled: number;
  chainResyncs: number;
  errors: number;
  durationMs: number;
}
