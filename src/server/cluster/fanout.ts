/**
 * Session events and presence across the processes of one server (docs/protocol.md §9.2, decision 28).
 * One process: the hub is everything (LocalFanout). Several processes: Redis pub/sub carries events to
 * the other processes' sessions and a sorted set per login says which devices have a session anywhere
 * (RedisFanout). Losing Redis never stops a process: its own sessions keep getting events, and once
 * Redis is back every process replays what its sessions missed from the store.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import type { EventFrame } from '../../protocol/envelope.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../log.js';
import type { Counter, Metrics } from '../metrics.js';
import type { SessionHub, UserSession } from '../sessions.js';

/** Replays, for each of these sessions, the stored events it has not acknowledged; resolves when done. */
export type ResyncHandler = (sessions: UserSession[]) => Promise<void>;

export interface Fanout {
  /** Sends an event to every session of login on every process, except one session of this process. */
  sendToUser(login: string, frame: EventFrame, exceptSessionId?: string): void;
  /**
   * The same; resolves with how many sessions it went to: this process's that took it, plus the
   * sessions of login that other processes have open (by presence; none while Redis is away).
   */
  sendToUserCounted(login: string, frame: EventFrame, exceptSessionId?: string): Promise<number>;
  /** The deviceIds of login with an open session on some process (only this one's while Redis is away). */
  onlineDevices(login: string): Promise<Set<string>>;
  /** What to run when this process's sessions may have missed events from other processes. */
  onResync(handler: ResyncHandler): void;
  start(): Promise<void>;
  close(): Promise<void>;
}

/** One process: its hub holds every session of the server. */
export class LocalFanout implements Fanout {
  constructor(private readonly hub: SessionHub) {}

  sendToUser(login: string, frame: EventFrame, exceptSessionId?: string): void {
    this.hub.sendToUser(login, frame, exceptSessionId);
  }

  sendToUserCounted(login: string, frame: EventFrame, exceptSessionId?: string): Promise<number> {
    return Promise.resolve(this.hub.sendToUser(login, frame, exceptSessionId));
  }

  onlineDevices(login: string): Promise<Set<string>> {
    return Promise.resolve(localDevices(this.hub, login));
  }

  onResync(): void {
    // Nothing is ever missed: every session is here.
  }

  async start(): Promise<void> {}
  async close(): Promise<void> {}
}

export interface RedisFanoutDeps {
  hub: SessionHub;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  redisUrl: string;
  /** SHINE_REDIS_PREFIX: every key and channel starts with it. */
  prefix: string;
  /** How long a presence entry lives unless refreshed (refreshed every third of it); default 30 s. */
  presenceTtlMs?: number;
  /** How long start() waits for Redis before serving without it; default 5 s. */
  startWaitMs?: number;
}

/** Pub/sub channels events are spread over by login (Redis Cluster spreads channels over its nodes). */
export const FANOUT_SHARDS = 8;
const PRESENCE_TTL_MS = 30_000;
const START_WAIT_MS = 5_000;
/** A Redis command that takes longer fails: an event or a push decision never waits on a stuck Redis. */
const COMMAND_TIMEOUT_MS = 2_000;

type Message = { p: string; t: 'event'; l: string; f: EventFrame } | { p: string; t: 'resync' };

/**
 * Several processes through Redis. The publishing process sends to its own sessions directly and
 * ignores its own messages coming back. Presence: `<prefix>presence:<login>` is a sorted set of
 * `<deviceId> <processId> <sessionId>` scored by when the entry expires, refreshed while the socket
 * lives and removed when it closes; a process that dies leaves entries that expire on their own.
 */
export class RedisFanout implements Fanout {
  /** Tells this process's messages and presence entries from the others'. */
  readonly processId = randomBytes(8).toString('hex');
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly channels: string[];
  private readonly ttlMs: number;
  private readonly count: Record<'publishFailed' | 'presenceFailed' | 'received' | 'resyncs', Counter>;
  private pubReady = false;
  private subReady = false;
  /** Both connections ready and subscribed. */
  private up = false;
  /** Redis was reachable once since start, so a later `up` is a return (others may have missed events). */
  private wasUp = false;
  private lostLogged = false;
  private closed = false;
  private refreshTimer: TimerHandle | null = null;
  private resyncHandler: ResyncHandler = async () => {};
  private resyncing: Promise<void> | null = null;
  private resyncAgain = false;
  private upWaiters: (() => void)[] = [];

