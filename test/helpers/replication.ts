/**
 * Helpers for replication tests and the catch-up benchmark: fast signed pairs, server sessions made
 * with a server's own key, the admin HTTP API, /metrics values and read-only snapshots of what a
 * server holds for one owner.
 */
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { concatBytes, toBase64, utf8 } from '../../src/protocol/bytes.js';
import type { Container, ContainerFields, MessageType } from '../../src/protocol/container.js';
import {
  baseKeyOf,
  decodeContainer,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  encodeUnsigned,
  messageKeyOf,
} from '../../src/protocol/container.js';
import { s2sSigningText, signText } from '../../src/protocol/identity.js';
import type { OpResults, SyncCycleSummary } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import type { DbConfig } from '../../src/server/config/config.js';
import type { NetworkServerSpec } from './network.js';
import type { RawClient } from './raw-client.js';
import { connectRaw } from './raw-client.js';
import { metricSum } from './metrics.js';
import { queryTestDb } from './test-db.js';

export const ADMIN_TOKEN = 'replication-admin-token-0123456789';

/** A deterministic 32-byte seed for a name (users and servers), distinct from containers.ts's seedOf. */
export function seedFor(name: string): Uint8Array {
  const seed = new Uint8Array(32).fill(0x5a);
  for (let i = 0; i < name.length; i++) seed[i % 32] = (seed[i % 32]! * 31 + name.charCodeAt(i)) & 0xff;
  return seed;
}

export const seedB64For = (name: string): string => toBase64(seedFor(name));

/**
 * A server for replication tests: a fixed key (seedFor(serverLogin), so a test can open server
 * sessions as it and a wiped server keeps its identity), the admin API, replication only at start-up
 * and on demand, and no rate limit in the way of bulk sends.
 */
export function replicationServer(serverLogin: string, extra: NetworkServerSpec = {}): NetworkServerSpec {
  return {
    serverLogin,
    serverKeySeedB64: seedB64For(serverLogin),
    adminToken: ADMIN_TOKEN,
    syncIntervalMs: 1_000_000_000,
    rateLimit: { perSecond: 1_000_000, burst: 1_000_000 },
    ...extra,
  };
}

// ---- fast signing (libsodium through sodium-native; Ed25519 is deterministic: the same bytes as the protocol's signer) ----

const sodium = createRequire(import.meta.url)('sodium-native') as {
  crypto_sign_seed_keypair(pk: Uint8Array, sk: Uint8Array, seed: Uint8Array): void;
  crypto_sign_detached(sig: Uint8Array, msg: Uint8Array, sk: Uint8Array): void;
};
const secretKeys = new Map<string, Uint8Array>();

function secretKeyOf(seed: Uint8Array): Uint8Array {
  const id = toBase64(seed);
  let sk = secretKeys.get(id);
  if (!sk) {
    sk = new Uint8Array(64);
    sodium.crypto_sign_seed_keypair(new Uint8Array(32), sk, seed);
    secretKeys.set(id, sk);
  }
  return sk;
}

/** Encodes and signs one container natively (about 50 times faster than the pure-JS signer). */
export function signFast(fields: ContainerFields, seed: Uint8Array): Container {
  const unsigned = encodeUnsigned(fields);
  const signature = new Uint8Array(64);
  sodium.crypto_sign_detached(signature, unsigned, secretKeyOf(seed));
  return decodeContainer(concatBytes([unsigned, signature]));
}

export interface Pair {
  incoming: Container;
  outgoing: Container;
  incomingBlobB64: string;
  outgoingBlobB64: string;
  /** The outgoing copy's key (the pair's outbox key on the sender's servers). */
  outgoingKey: string;
  baseKey: string;
}

/** The identity of one logical message. */
export interface Ref {
  from: string;
  to: string;
  timeMs: number;
  nonce: number;
}

export type PairKind =
  | { kind: 'text'; text?: string; bodyBytes?: number }
  | { kind: 'receipt'; target: Ref; readAtMs: number }
  | { kind: 'deleteMessage'; target: Ref }
  | { kind: 'deleteConversation'; deleteBeforeMs: number };

