/**
 * Helpers for federation tests: signed pairs from test users, server sessions signed with a known
 * server key, and what a server exposes about its deliveries (/metrics, /debug/delivery, its store).
 */
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { decodeBlob } from '../../src/protocol/blob.js';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import type { Container, MessageType } from '../../src/protocol/container.js';
import { baseKeyOf, encodeSigned, messageKeyOf } from '../../src/protocol/container.js';
import { ed25519PublicKey } from '../../src/protocol/ed25519.js';
import type { ServerDescriptor } from '../../src/protocol/identity.js';
import { s2sSigningText, signDescriptor, signText } from '../../src/protocol/identity.js';
import type { DeliveryState, HistoryItem, OpResults, PairAnswer } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import type { ConfigInput } from '../../src/server/config/config.js';
import type { DeliveryRow } from '../../src/server/store/types.js';
import type { RawClient } from './raw-client.js';
import { connectRaw } from './raw-client.js';
import type { TestUser } from './users.js';
import { waitUntil } from './wait.js';
import { metricSum } from './metrics.js';
import { receiptFor } from '../../src/server/delivery/receipts.js';
import { ManualClock } from '../../src/server/clock.js';
import type { NetworkServerSpec, TestNetwork } from './network.js';
import { startNetwork } from './network.js';
import { connectUser, makeUser } from './users.js';

export const ADMIN_TOKEN = 'federation-test-admin';

/**
 * The hour of retries compressed to 1.6 s (offsets 0, 0.4, 0.8, 1.2, 1.6 s), a 50 ms worker tick, and
 * replication only at start-up (its interval is far beyond any test). Call timeouts and the first
 * attempt's wait stay generous: a first contact between two servers is several round trips (descriptor,
 * ServerAuth both ways, profile import), and a loaded test machine must not turn them into failures.
 * A down server is refused at once, so the timeouts never slow a test down. SQLite commits without
 * fsync: durability is not what these tests check, and fsyncs stall every in-process server at once.
 */
export const FAST: ConfigInput = {
  retryScheduleMs: '0,400,800,1200,1600',
  workerTickMs: 50,
  s2sTimeoutMs: 2000,
  firstAttemptWaitMs: 5000,
  syncIntervalMs: 3_600_000,
  sqliteSync: 'normal',
  adminToken: ADMIN_TOKEN,
};

/** A server of a test network with the FAST settings (and any of its own). */
export const fastServer = (serverLogin: string, extra: NetworkServerSpec = {}): NetworkServerSpec => ({
  serverLogin,
  ...FAST,
  ...extra,
});

/** A signed text pair as a client would send it, with its keys. */
export interface TestPair {
  incoming: Container;
  outgoing: Container;
  incomingBlobB64: string;
  outgoingBlobB64: string;
  incomingKey: string;
  outgoingKey: string;
  baseKey: string;
  timeMs: number;
  nonce: number;
}

/** A text pair (types 1/2) signed by `from`; an edit keeps timeMs and nonce and sets revisionTimeMs. */
export function textPair(
  from: TestUser,
  to: string,
  opts: { timeMs?: number; nonce?: number; revisionTimeMs?: number; body?: string } = {},
): TestPair {
  const timeMs = opts.timeMs ?? Date.now();
  const nonce = opts.nonce ?? randomBytes(4).readUInt32BE(0);
  const fields = {
    fromLogin: from.login,
    toLogin: to,
    timeMs,
    nonce,
    revisionTimeMs: opts.revisionTimeMs ?? 0,
    reencryptedAtMs: 0,
    body: utf8(opts.body ?? `ciphertext ${timeMs}/${nonce}`),
  };
  const incoming = encodeSigned({ ...fields, messageType: 1 as MessageType }, from.seed);
  const outgoing = encodeSigned({ ...fields, messageType: 2 as MessageType }, from.seed);
  return {
    incoming,
    outgoing,
    incomingBlobB64: toBase64(incoming.bytes),
    outgoingBlobB64: toBase64(outgoing.bytes),
    incomingKey: messageKeyOf(incoming),
    outgoingKey: messageKeyOf(outgoing),
    baseKey: baseKeyOf(incoming),
    timeMs,
    nonce,
  };
}