  constructor(private readonly deps: RedisFanoutDeps) {
    this.ttlMs = deps.presenceTtlMs ?? PRESENCE_TTL_MS;
    this.channels = Array.from({ length: FANOUT_SHARDS }, (_, i) => `${deps.prefix}events:${i}`);
    const options = {
      lazyConnect: true,
      commandTimeout: COMMAND_TIMEOUT_MS,
      // Reconnect forever, at most a second apart, so fan-out resumes soon after Redis is back.
      retryStrategy: (times: number) => Math.min(50 * times, 1000),
      // Events are sent now or never (the store is what is kept); nothing queues up while Redis is away.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      // Resubscribed by hand on every ready, so the moment the subscription holds is known.
      autoResubscribe: false,
    };
    this.pub = new Redis(deps.redisUrl, Object.assign({}, options, { connectionName: 'shine-fanout-pub' }));
    this.sub = new Redis(deps.redisUrl, Object.assign({}, options, { connectionName: 'shine-fanout-sub' }));
    const { metrics } = deps;
    metrics.gauge('redis_up', 'Whether this process reaches Redis (1) or serves its own sessions only (0).', () =>
      this.up ? 1 : 0,
    );
    this.count = {
      publishFailed: metrics.counter(
        'redis_publish_failed_total',
        'Events not published to the other processes because Redis failed.',
      ),
      presenceFailed: metrics.counter(
        'redis_presence_failed_total',
        'Presence writes and reads that failed because Redis failed.',
      ),
      received: metrics.counter('fanout_received_total', 'Events received from other processes through Redis.'),
      resyncs: metrics.counter(
        'fanout_resyncs_total',
        "Replays of this process's sessions from the store after Redis came back.",
      ),
    };
  }

