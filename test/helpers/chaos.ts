/**
 * The chaos run (docs/reliability.md): four `shine serve` processes — alice on alpha1 + alpha2, bob on
 * bravo1 + bravo2 — each behind a relay (test/helpers/ws-proxy.ts) that its peers dial, with the hour of
 * retries compressed to seconds. A driver sends, edits, deletes and reads in both directions while a
 * fault injector SIGKILLs and restarts servers, cuts, delays, half-opens and drops the links into them,
 * and restarts one from an empty database followed by mark-unsynced on its partner. Afterwards every
 * link is healed, the delivery rows settle, one replication cycle runs on every server, and the
 * invariant checker reads every database.
 *
 * One seed drives both: the injector's whole plan (what, where, when, how long) is drawn from it before
 * the run and printed; the driver's choices come from a second stream of the same seed (which of them
 * succeed depends on timing). CHAOS_SEED reproduces a run.
 */
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import type { OpResults } from '../../src/protocol/ops.js';
import { cliBundle } from './cli-bundle.js';
import { ADMIN_TOKEN, startFederatedProcesses } from './federated-processes.js';
import type { RawClient } from './raw-client.js';
import type { Pair, Ref } from './replication.js';
import { adminCall, fullHistory, pairOf, seedB64For, seedFor, syncNow } from './replication.js';
import type { ServerProcess } from './server-process.js';
import { freePort } from './server-process.js';
import { queryTestDb } from './test-db.js';
import type { TestUser } from './users.js';
import { connectUser, makeUser } from './users.js';
import { waitUntil } from './wait.js';
import type { WsProxy } from './ws-proxy.js';
import { startWsProxy } from './ws-proxy.js';

/** The compressed schedule: "its hour" is the last offset. */
export const RETRY_SCHEDULE_MS = [0, 500, 1500, 3000, 6000];
const HOUR_MS = RETRY_SCHEDULE_MS.at(-1)!;
/** Rounds of cycles after the run while a server still holds unsynced outbox rows. */
const SETTLE_ROUNDS = 3;
const CHAOS_ENV = {
  SHINE_RETRY_SCHEDULE_MS: RETRY_SCHEDULE_MS.join(','),
  SHINE_WORKER_TICK_MS: '100',
  SHINE_S2S_TIMEOUT_MS: '1500',
  SHINE_FIRST_ATTEMPT_WAIT_MS: '1000',
  SHINE_SYNC_INTERVAL_MS: '5000',
  SHINE_WS_PING_INTERVAL_MS: '1000',
};

export const SERVERS = ['alpha1', 'alpha2', 'bravo1', 'bravo2'] as const;
const alice = makeUser('alice', ['alpha1', 'alpha2'], seedFor('alice'));
const bob = makeUser('bob', ['bravo1', 'bravo2'], seedFor('bob'));
/** Each user's two servers (indexes into SERVERS). */
const HOMES: Record<string, [number, number]> = { alice: [0, 1], bob: [2, 3] };

/** mulberry32: a tiny seeded generator, uniform in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type FaultKind = 'kill' | 'cut' | 'delay' | 'halfOpen' | 'drop' | 'isolate' | 'emptyDb';

export interface Fault {
  /** When it starts, in ms after the run started. */
  atMs: number;
  /** 0: process faults, 1: link faults (see TRACKS). */
  track: number;
  kind: FaultKind;
  /** Index into SERVERS: the server killed or wiped, or whose incoming link is hit (isolate: and its partner's). */
  server: number;
  /** How long it lasts (down time, partition, delay) before it is healed. */
  forMs: number;
  /** The per-frame delay of a 'delay'. */
  delayMs: number;
}

/** Process faults (kill, empty database) on one track, link faults on the other; the two overlap freely. */
const TRACKS: [FaultKind, number][][] = [
  [['kill', 1]],
  [
    ['cut', 2],
    ['delay', 2],
    ['halfOpen', 2],
    ['drop', 1],
    ['isolate', 1],
  ],
];