/** SendMessagePair of a pair on a logged-in session; rejects on an error answer. */
export function sendPair(client: RawClient, pair: TestPair): Promise<PairAnswer> {
  return client.call<PairAnswer>('SendMessagePair', {
    incomingBlobB64: pair.incomingBlobB64,
    outgoingBlobB64: pair.outgoingBlobB64,
  });
}

/** The session user's history with peer (newest first). */
export async function history(client: RawClient, peerLogin: string): Promise<HistoryItem[]> {
  return (await client.call<OpResults['GetDirectMessages']>('GetDirectMessages', { peerLogin, limit: 200 })).items;
}

/** Resolves with the DmDeliveryStateChanged event for outgoingKey reaching `state` on this session. */
export function deliveryEvent(client: RawClient, outgoingKey: string, state: DeliveryState, timeoutMs = 10_000) {
  return client.waitFor(
    (f) =>
      f.event === true &&
      f.op === 'DmDeliveryStateChanged' &&
      (f.payload as { outgoingKey?: string; deliveryState?: string }).outgoingKey === outgoingKey &&
      (f.payload as { deliveryState?: string }).deliveryState === state,
    timeoutMs,
  );
}

/** Resolves with the DirectMessage event for messageKey (and, when given, that revision). */
export function directMessageEvent(client: RawClient, messageKey: string, revisionTimeMs?: number, timeoutMs = 10_000) {
  return client.waitFor((f) => {
    if (f.event !== true || f.op !== 'DirectMessage') return false;
    const p = f.payload as { messageKey?: string; revisionTimeMs?: number };
    return p.messageKey === messageKey && (revisionTimeMs === undefined || p.revisionTimeMs === revisionTimeMs);
  }, timeoutMs);
}

/** DirectMessage events received on this session for messageKey. */
export function directMessagesFor(client: RawClient, messageKey: string): unknown[] {
  return client.events.filter(
    (e) => e.op === 'DirectMessage' && (e.payload as { messageKey?: string }).messageKey === messageKey,
  );
}

// ---- what a server shows about itself ----

/** Sum of a metric's samples whose labels include `labels`, read from GET /metrics. */
export function metric(server: RunningServer, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricSum(server.httpUrl, name, labels);
}

/** How many `op` requests the server answered with `status` since it (re)started. */
export function opCount(server: RunningServer, op: string, status = '200'): Promise<number> {
  return metric(server, 'shine_ops_total', { op, status });
}

