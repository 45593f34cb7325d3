/**
 * Operation payload schemas and answer types (SPEC §5). The server validates every payload against
 * these before a handler runs; the SDK uses the same types.
 */
import { z } from 'zod';
import type { UserProfile } from './identity.js';
import { DEVICE_ID_RE, LOGIN_RE } from './login.js';

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

/** Call ids (SPEC §5.6): 1..64 of [A-Za-z0-9_-], like a deviceId. */
export const CALL_ID_RE = DEVICE_ID_RE;
/** The largest call payload, decoded (SPEC §5.6). */
export const MAX_CALL_PAYLOAD = 16 * 1024;
/** What a client may send with CallSignal; `invite` travels between servers only. */
export const CALL_SIGNAL_KINDS = ['answer', 'ice', 'reject', 'busy', 'hangup', 'cancel'] as const;
export type CallSignalKind = (typeof CALL_SIGNAL_KINDS)[number];
export type CallKind = 'invite' | CallSignalKind;

/** A call's common fields. The payload's size is the handler's to check: too long is 413 TOO_LARGE, not 400. */
const call = z.object({ toLogin: login, callId: z.string().regex(CALL_ID_RE), payloadB64: z.string() });

/** The fields both sync protocols share (SPEC §7); each adds its own cursor key. */
const syncBatch = z.object({
  ownerLogin: z.string().max(64).optional(),
  afterStoredAtMs: ms.optional(),
  limit: z.number().int().optional(),
  maxBytes: z.number().int().min(1).optional(),
  ackSyncIds: z.array(z.string().max(300)).max(1000).optional(),
  sourceServerLogin: z.string().max(64).optional(),
});

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
  GetUserSettings: z.object({ keys: z.array(z.string().min(1).max(128)).max(1000).optional() }),

  CallInviteBroadcast: call,
  CallSignal: call.extend({ kind: z.enum(CALL_SIGNAL_KINDS) }),

  // server operations (SPEC §5.1, §5.4)
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
} as const;

export type OpName = keyof typeof opSchemas;
export type OpPayload<K extends OpName> = z.infer<(typeof opSchemas)[K]>;

export type DeliveryState = 'accepted' | 'delivered' | 'failed';

export interface PairAnswer {
  messageKey: string;
  baseKey: string;
  incomingKey: string;
  outgoingKey: string;
  deliveryState: DeliveryState;
  deliveredWsSessions: number;
  deliveredWebPushSessions: number;
}

/** The fields every view of one stored copy carries. */
export interface CopyFields {
  messageKey: string;
  baseKey: string;
  messageType: number;
  fromLogin: string;
  toLogin: string;
  timeMs: number;
  revisionTimeMs: number;
  reencryptedAtMs: number;
}

export interface HistoryItem extends CopyFields {
  createdAtMs: number;
  readAtMs: number | null;
  deliveryState: DeliveryState | null;
  blobB64: string;
}

export interface OpResults {
  AuthChallenge: { serverLogin: string; challengeB64: string; expiresAtMs: number };
  AuthLogin: { login: string; deviceId: string; sessionId: string };
  RegisterUser: { profile: UserProfile };
  GetUserProfile: { profile: UserProfile };
  SendMessagePair: PairAnswer;
  DeleteMessage: PairAnswer;
  DeleteConversation: PairAnswer;
  GetDirectMessages: { items: HistoryItem[]; hasMore: boolean; nextBeforeTimeMs: number; nextBeforeMessageKey: string };
  GetConversations: { items: { peerLogin: string; lastTimeMs: number; lastMessageKey: string; unreadCount: number }[] };
  AckSessionDelivery: { acked: number };
  SetUserSetting: { key: string; updatedAtMs: number; applied: boolean };
  GetUserSettings: { items: { key: string; valueB64: string; updatedAtMs: number }[] };
  CallInviteBroadcast: CallDelivery;
  CallSignal: { deliveredWsSessions: number };
  ServerAuth: { serverLogin: string; targetServerLogin: string };
  ReceiveCallSignal: CallDelivery;
  ReceiveIncomingMessage: {
    messageKey: string;
    baseKey: string;
    deliveredWsSessions: number;
    deliveredWebPushSessions: number;
  };
  ReceiveOutcomingMessage: PairAnswer;
  GetDmDeliveryStatus: DeliveryStatusItem | { items: DeliveryStatusItem[] };
  DmSyncBatch: {
    ownerLogin: string;
    items: { syncId: string; primaryMessageKey: string; storedAtMs: number; blobsB64: string[] }[];
    hasMore: boolean;
    nextStoredAtMs: number;
    nextMessageKey: string;
  };
  UserSettingsSyncBatch: {
    ownerLogin: string;
    items: { syncId: string; key: string; valueB64: string; updatedAtMs: number; storedAtMs: number }[];
    hasMore: boolean;
    nextStoredAtMs: number;
    nextKey: string;
  };
  MarkAllUserSettingsUnsynced: { updated: number; dmUpdated: number };
}

/** Sessions and pushes a call invite or signal reached (SPEC §5.6). */
export interface CallDelivery {
  deliveredWsSessions: number;
  deliveredWebPushSessions: number;
}

/** The CallInvite event (SPEC §5.3, §5.6). */
export interface CallInviteEvent {
  fromLogin: string;
  callId: string;
  payloadB64: string;
}

/** The CallSignal event (SPEC §5.3, §5.6). */
export interface CallSignalEvent extends CallInviteEvent {
  kind: CallSignalKind;
}

export interface DeliveryStatusItem {
  messageKey: string;
  known: boolean;
  delivered: boolean;
}

/** The DirectMessage event (SPEC §5.3). */
export interface DirectMessageEvent extends CopyFields {
  storedAtMs: number;
  blobB64: string;
}

export interface DeliveryStateChangedEvent {
  baseKey: string;
  outgoingKey: string;
  deliveryState: DeliveryState;
}

/** What one replication cycle did: the answer of POST /admin/sync (SPEC §8). */
export interface SyncCycleSummary {
  peers: number;
  users: number;
  dmRows: number;
  settingsRows: number;
  errors: number;
  durationMs: number;
}