/**
 * The injector's plan for a run of `seconds`, from the seed alone, on two tracks that run at once: on
 * each, faults one after another with a gap of 0.3–2 s (process track: 1–4 s), each lasting 0.5–3 s
 * (an isolation of a user's two servers: 1–4 s past the compressed hour, so pairs to them fail), until
 * the end. The process track kills, and restarts from an empty database once per started minute.
 * Sorted by start time.
 */
export function planFaults(seed: number, seconds: number): Fault[] {
  const plan: Fault[] = [];
  for (const [track, kinds] of TRACKS.entries()) {
    const rnd = prng(seed ^ (track * 0x27d4eb2f));
    const total = kinds.reduce((s, [, w]) => s + w, 0);
    const gap = () => (track === 0 ? 1000 + rnd() * 3000 : 300 + rnd() * 1700);
    const own: Fault[] = [];
    // Room at the end for the last fault to heal before the driver stops.
    for (let at = gap(); ;) {
      let pick = rnd() * total;
      const kind = kinds.find(([, w]) => (pick -= w) < 0)![0];
      const isolate = kind === 'isolate';
      const fault = {
        atMs: Math.round(at),
        track,
        kind,
        server: Math.floor(rnd() * 4),
        forMs: Math.round((isolate ? HOUR_MS + 1000 : 500) + rnd() * (isolate ? 3000 : 2500)),
        delayMs: Math.round(100 + rnd() * 1200),
      };
      if (at + fault.forMs >= seconds * 1000 - 4000) break;
      own.push(fault);
      at += fault.forMs + gap();
    }
    if (track === 0) {
      const wipes = Math.max(1, Math.ceil(seconds / 60));
      for (let w = 0; w < wipes && own.length > 0; w++) {
        // One in each slice of the track, never its first fault, so there is history to lose.
        const from = Math.max(1, Math.floor((w * own.length) / wipes));
        const to = Math.max(from + 1, Math.floor(((w + 1) * own.length) / wipes));
        const i = Math.min(own.length - 1, from + Math.floor(rnd() * (to - from)));
        own[i] = { ...own[i]!, kind: 'emptyDb' };
      }
    }
    plan.push(...own);
  }
  return plan.sort((a, b) => a.atMs - b.atMs || a.track - b.track);
}

/** What the driver did, as each request's answer said. */
interface SentRecord {
  from: string;
  to: string;
  op: 'SendMessagePair' | 'DeleteMessage';
  ref: Ref;
  pair: Pair;
  revisionTimeMs: number;
  /** 200, another status, or 0: no answer (the connection died or could not be opened). */
  status: number;
  /** For a delete: the base key of the message it deletes. */
  targetBaseKey?: string;
}

export interface ChaosReport {
  seed: number;
  seconds: number;
  plan: Fault[];
  injected: Record<FaultKind | 'restarts', number>;
  driven: {
    sends: number;
    sends200: number;
    edits: number;
    edits200: number;
    deletes: number;
    deletes200: number;
    reads: number;
    noAnswer: number;
    otherStatus: Record<string, number>;
  };
  /** Rounds of replication cycles on every server until no outbox row was left unsynced (at most SETTLE_ROUNDS). */
  settleRounds: number;
  /** After the run: rows per server (copies, delivery rows by state, tombstones). */
  held: Record<string, { copies: number; delivered: number; failed: number; accepted: number; tombstones: number }>;
  violations: string[];
}

interface Lane {
  user: TestUser;
  peer: string;
  homes: [number, number];
  clients: (RawClient | null)[];
  /** 200-sent texts of this user that no delete was tried on, by base key. */
  live: Map<string, { ref: Ref; revisionTimeMs: number }>;
  nonce: number;
}

export interface ChaosNetwork {
  servers: ServerProcess[];
  relays: WsProxy[];
  close(): Promise<void>;
}