/** GET /debug/delivery?state=… with the admin token. */
export async function debugDelivery(server: RunningServer, state: DeliveryState): Promise<DeliveryRow[]> {
  const res = await fetch(`${server.httpUrl}/debug/delivery?state=${state}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (!res.ok) throw new Error(`/debug/delivery answered ${res.status}`);
  return ((await res.json()) as { rows: DeliveryRow[] }).rows;
}

/** POST /admin/sync: one replication cycle (or the one running), answered when it is done. */
export async function adminSync(
  server: RunningServer,
): Promise<{ peers: number; users: number; dmRows: number; errors: number }> {
  const res = await fetch(`${server.httpUrl}/admin/sync`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (!res.ok) throw new Error(`/admin/sync answered ${res.status}`);
  return (await res.json()) as { peers: number; users: number; dmRows: number; errors: number };
}

/** The delivery row of a pair on a server, straight from its store. */
export function deliveryRow(server: RunningServer, outgoingKey: string): Promise<DeliveryRow | null> {
  return server.ctx.store.delivery.getDelivery(outgoingKey);
}

/** Waits until the server's delivery row for outgoingKey satisfies pred; resolves with it. */
export async function waitForRow(
  server: RunningServer,
  outgoingKey: string,
  pred: (row: DeliveryRow) => boolean,
  timeoutMs = 10_000,
): Promise<DeliveryRow> {
  let row: DeliveryRow | null = null;
  await waitUntil(
    async () => {
      row = await deliveryRow(server, outgoingKey);
      return row !== null && pred(row);
    },
    timeoutMs,
    `delivery row ${outgoingKey} on ${server.config.serverLogin} (last: ${JSON.stringify(row)})`,
  );
  return row!;
}

// ---- servers under the test's control ----

/** A server identity whose key the test holds: its seed, config seed and signed descriptor. */
export interface FakeServer {
  serverLogin: string;
  seed: Uint8Array;
  seedB64: string;
  descriptor: ServerDescriptor;
}

/** A server identity with a fresh key; wsUrl defaults to a loopback port nothing listens on. */
export function fakeServer(serverLogin: string, wsUrl = 'ws://127.0.0.1:9/ws'): FakeServer {
  const seed = new Uint8Array(randomBytes(32));
  const descriptor = signDescriptor({ serverLogin, wsUrl, signKeyB64: toBase64(ed25519PublicKey(seed)) }, seed);
  return { serverLogin, seed, seedB64: toBase64(seed), descriptor };
}

/** A ServerAuth payload signed with seed (every field overridable, to build the bad ones). */
export function serverAuthPayload(
  seed: Uint8Array,
  p: { from: string; to: string; timestampMs?: number; nonceB64?: string; signedTo?: string },
): { serverLogin: string; targetServerLogin: string; timestampMs: number; nonceB64: string; signatureB64: string } {
  const timestampMs = p.timestampMs ?? Date.now();
  const nonceB64 = p.nonceB64 ?? toBase64(randomBytes(16));
  const text = s2sSigningText({ from: p.from, to: p.signedTo ?? p.to, timestampMs, nonceB64 });
  return { serverLogin: p.from, targetServerLogin: p.to, timestampMs, nonceB64, signatureB64: signText(text, seed) };
}

/** Opens a socket to the server and authenticates it as `as` (a server whose key the test holds). */
export async function serverSession(server: RunningServer, as: FakeServer): Promise<RawClient> {
  const client = await connectRaw(server.wsUrl);
  await client.call('ServerAuth', serverAuthPayload(as.seed, { from: as.serverLogin, to: server.config.serverLogin }));
  return client;
}

/** A call a HoldingPeer has received and not answered yet. */
export interface HeldCall {
  op: string;
  payload: Record<string, unknown>;
  /** Sends the success answer. */
  answer(): void;
}

/**
 * What a HoldingPeer's ReceiveIncomingMessage answers carry (docs/protocol.md §13.1): a valid receipt
 * signed with its key, none, one for other bytes (another hash) signed with its key, or a valid-looking
 * one signed with another key.
 */
export type HoldingReceipt = 'valid' | 'none' | 'otherHash' | 'otherKey';

/**
 * A stand-in recipient server on a loopback port: it accepts any ServerAuth and holds every other
 * call until the test answers it (or answers at once while `autoAnswer` is set), so a test decides
 * exactly when, or whether, a delivery call succeeds. `identity` is its key and descriptor (with its
 * wsUrl), for the directory of the servers under test.
 */
export interface HoldingPeer extends AsyncDisposable {
  readonly wsUrl: string;
  readonly identity: FakeServer;
  readonly held: HeldCall[];
  autoAnswer: boolean;
  receipt: HoldingReceipt;
  /** Calls received other than ServerAuth. */
  readonly calls: number;
  close(): Promise<void>;
}

/** A well-formed success answer of a recipient server that stores nothing and has no sessions. */
function standInAnswer(
  op: string,
  payload: Record<string, unknown>,
  identity: FakeServer,
  mode: HoldingReceipt,
): object {
  if (op === 'GetDmDeliveryStatus') return { messageKey: String(payload.messageKey), known: false, delivered: false };
  const copy = decodeBlob(String(payload.incomingBlobB64));
  const answer = {
    messageKey: messageKeyOf(copy),
    baseKey: baseKeyOf(copy),
    deliveredWsSessions: 0,
    deliveredWebPushSessions: 0,
  };
  if (mode === 'none') return answer;
  const bytes = mode === 'otherHash' ? Uint8Array.from([...copy.bytes, 0]) : copy.bytes;
  const seed = mode === 'otherKey' ? new Uint8Array(randomBytes(32)) : identity.seed;
  const stored = { ...copy, messageKey: answer.messageKey, storedAtMs: Date.now(), bytes };
  const receipt = receiptFor(identity.serverLogin, (text) => signText(text, seed), stored);
  return { ...answer, receipt };
}

export async function startHoldingPeer(serverLogin: string): Promise<HoldingPeer> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  const wsUrl = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/ws`;
  const peer = {
    wsUrl,
    identity: fakeServer(serverLogin, wsUrl),
    held: [] as HeldCall[],
    autoAnswer: false,
    receipt: 'valid' as HoldingReceipt,
    calls: 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of wss.clients) ws.terminate();
        wss.close(() => resolve());
      }),
    [Symbol.asyncDispose]: () => peer.close(),
  };
  wss.on('connection', (ws) => {
    ws.on('message', (data) => {
      const req = JSON.parse(String(data)) as { op: string; requestId: string; payload: Record<string, unknown> };
      const reply = (payload: object) =>
        ws.send(JSON.stringify({ op: req.op, requestId: req.requestId, status: 200, ok: true, payload }));
      if (req.op === 'ServerAuth') return reply({ serverLogin, targetServerLogin: req.payload.serverLogin });
      peer.calls++;
      const call: HeldCall = {
        op: req.op,
        payload: req.payload,
        answer: () => reply(standInAnswer(req.op, req.payload, peer.identity, peer.receipt)),
      };
      if (peer.autoAnswer) call.answer();
      else peer.held.push(call);
    });
  });
  return peer;
}