/** A signed, consistent pair from `from` (signed with seedFor(from)) of any kind. */
export function pairOf(ref: Ref & { revisionTimeMs?: number }, what: PairKind = { kind: 'text' }): Pair {
  let type: 1 | 3 | 5 | 7;
  let body: Uint8Array;
  switch (what.kind) {
    case 'text':
      type = 1;
      body = what.bodyBytes
        ? new Uint8Array(randomBytes(what.bodyBytes))
        : utf8(what.text ?? `text ${ref.from}→${ref.to} ${ref.timeMs}/${ref.nonce}`);
      break;
    case 'receipt':
      type = 3;
      body = encodeReceiptBody({
        readAtMs: what.readAtMs,
        targetTimeMs: what.target.timeMs,
        targetNonce: what.target.nonce,
      });
      break;
    case 'deleteMessage':
      type = 5;
      body = encodeDeleteMessageBody({
        targetTimeMs: what.target.timeMs,
        targetNonce: what.target.nonce,
        targetSender: what.target.from === ref.from ? 0 : 1,
      });
      break;
    case 'deleteConversation':
      type = 7;
      body = encodeDeleteConversationBody({ deleteBeforeMs: what.deleteBeforeMs });
      break;
  }
  const fields = {
    fromLogin: ref.from,
    toLogin: ref.to,
    timeMs: ref.timeMs,
    nonce: ref.nonce,
    revisionTimeMs: ref.revisionTimeMs ?? 0,
    reencryptedAtMs: 0,
    body,
  };
  const seed = seedFor(ref.from);
  const incoming = signFast({ ...fields, messageType: type as MessageType }, seed);
  const outgoing = signFast({ ...fields, messageType: (type + 1) as MessageType }, seed);
  return {
    incoming,
    outgoing,
    incomingBlobB64: toBase64(incoming.bytes),
    outgoingBlobB64: toBase64(outgoing.bytes),
    outgoingKey: messageKeyOf(outgoing),
    baseKey: baseKeyOf(outgoing),
  };
}

/** Sends pairs on a logged-in session with up to `window` requests in flight; resolves with the answers in order. */
export async function sendAll(
  client: RawClient,
  pairs: readonly { op?: 'SendMessagePair' | 'DeleteMessage' | 'DeleteConversation'; pair: Pair }[],
  window = 32,
): Promise<OpResults['SendMessagePair'][]> {
  const answers: OpResults['SendMessagePair'][] = new Array(pairs.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < pairs.length) {
      const i = next++;
      const { op = 'SendMessagePair', pair } = pairs[i]!;
      answers[i] = await client.call<OpResults['SendMessagePair']>(op, {
        incomingBlobB64: pair.incomingBlobB64,
        outgoingBlobB64: pair.outgoingBlobB64,
      });
    }
  };
  await Promise.all(Array.from({ length: window }, lane));
  return answers;
}

// ---- server sessions ----

/** Opens a socket to wsUrl and authenticates it as serverLogin (signed with seedFor(serverLogin)). */
export async function connectAsServer(
  wsUrl: string,
  serverLogin: string,
  targetServerLogin: string,
): Promise<RawClient> {
  const client = await connectRaw(wsUrl);
  const timestampMs = Date.now();
  const nonceB64 = toBase64(new Uint8Array(randomBytes(16)));
  const signatureB64 = signText(
    s2sSigningText({ from: serverLogin, to: targetServerLogin, timestampMs, nonceB64 }),
    seedFor(serverLogin),
  );
  await client.call('ServerAuth', { serverLogin, targetServerLogin, timestampMs, nonceB64, signatureB64 });
  return client;
}

// ---- HTTP: admin API and metrics ----