/** The four servers, each behind its relay, federated through the relays, with the compressed schedule. */
export async function startChaosNetwork(): Promise<ChaosNetwork> {
  const ports = await Promise.all(SERVERS.map(() => freePort()));
  const relays = await Promise.all(ports.map((p) => startWsProxy(`ws://127.0.0.1:${p}/ws`)));
  let servers: ServerProcess[];
  try {
    servers = await startFederatedProcesses(
      SERVERS.map((serverLogin, i) => ({
        serverLogin,
        port: ports[i]!,
        publicWsUrl: relays[i]!.wsUrl,
        env: { SHINE_SERVER_KEY_SEED_B64: seedB64For(serverLogin) },
      })),
      CHAOS_ENV,
    );
  } catch (err) {
    await Promise.all(relays.map((r) => r.close()));
    throw err;
  }
  return {
    servers,
    relays,
    close: async () => {
      await Promise.all(servers.map((s) => s.close()));
      await Promise.all(relays.map((r) => r.close()));
    },
  };
}

/** Runs the driver and the injector for `seconds`, heals, settles, syncs, and checks every database. */
export async function runChaos(
  net: ChaosNetwork,
  seed: number,
  seconds: number,
  log: (line: string) => void,
): Promise<ChaosReport> {
  const { servers, relays } = net;
  const plan = planFaults(seed, seconds);
  log(`chaos: seed ${seed}, ${seconds} s, ${plan.length} faults planned (CHAOS_SEED=${seed} reproduces)`);
  const report: ChaosReport = {
    seed,
    seconds,
    plan,
    injected: { kill: 0, cut: 0, delay: 0, halfOpen: 0, drop: 0, isolate: 0, emptyDb: 0, restarts: 0 },
    driven: {
      sends: 0,
      sends200: 0,
      edits: 0,
      edits200: 0,
      deletes: 0,
      deletes200: 0,
      reads: 0,
      noAnswer: 0,
      otherStatus: {},
    },
    held: {},
    settleRounds: 0,
    violations: [],
  };
  const records: SentRecord[] = [];
  const lanes: Lane[] = [
    { user: alice, peer: 'bob', homes: HOMES.alice!, clients: [null, null, null, null], live: new Map(), nonce: 0 },
    { user: bob, peer: 'alice', homes: HOMES.bob!, clients: [null, null, null, null], live: new Map(), nonce: 0 },
  ];
  // Set once every server knows every user (below).
  let t0 = Date.now();
  let stopAt = t0 + seconds * 1000;

  // ---- the driver ----
  let paused: Promise<void> | null = null;
  let inFlight = 0;
  const clientOf = async (lane: Lane, server: number): Promise<RawClient> => {
    const open = lane.clients[server];
    if (open?.isOpen) return open;
    const client = await connectUser(servers[server]!.wsUrl, lane.user, `${lane.user.login}-${SERVERS[server]}`);
    lane.clients[server] = client;
    return client;
  };
  /** The lane's user registered on `server`, and the server knowing the peer's profile (imported from its servers). */
  const warm = async (lane: Lane, server: number): Promise<void> => {
    await waitUntil(
      async () => {
        const answer = await (
          await clientOf(lane, server)
        )
          .request('GetUserProfile', { login: lane.peer })
          .catch(() => null);
        return answer?.ok === true;
      },
      30_000,
      `${SERVERS[server]} knowing ${lane.peer}`,
    );
  };
  const drive = async (lane: Lane, rnd: () => number): Promise<void> => {
    while (Date.now() < stopAt) {
      while (paused) await paused;
      inFlight++;
      try {
        await step(lane, rnd);
      } finally {
        inFlight--;
      }
      await sleep(20 + rnd() * 80);
    }
  };
  const step = async (lane: Lane, rnd: () => number): Promise<void> => {
    const server = lane.homes[rnd() < 0.5 ? 0 : 1];
    const r = rnd();
    const live = [...lane.live.values()];
    const pickLive = () => live[Math.floor(rnd() * live.length)]!;
    const from = lane.user.login;
    const to = lane.peer;
    let record: SentRecord | null = null;
    let kind: 'send' | 'edit' | 'delete' | 'read';
    if (live.length === 0 || r < 0.55) {
      kind = 'send';
      const ref = { from, to, timeMs: Date.now(), nonce: lane.nonce++ };
      record = { from, to, op: 'SendMessagePair', ref, pair: pairOf(ref), revisionTimeMs: 0, status: 0 };
    } else if (r < 0.7) {
      kind = 'edit';
      const m = pickLive();
      const rev = Math.max(Date.now(), m.revisionTimeMs + 1);
      const pair = pairOf({ ...m.ref, revisionTimeMs: rev }, { kind: 'text', text: `edit ${rev}` });
      record = { from, to, op: 'SendMessagePair', ref: m.ref, pair, revisionTimeMs: rev, status: 0 };
    } else if (r < 0.8) {
      kind = 'delete';
      const m = pickLive();
      const baseKey = `${m.ref.from}|${m.ref.to}|${m.ref.timeMs}|${m.ref.nonce}`;
      // Whatever the answer, that message is never edited or deleted again.
      lane.live.delete(baseKey);
      const ref = { from, to, timeMs: Date.now(), nonce: lane.nonce++ };
      const pair = pairOf(ref, { kind: 'deleteMessage', target: m.ref });
      record = { from, to, op: 'DeleteMessage', ref, pair, revisionTimeMs: 0, status: 0, targetBaseKey: baseKey };
    } else {
      kind = 'read';
    }
    report.driven[kind === 'send' ? 'sends' : kind === 'edit' ? 'edits' : kind === 'delete' ? 'deletes' : 'reads']++;
    let status = 0;
    try {
      const client = await clientOf(lane, server);
      if (record) {
        const answer = await client.request(record.op, {
          incomingBlobB64: record.pair.incomingBlobB64,
          outgoingBlobB64: record.pair.outgoingBlobB64,
        });
        status = answer.status;
        if (!answer.ok)
          report.driven.otherStatus[answer.error.code] = (report.driven.otherStatus[answer.error.code] ?? 0) + 1;
      } else {
        const answer = await client.request<OpResults['GetDirectMessages']>('GetDirectMessages', {
          peerLogin: to,
          beforeTimeMs: 0,
          beforeMessageKey: '',
          limit: 100,
        });
        status = answer.status;
        if (answer.ok) {
          const keys = answer.payload.items.map((i) => i.messageKey);
          if (new Set(keys).size !== keys.length)
            report.violations.push(`a history page of ${from} on ${SERVERS[server]} repeats a message key`);
        } else report.driven.otherStatus[answer.error.code] = (report.driven.otherStatus[answer.error.code] ?? 0) + 1;
      }
    } catch {
      report.driven.noAnswer++;
    }
    if (!record) return;
    record.status = status;
    records.push(record);
    if (status !== 200) return;
    if (kind === 'send') {
      report.driven.sends200++;
      lane.live.set(record.pair.baseKey, { ref: record.ref, revisionTimeMs: 0 });
    } else if (kind === 'edit') {
      report.driven.edits200++;
      const m = lane.live.get(record.pair.baseKey);
      if (m) m.revisionTimeMs = Math.max(m.revisionTimeMs, record.revisionTimeMs);
    } else report.driven.deletes200++;
  };

  // ---- the injector ----
  const restart = async (i: number): Promise<void> => {
    for (let tries = 1; ; tries++) {
      try {
        await servers[i]!.restart();
        report.injected.restarts++;
        return;
      } catch (err) {
        if (tries === 3) throw err;
      }
    }
  };
  /** Retries an admin call while the link it needs is still coming back. */
  const retrying = async <T>(what: () => Promise<T>): Promise<T> => {
    for (let tries = 1; ; tries++) {
      try {
        return await what();
      } catch (err) {
        if (tries === 40) throw err;
        await sleep(250);
      }
    }
  };
  /** One replication cycle of server i that reached every peer without an error. */
  const cleanSync = (i: number) =>
    retrying(async () => {
      const summary = await syncNow(servers[i]!.httpUrl, ADMIN_TOKEN);
      if (summary.errors > 0) throw new Error(`sync cycle of ${SERVERS[i]}: ${summary.errors} error(s)`);
      return summary;
    });
  const emptyDbRestart = async (victim: number): Promise<void> => {
    const partner = victim ^ 1;
    const owner = victim < 2 ? 'alice' : 'bob';
    // The driver waits: a disk lost right after a replication cycle, so the partner holds everything.
    let resume!: () => void;
    paused = new Promise((r) => (resume = r));
    try {
      await waitUntil(() => inFlight === 0 && !linkFaultOn, 30_000, 'the driver idle and the links healed');
      await cleanSync(partner);
      await servers[victim]!.kill('SIGKILL');
      await servers[victim]!.resetDb();
      await restart(victim);
      // Its user registers again (as their client would), then the partner offers everything again.
      await warm(
        lanes.find((l) => l.user.login === owner)!,
        victim,
      );
      await retrying(() =>
        adminCall(servers[partner]!.httpUrl, 'POST', `/admin/mark-unsynced?owner=${owner}`, ADMIN_TOKEN),
      );
      await cleanSync(victim);
    } finally {
      paused = null;
      resume();
    }
  };
  let linkFaultOn = false;
  const inject = async (track: number): Promise<void> => {
    for (const f of plan.filter((x) => x.track === track)) {
      const wait = t0 + f.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      // Links stay healed while a server is rebuilt from an empty database (the link faults wait).
      while (track === 1 && paused) await paused;
      if (track === 1) linkFaultOn = true;
      log(`chaos: +${Date.now() - t0} ms ${f.kind} ${SERVERS[f.server]} for ${f.forMs} ms`);
      report.injected[f.kind]++;
      const s = servers[f.server]!;
      const relay = relays[f.server]!;
      switch (f.kind) {
        case 'kill':
          await s.kill('SIGKILL');
          await sleep(f.forMs);
          await restart(f.server);
          break;
        case 'cut':
          relay.cut();
          await sleep(f.forMs);
          relay.heal();
          break;
        case 'delay':
          relay.delay(f.delayMs);
          await sleep(f.forMs);
          relay.heal();
          break;
        case 'halfOpen':
          relay.blackholeOpen();
          await sleep(f.forMs);
          relay.heal();
          break;
        case 'drop':
          relay.drop();
          break;
        case 'isolate': {
          // Both servers of one user: nothing reaches them (calls, replication between them) for over an hour.
          const pair = [relays[f.server & ~1]!, relays[f.server | 1]!];
          pair.forEach((r) => r.cut());
          await sleep(f.forMs);
          pair.forEach((r) => r.heal());
          break;
        }
        case 'emptyDb':
          await emptyDbRestart(f.server);
          break;
      }
      if (track === 1) linkFaultOn = false;
    }
  };

  for (const lane of lanes) for (const home of lane.homes) await clientOf(lane, home);
  for (const lane of lanes) for (const home of lane.homes) await warm(lane, home);
  t0 = Date.now();
  stopAt = t0 + seconds * 1000;
  const rnd = prng(seed ^ 0x5bd1e995);
  const laneRnds = [prng(Math.floor(rnd() * 2 ** 32)), prng(Math.floor(rnd() * 2 ** 32))];
  await Promise.all([inject(0), inject(1), ...lanes.map((l, i) => drive(l, laneRnds[i]!))]);
  await Promise.all(lanes.flatMap((l) => l.clients.map((c) => c?.close())));

  // ---- heal, settle, one replication cycle ----
  relays.forEach((r) => r.heal());
  log(`chaos: driver and injector done after ${Date.now() - t0} ms; settling`);
  const acceptedLeft = async () => {
    let n = 0;
    for (const s of servers)
      n += Number(
        (await queryTestDb(s.dbUrl, `SELECT COUNT(*) AS n FROM dm_delivery_state WHERE state = 'accepted'`))[0]!.n,
      );
    return n;
  };
  // Rows still `accepted` end within the hour; the checker reports any that do not.
  await waitUntil(async () => (await acceptedLeft()) === 0, 2 * HOUR_MS + 30_000, 'no delivery row accepted').catch(
    () => undefined,
  );
  // A round of cycles on every server. The calls a first attempt leaves to the recipient's other server run
  // on in the background (docs/protocol.md §6.2), as do probes of a server not answering: one that lands
  // after its partner's cycle leaves an unsynced row there. So rounds go on while a server holds unsynced
  // rows, at most SETTLE_ROUNDS; a row that no round acknowledges is reported by the checker.
  for (report.settleRounds = 1; ; report.settleRounds++) {
    for (const i of servers.keys()) await cleanSync(i);
    if (
      report.settleRounds === SETTLE_ROUNDS ||
      (await Promise.all(servers.map(unsyncedRows))).every((rows) => rows.length === 0)
    )
      break;
    await sleep(Number(CHAOS_ENV.SHINE_S2S_TIMEOUT_MS)); // calls still in flight end within their timeout
  }
  log(`chaos: settled after ${Date.now() - t0} ms (${report.settleRounds} round(s) of cycles); checking`);

  await checkInvariants(servers, records, report);
  return report;
}