/** alice on alpha1+alpha2 and bob on beta, with beta stopped: see startPeerCheckNetwork. */
export interface PeerCheckNetwork extends AsyncDisposable {
  net: TestNetwork;
  alpha1: RunningServer;
  alpha2: RunningServer;
  /** alpha1's clock: its second attempt (a peer check) comes only when the test moves it. */
  clock1: ManualClock;
  alice: TestUser;
  /** alice's session on alpha1. */
  a1: RawClient;
}

/**
 * The §6.4 peer-check setting: alpha1 on a hand-moved clock (peer checks before attempts 2..5), alpha2
 * retrying every 150 ms, beta; an earlier message delivered by both of alice's servers (so all know
 * each other), then beta stopped (the test starts it again as server 2).
 */
export async function startPeerCheckNetwork(): Promise<PeerCheckNetwork> {
  const clock1 = new ManualClock(Date.now());
  const net = await startNetwork({
    federate: true,
    servers: [
      fastServer('alpha1', { clock: clock1, peerCheckAttempts: '2,3,4,5' }),
      // Every 150 ms for 6 s: alpha2 delivers soon after beta is started again, however long its start takes.
      fastServer('alpha2', { retryScheduleMs: Array.from({ length: 41 }, (_, i) => i * 150).join(',') }),
      fastServer('beta'),
    ],
  });
  const [alpha1, alpha2] = [net.servers[0]!, net.servers[1]!];
  const alice = makeUser('alice', ['alpha1', 'alpha2']);
  const a1 = await connectUser(alpha1.wsUrl, alice, 'laptop');
  await (await connectUser(alpha2.wsUrl, alice, 'phone')).close();
  await (await connectUser(net.servers[2]!.wsUrl, makeUser('bob', ['beta']))).close();
  const first = textPair(alice, 'bob');
  if ((await sendPair(a1, first)).deliveryState !== 'delivered') throw new Error('the first message was not delivered');
  await waitForRow(alpha2, first.outgoingKey, (r) => r.state === 'delivered');
  await net.stop(2);
  return {
    net,
    alpha1,
    alpha2,
    clock1,
    alice,
    a1,
    [Symbol.asyncDispose]: async () => {
      await a1.close();
      await net[Symbol.asyncDispose]();
    },
  };
}