  /** Connects, subscribes and starts refreshing presence; serves without Redis if it is not there in time. */
  async start(): Promise<void> {
    const { hub, clock, log } = this.deps;
    for (const [name, conn] of [
      ['pub', this.pub],
      ['sub', this.sub],
    ] as const) {
      // ioredis reports every failed reconnect as an error event; the state changes are logged once below.
      conn.on('error', (err: Error) => log.debug('redis error', { connection: name, err: err.message }));
      conn.on('close', () => this.connectionDown(name));
    }
    this.pub.on('ready', () => {
      this.pubReady = true;
      this.maybeUp();
    });
    this.sub.on('ready', () => void this.subscribe());
    this.sub.on('message', (_channel: string, text: string) => this.receive(text));
    hub.watch({
      bound: (s) => void this.present([s]),
      ended: (s) => void this.absent(s),
    });
    const refresh = (): void => {
      void this.present(hub.userSessions());
      this.refreshTimer = clock.setTimer(Math.max(1, Math.floor(this.ttlMs / 3)), refresh);
    };
    this.refreshTimer = clock.setTimer(Math.max(1, Math.floor(this.ttlMs / 3)), refresh);
    // connect() rejects when the first try fails; ioredis then keeps retrying on its own.
    this.pub.connect().catch(() => {});
    this.sub.connect().catch(() => {});
    const ready = new Promise<boolean>((resolve) => this.upWaiters.push(() => resolve(true)));
    let timer: TimerHandle | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = clock.setTimer(this.deps.startWaitMs ?? START_WAIT_MS, () => resolve(false));
    });
    const reached = await Promise.race([ready, late]);
    timer?.cancel();
    if (!reached) {
      this.lostLogged = true;
      log.warn('Redis not reachable: serving only the sessions of this process until it is', {
        redisUrl: redactUrl(this.deps.redisUrl),
      });
    }
  }

  onResync(handler: ResyncHandler): void {
    this.resyncHandler = handler;
  }

  sendToUser(login: string, frame: EventFrame, exceptSessionId?: string): void {
    this.deps.hub.sendToUser(login, frame, exceptSessionId);
    this.publish({ p: this.processId, t: 'event', l: login, f: frame }, shardOf(login));
  }

  async sendToUserCounted(login: string, frame: EventFrame, exceptSessionId?: string): Promise<number> {
    const here = this.deps.hub.sendToUser(login, frame, exceptSessionId);
    this.publish({ p: this.processId, t: 'event', l: login, f: frame }, shardOf(login));
    const entries = await this.presenceOf(login);
    return here + (entries?.filter((e) => e.processId !== this.processId).length ?? 0);
  }

  async onlineDevices(login: string): Promise<Set<string>> {
    const devices = localDevices(this.deps.hub, login);
    for (const e of (await this.presenceOf(login)) ?? []) devices.add(e.deviceId);
    return devices;
  }

  /** Whether both connections are ready and subscribed (tests and /metrics). */
  get connected(): boolean {
    return this.up;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.refreshTimer?.cancel();
    const mine = this.deps.hub.userSessions();
    if (this.up && mine.length > 0) {
      const multi = this.pub.multi();
      for (const s of mine) multi.zrem(this.presenceKey(s.login), this.memberOf(s));
      await multi.exec().catch(() => {});
    }
    this.up = false;
    this.pub.disconnect();
    this.sub.disconnect();
  }

  private async subscribe(): Promise<void> {
    try {
      await this.sub.subscribe(...this.channels);
      this.subReady = true;
      this.maybeUp();
    } catch (err) {
      // The connection went again; its next ready subscribes again.
      this.deps.log.debug('redis subscribe failed', { err: String(err) });
    }
  }

  private connectionDown(name: 'pub' | 'sub'): void {
    if (name === 'pub') this.pubReady = false;
    else this.subReady = false;
    if (!this.up) return;
    this.up = false;
    if (this.closed) return;
    this.lostLogged = true;
    this.deps.log.warn('Redis lost: serving only the sessions of this process until it is back', {
      connection: name,
    });
  }

  /**
   * Both connections are back: presence is written again (entries may have expired or Redis lost
   * them), the other processes are asked to replay their sessions' missed events, and so are ours.
   */
  private maybeUp(): void {
    if (this.up || !this.pubReady || !this.subReady || this.closed) return;
    this.up = true;
    const returned = this.wasUp || this.lostLogged;
    this.wasUp = true;
    for (const w of this.upWaiters.splice(0)) w();
    void this.present(this.deps.hub.userSessions());
    if (!returned) return;
    if (this.lostLogged) this.deps.log.info('Redis is back: fan-out between processes resumes');
    this.lostLogged = false;
    this.publish({ p: this.processId, t: 'resync' }, 0);
    this.resync();
  }

  private publish(message: Message, shard: number): void {
    if (this.closed) return;
    this.pub.publish(this.channels[shard]!, JSON.stringify(message)).catch((err: unknown) => {
      this.count.publishFailed.inc();
      this.deps.log.debug('redis publish failed', { err: String(err) });
      // On a connection that looked fine (a Redis that hangs, a command timing out) the other processes
      // missed this event without anyone noticing a loss: the connection is made again, and its return
      // is a return of Redis, with the resync that brings.
      if (this.pubReady && !this.closed) {
        this.connectionDown('pub');
        this.pub.disconnect(true);
      }
    });
  }

  private receive(text: string): void {
    let message: Message;
    try {
      message = JSON.parse(text) as Message;
    } catch {
      this.deps.log.warn('ignoring a fan-out message that is not JSON');
      return;
    }
    if (message.p === this.processId) return;
    if (message.t === 'resync') return this.resync();
    if (message.t !== 'event') return;
    this.count.received.inc();
    this.deps.hub.sendToUser(message.l, message.f);
  }

  /** Runs the resync handler over this process's sessions; requests while one runs make one more run. */
  private resync(): void {
    if (this.closed) return;
    if (this.resyncing) {
      this.resyncAgain = true;
      return;
    }
    this.count.resyncs.inc();
    this.resyncing = this.resyncHandler(this.deps.hub.userSessions())
      .catch((err: unknown) => this.deps.log.error('resync after Redis came back failed', { err }))
      .finally(() => {
        this.resyncing = null;
        if (this.resyncAgain) {
          this.resyncAgain = false;
          this.resync();
        }
      });
  }

  private async present(sessions: UserSession[]): Promise<void> {
    if (!this.up || sessions.length === 0) return;
    const expiresAt = this.deps.clock.now() + this.ttlMs;
    const multi = this.pub.multi();
    for (const s of sessions) {
      const key = this.presenceKey(s.login);
      multi.zadd(key, expiresAt, this.memberOf(s));
      // Entries of processes that died without removing them.
      multi.zremrangebyscore(key, '-inf', this.deps.clock.now());
      // The key goes too once nobody refreshes it.
      multi.pexpire(key, this.ttlMs * 2);
    }
    try {
      await multi.exec();
    } catch (err) {
      this.presenceFailed(err);
    }
  }

  private async absent(session: UserSession): Promise<void> {
    if (!this.up) return;
    try {
      await this.pub.zrem(this.presenceKey(session.login), this.memberOf(session));
    } catch (err) {
      this.presenceFailed(err);
    }
  }

  /** Login's unexpired presence entries; null when Redis cannot tell. */
  private async presenceOf(login: string): Promise<{ deviceId: string; processId: string }[] | null> {
    if (!this.up) return null;
    try {
      const members = await this.pub.zrangebyscore(this.presenceKey(login), this.deps.clock.now(), '+inf');
      return members.map((m) => {
        const [deviceId = '', processId = ''] = m.split(' ');
        return { deviceId, processId };
      });
    } catch (err) {
      this.presenceFailed(err);
      return null;
    }
  }

  private presenceFailed(err: unknown): void {
    this.count.presenceFailed.inc();
    this.deps.log.debug('redis presence failed', { err: String(err) });
  }

  private presenceKey(login: string): string {
    return `${this.deps.prefix}presence:${login}`;
  }

  private memberOf(session: UserSession): string {
    // deviceIds are [A-Za-z0-9_-] and session ids UUIDs: a space separates them unambiguously.
    return `${session.deviceId} ${this.processId} ${session.id}`;
  }
}

function localDevices(hub: SessionHub, login: string): Set<string> {
  return new Set(hub.sessionsOf(login).flatMap((s) => (s.deviceId ? [s.deviceId] : [])));
}

/** Spreads logins over the channels (FNV-1a). */
export function shardOf(login: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < login.length; i++) h = Math.imul(h ^ login.charCodeAt(i), 0x01000193);
  return (h >>> 0) % FANOUT_SHARDS;
}

/** The URL without a password, for the log. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'redis://…';
  }
}