/** A server's unsynced outbox rows, as `owner primaryMessageKey` (the checker's invariant 6). */
async function unsyncedRows(server: ServerProcess): Promise<string[]> {
  const rows = await queryTestDb(
    server.dbUrl,
    `SELECT owner_login AS "owner", primary_message_key AS "key" FROM dm_sync_outbox WHERE NOT synced
     ORDER BY stored_at_ms`,
  );
  return rows.map((r) => `${String(r.owner)} ${String(r.key)}`);
}

interface CopyRow {
  owner: string;
  key: string;
  baseKey: string;
  type: number;
  rev: number;
}
interface DeliveryRowDb {
  outgoingKey: string;
  baseKey: string;
  sender: string;
  recipient: string;
  rev: number;
  state: string;
  acceptedAtMs: number;
}
interface TombstoneRow {
  owner: string;
  kind: string;
  target: string;
}

/** Reads every database and appends each invariant that does not hold to report.violations. */
async function checkInvariants(servers: ServerProcess[], records: SentRecord[], report: ChaosReport): Promise<void> {
  const v = report.violations;
  const copies: CopyRow[][] = [];
  const delivery: DeliveryRowDb[][] = [];
  const tombstones: TombstoneRow[][] = [];
  const now = Date.now();
  for (const [i, s] of servers.entries()) {
    copies[i] = (
      await queryTestDb(
        s.dbUrl,
        `SELECT owner_login AS "owner", message_key AS "key", base_key AS "baseKey", message_type AS "type",
           revision_time_ms AS "rev" FROM signed_messages`,
      )
    ).map((r) => ({ ...(r as unknown as CopyRow), type: Number(r.type), rev: Number(r.rev) }));
    delivery[i] = (
      await queryTestDb(
        s.dbUrl,
        `SELECT outgoing_key AS "outgoingKey", base_key AS "baseKey", sender_login AS "sender",
           recipient_login AS "recipient", revision_time_ms AS "rev", state, accepted_at_ms AS "acceptedAtMs"
         FROM dm_delivery_state`,
      )
    ).map((r) => ({ ...(r as unknown as DeliveryRowDb), rev: Number(r.rev), acceptedAtMs: Number(r.acceptedAtMs) }));
    tombstones[i] = (await queryTestDb(
      s.dbUrl,
      `SELECT owner_login AS "owner", kind, target FROM dm_tombstones`,
    )) as unknown as TombstoneRow[];
    const unsynced = await unsyncedRows(s);
    if (unsynced.length > 0)
      v.push(
        `${SERVERS[i]}: ${unsynced.length} outbox row(s) not synced after ${report.settleRounds} round(s) of cycles` +
          ` (${unsynced.slice(0, 3).join(', ')}${unsynced.length > 3 ? ', …' : ''})`,
      );
    const dup = await queryTestDb(
      s.dbUrl,
      `SELECT owner_login AS "owner", base_key AS "baseKey", message_type AS "type", COUNT(*) AS n FROM signed_messages
       GROUP BY owner_login, base_key, message_type HAVING COUNT(*) > 1`,
    );
    for (const d of dup) v.push(`${SERVERS[i]}: ${d.owner} holds ${d.baseKey} type ${d.type} ${d.n} times`);
    report.held[SERVERS[i]!] = {
      copies: copies[i]!.length,
      delivered: delivery[i]!.filter((d) => d.state === 'delivered').length,
      failed: delivery[i]!.filter((d) => d.state === 'failed').length,
      accepted: delivery[i]!.filter((d) => d.state === 'accepted').length,
      tombstones: tombstones[i]!.length,
    };
  }
  const copyOf = (i: number, owner: string, baseKey: string, type: number) =>
    copies[i]!.find((c) => c.owner === owner && c.baseKey === baseKey && c.type === type);
  const tombstoned = (i: number, owner: string, baseKey: string) =>
    tombstones[i]!.some((t) => t.owner === owner && t.kind === 'message' && t.target === baseKey);

  // No row stuck `accepted` past its hour.
  for (const [i, rows] of delivery.entries())
    for (const d of rows)
      if (d.state === 'accepted' && d.acceptedAtMs + HOUR_MS + 5_000 < now)
        v.push(`${SERVERS[i]}: ${d.outgoingKey} still accepted ${now - d.acceptedAtMs} ms after acceptance`);

  // Every status-200 pair is terminal on each sender server that holds it, and both hold it (or its delete).
  const deletedBase = new Set(records.filter((r) => r.op === 'DeleteMessage').map((r) => r.targetBaseKey!));
  for (const r of records.filter((x) => x.status === 200)) {
    for (const i of HOMES[r.from]!) {
      const row = delivery[i]!.find((d) => d.outgoingKey === r.pair.outgoingKey);
      if (row && row.state !== 'delivered' && row.state !== 'failed')
        v.push(`${SERVERS[i]}: 200-answered ${r.pair.outgoingKey} is ${row.state}`);
      if (deletedBase.has(r.pair.baseKey) && tombstoned(i, r.from, r.pair.baseKey)) continue;
      // A pair a server holds is one it delivers or did (docs/protocol.md §6.8: also one that came by sync).
      if (!row) v.push(`${SERVERS[i]}: 200-answered ${r.pair.outgoingKey} has no delivery row`);
      const copy = copyOf(i, r.from, r.pair.baseKey, r.op === 'DeleteMessage' ? 6 : 2);
      if (!copy) v.push(`${SERVERS[i]}: 200-answered ${r.pair.outgoingKey} missing from ${r.from}'s copies`);
      else if (copy.rev < r.revisionTimeMs)
        v.push(`${SERVERS[i]}: ${r.pair.outgoingKey} at revision ${copy.rev}, ${r.revisionTimeMs} was answered 200`);
      if (r.op === 'DeleteMessage' && !tombstoned(i, r.from, r.targetBaseKey!))
        v.push(`${SERVERS[i]}: 200-answered delete of ${r.targetBaseKey} has no tombstone of ${r.from}`);
    }
  }

  const history = new Map<string, Set<string>>();
  // Each user's history, as their client reads it on each of their servers, shows every message once.
  for (const [owner, user, peer] of [
    ['alice', alice, 'bob'],
    ['bob', bob, 'alice'],
  ] as const)
    for (const i of HOMES[owner]!) {
      const client = await connectUser(servers[i]!.wsUrl, user, `${owner}-checker`);
      try {
        const keys = (await fullHistory(client, peer)).map((h) => h.messageKey);
        const seen = new Set<string>();
        history.set(`${i}:${owner}`, seen);
        for (const k of keys)
          if (seen.has(k) || !seen.add(k)) v.push(`${SERVERS[i]}: ${owner}'s history shows ${k} twice`);
      } finally {
        await client.close();
      }
    }

  // Every `delivered` copy is in the recipient's history on both of the recipient's servers.
  for (const [i, rows] of delivery.entries())
    for (const d of rows) {
      if (d.state !== 'delivered') continue;
      const incomingType = Number(d.outgoingKey.split('|').at(-1)) - 1;
      for (const j of HOMES[d.recipient] ?? []) {
        if (tombstoned(j, d.recipient, d.baseKey)) continue;
        const copy = copyOf(j, d.recipient, d.baseKey, incomingType);
        if (!copy)
          v.push(`${SERVERS[j]}: ${d.baseKey}|${incomingType}, delivered by ${SERVERS[i]}, missing for ${d.recipient}`);
        else if (incomingType === 1 && !history.get(`${j}:${d.recipient}`)?.has(`${d.baseKey}|1`))
          v.push(`${SERVERS[j]}: ${d.baseKey}|1, delivered by ${SERVERS[i]}, not in ${d.recipient}'s history`);
        else if (copy.rev < d.rev)
          v.push(`${SERVERS[j]}: ${d.baseKey} at revision ${copy.rev}, ${SERVERS[i]} delivered ${d.rev}`);
      }
    }

  // Every tombstone applied everywhere: on both of its owner's servers, and no text of it left there;
  // and none for a message no delete was sent for.
  for (const [i, rows] of tombstones.entries())
    for (const t of rows) {
      if (t.kind !== 'message') continue;
      if (!deletedBase.has(t.target))
        v.push(`${SERVERS[i]}: tombstone ${t.owner}/${t.target} of a message nobody deleted`);
      // A sender's server also keeps the recipient's copy of a pair (and so the recipient's tombstone);
      // whether the recipient's servers have it too is the delivered-copy check above.
      if (!HOMES[t.owner]!.includes(i)) continue;
      for (const j of HOMES[t.owner]!) {
        if (!tombstoned(j, t.owner, t.target))
          v.push(`${SERVERS[j]}: tombstone ${t.owner}/${t.target} of ${SERVERS[i]} missing`);
        for (const type of [1, 2])
          if (copyOf(j, t.owner, t.target, type))
            v.push(`${SERVERS[j]}: ${t.owner} still holds ${t.target}|${type} under its tombstone`);
      }
    }

  // Both servers of a user hold the same copies at the same revisions.
  for (const [owner, [a, b]] of Object.entries(HOMES)) {
    const view = (i: number) =>
      new Map(copies[i]!.filter((c) => c.owner === owner).map((c) => [c.key, c.rev] as const));
    const [va, vb] = [view(a), view(b)];
    for (const [key, rev] of va)
      if (vb.get(key) !== rev) v.push(`${owner}: ${key} is ${rev} on ${SERVERS[a]}, ${vb.get(key)} on ${SERVERS[b]}`);
    for (const key of vb.keys()) if (!va.has(key)) v.push(`${owner}: ${key} on ${SERVERS[b]} only`);
  }

  // `shine check` on every database.
  for (const [i, s] of servers.entries()) {
    const { code, stdout } = await shineCheck(s.dbUrl);
    if (code !== 0) v.push(`${SERVERS[i]}: shine check exited ${code}: ${stdout.slice(0, 2000)}`);
  }
}

/** `shine check --json --db url` as a process; its exit status and output. */
async function shineCheck(dbUrl: string): Promise<{ code: number; stdout: string }> {
  const cli = await cliBundle();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, 'check', '--json', '--db', dbUrl], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SHINE_LOG_LEVEL: 'error' },
    });
    let stdout = '';
    child.stdout.on('data', (d) => (stdout += String(d)));
    child.stderr.on('data', (d) => (stdout += String(d)));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? 1, stdout }));
  });
}