/** Calls an /admin or /debug route with the admin token; rejects unless it answers 200. */
export async function adminCall<T>(
  httpUrl: string,
  method: 'GET' | 'POST',
  pathAndQuery: string,
  token = ADMIN_TOKEN,
): Promise<T> {
  const res = await fetch(`${httpUrl}${pathAndQuery}`, { method, headers: { authorization: `Bearer ${token}` } });
  const body = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${pathAndQuery} answered ${res.status}: ${body}`);
  return JSON.parse(body) as T;
}

/** POST /admin/sync: one replication cycle of that server, answered when it is done. */
export const syncNow = (httpUrl: string, token = ADMIN_TOKEN): Promise<SyncCycleSummary> =>
  adminCall<SyncCycleSummary>(httpUrl, 'POST', '/admin/sync', token);

export const outboxCounts = (
  httpUrl: string,
  owner: string,
): Promise<{ owner: string; synced: number; unsynced: number }> =>
  adminCall(httpUrl, 'GET', `/debug/outbox?owner=${encodeURIComponent(owner)}`);

export interface DebugDeliveryRow {
  outgoingKey: string;
  state: string;
  acceptedAtMs: number;
  nextAttemptAtMs: number | null;
  revisionTimeMs: number;
}

export async function deliveryRows(
  httpUrl: string,
  state: 'accepted' | 'delivered' | 'failed',
): Promise<DebugDeliveryRow[]> {
  return (await adminCall<{ rows: DebugDeliveryRow[] }>(httpUrl, 'GET', `/debug/delivery?state=${state}&limit=1000`))
    .rows;
}

/** The value of one series in /metrics (0 when absent). labels in the registry's order, e.g. `op="X",status="200"`. */
export function metricValue(httpUrl: string, name: string, labels = ''): Promise<number> {
  return metricSum(
    httpUrl,
    `shine_${name}`,
    Object.fromEntries([...labels.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!])),
  );
}

/** Requests a server has answered with status 200 for one op. */
export const answeredOk = (httpUrl: string, op: string): Promise<number> =>
  metricValue(httpUrl, 'ops_total', `op="${op}",status="200"`);

// ---- what a server holds ----

export type HistoryItem = OpResults['GetDirectMessages']['items'][number];

/** The session user's whole dialog with peer, newest first, through GetDirectMessages pages. */
export async function fullHistory(client: RawClient, peerLogin: string): Promise<HistoryItem[]> {
  const items: HistoryItem[] = [];
  let cursor = { beforeTimeMs: 0, beforeMessageKey: '' };
  for (;;) {
    const page = await client.call<OpResults['GetDirectMessages']>('GetDirectMessages', {
      peerLogin,
      ...cursor,
      limit: 200,
    });
    items.push(...page.items);
    if (!page.hasMore) return items;
    cursor = { beforeTimeMs: page.nextBeforeTimeMs, beforeMessageKey: page.nextBeforeMessageKey };
  }
}

/** What history shows of one copy, without the server-local times (createdAtMs) and delivery state. */
export const historyView = (i: HistoryItem) => ({
  messageKey: i.messageKey,
  messageType: i.messageType,
  revisionTimeMs: i.revisionTimeMs,
  reencryptedAtMs: i.reencryptedAtMs,
  readAtMs: i.readAtMs,
  blobB64: i.blobB64,
});

export interface DmSnapshot {
  /** Every stored copy of the owner (types 1..8): key, revision, read time, blob digest. */
  copies: { key: string; type: number; rev: string; readAtMs: number | null; blobB64: string }[];
  tombstones: { kind: string; target: string; deleteBeforeMs: number }[];
  settings: { key: string; valueB64: string; updatedAtMs: number }[];
}

const COPIES_SQL = `SELECT message_key AS "key", message_type AS "type", revision_time_ms AS "revisionTimeMs",
  reencrypted_at_ms AS "reencryptedAtMs", read_at_ms AS "readAtMs", stored_at_ms AS "storedAtMs", blob
  FROM signed_messages WHERE owner_login = ? ORDER BY message_key`;
const TOMBSTONES_SQL = `SELECT kind, target, delete_before_ms AS "deleteBeforeMs" FROM dm_tombstones
  WHERE owner_login = ? ORDER BY kind, target`;
const SETTINGS_SQL = `SELECT key, value, updated_at_ms AS "updatedAtMs" FROM user_settings WHERE owner_login = ? ORDER BY key`;

/**
 * A read-only snapshot of owner's rows in the database at url (server-local times left out but for
 * storedAtMs, by key), read while its server runs or after it was stopped or killed.
 */
export async function dmSnapshotOfDb(
  url: string | DbConfig,
  owner: string,
): Promise<DmSnapshot & { storedAtMs: Map<string, number> }> {
  const rows = (await queryTestDb(url, COPIES_SQL, [owner])) as {
    key: string;
    type: number;
    revisionTimeMs: number;
    reencryptedAtMs: number;
    readAtMs: number | null;
    storedAtMs: number;
    blob: Buffer;
  }[];
  const copies = rows.map((r) => ({
    key: r.key,
    type: r.type,
    rev: `${r.revisionTimeMs}/${r.reencryptedAtMs}`,
    readAtMs: r.readAtMs,
    blobB64: r.blob.toString('base64'),
  }));
  const tombstones = (await queryTestDb(url, TOMBSTONES_SQL, [owner])) as DmSnapshot['tombstones'];
  const settings = (
    (await queryTestDb(url, SETTINGS_SQL, [owner])) as { key: string; value: Buffer; updatedAtMs: number }[]
  ).map((s) => ({ key: s.key, valueB64: s.value.toString('base64'), updatedAtMs: s.updatedAtMs }));
  return { copies, tombstones, settings, storedAtMs: new Map(rows.map((r) => [r.key, r.storedAtMs])) };
}

/** dmSnapshotOfDb of an in-process server, without storedAtMs. */
export async function dmSnapshot(server: RunningServer, owner: string): Promise<DmSnapshot> {
  const { copies, tombstones, settings } = await dmSnapshotOfDb(server.config.db, owner);
  return { copies, tombstones, settings };
}
