/**
 * Outgoing server-to-server channel (docs/protocol.md §5.1, §5.4): one persistent, multiplexed WebSocket per peer
 * server, authenticated with ServerAuth, requests matched by requestId with a per-call timeout, and
 * reconnection with exponential backoff.
 */
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import WebSocket from 'ws';
import { toBase64 } from '../../protocol/bytes.js';
import type { ChannelErrors } from '../../protocol/channel.js';
import { RequestChannel, errorOfAnswer } from '../../protocol/channel.js';
import { MAX_FRAME } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import { s2sSigningText } from '../../protocol/identity.js';
import type { OpAnswer, OpName, OpPayload } from '../../protocol/ops.js';
import { answerSchema } from '../../protocol/ops.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../log.js';
import { holdForTick } from '../transport/tick-cork.js';
import type { PeerCaller } from './peer-caller.js';

export interface PeerPoolDeps {
  serverLogin: string;
  /** Signs a text with this server's key (base64 signature), for ServerAuth. */
  sign(text: string): string;
  clock: Clock;
  log: Logger;
  /** The ws URL of a peer server from the directory, or null when it is unknown. */
  resolveUrl(serverLogin: string): Promise<string | null>;
  /** A peer that could not be reached is reachable again. */
  onPeerAlive?(serverLogin: string): void;
  timeoutMs: number;
  /** Backoff bounds between failed connection attempts. */
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
}

/** Error of a call that never got an answer (unreachable, timeout, closed); distinct from an error answer. */
export class PeerUnavailableError extends Error {
  constructor(
    readonly serverLogin: string,
    message: string,
    /**
     * The call was sent on an open connection and its time ran out without an answer: the peer's process
     * reads (its connection stayed up) but does not answer, e.g. while its database is stuck. False when no
     * connection could carry the call (dial, backoff, a connection closed or dropped for silence).
     */
    readonly unanswered = false,
  ) {
    super(`${serverLogin}: ${message}`);
    this.name = 'PeerUnavailableError';
  }
}

/**
 * Heartbeats (docs/protocol.md §5.4 is silent; see docs/protocol.md): a connection pings every timeoutMs / 3 and
 * is dropped when a ping has gone unanswered by the next one, so a half-open connection is found
 * within 2/3 of the call timeout after it went silent — before the calls waiting on it time out —
 * and the next call dials afresh.
 */
export const HEARTBEATS_PER_TIMEOUT = 3;

class PeerConnection {
  private ws: WebSocket | null = null;
  private channel: RequestChannel | null = null;
  private ready: Promise<void> | null = null;
  private failures = 0;
  private retryAtMs = 0;
  /** The last connection failed — a dial, or an open connection that went silent — and no dial has succeeded since. */
  private failed = false;
  private wasDown = false;
  private closed = false;
  private probeTimer: TimerHandle | null = null;
  private probeFailures = 0;
  /** Calls waiting out the backoff: each ends its wait early when the peer shows it is up. */
  private readonly backingOffCalls = new Set<() => void>();

  constructor(
    private readonly peer: string,
    private readonly deps: PeerPoolDeps,
  ) {}

  /** One call within one timeout (docs/protocol.md §6.2), all of it: a backoff wait, dialling, ServerAuth, the request. */
  async call(op: string, payload: object): Promise<unknown> {
    const deadline = this.deps.clock.now() + this.deps.timeoutMs;
    await this.byDeadline(this.connect(deadline), deadline, `${op} timed out while connecting`);
    return this.channel!.call(op, payload, { timeoutMs: Math.max(0, deadline - this.deps.clock.now()) });
  }

  /** Settles as p does, or rejects at the deadline (p itself runs on: a connection is shared). */
  private byDeadline<T>(p: Promise<T>, deadline: number, why: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.deps.clock.setTimer(Math.max(0, deadline - this.deps.clock.now()), () =>
        reject(new PeerUnavailableError(this.peer, why)),
      );
      p.then(
        (v) => (timer.cancel(), resolve(v)),
        (err: unknown) => (timer.cancel(), reject(err instanceof Error ? err : new Error(String(err)))),
      );
    });
  }

  private connect(deadline: number): Promise<void> {
    if (this.closed) return Promise.reject(new PeerUnavailableError(this.peer, 'pool closed'));
    if (this.ready) return this.ready;
    const now = this.deps.clock.now();
    const wait = this.retryAtMs - now;
    if (wait > 0) {
      // A call during the backoff waits for the next dial instead of failing untried (an attempt would be
      // spent without a call), unless the dial would come after the call's deadline.
      if (now + wait >= deadline)
        return Promise.reject(new PeerUnavailableError(this.peer, 'unreachable (backing off)'));
      return this.backoffOver(wait).then(() => this.connect(deadline));
    }
    return this.dial(false);
  }

  /**
   * Resolves after waitMs, or as soon as the peer shows it is up — a background dial reached it, or it
   * authenticated to this server — so a call made during an outage goes the moment the peer is back.
   */
  private backoffOver(waitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const over = (): void => {
        timer.cancel();
        this.backingOffCalls.delete(over);
        resolve();
      };
      const timer = this.deps.clock.setTimer(waitMs, over);
      this.backingOffCalls.add(over);
    });
  }

  private endBackoffWaits(): void {
    for (const over of [...this.backingOffCalls]) over();
  }

  /**
   * Opens the connection (this.ready while it runs). A call's failed dial moves the backoff calls wait
   * out; a background probe's does not (it has its own), so probing never delays a call.
   */
  private dial(probe: boolean): Promise<void> {
    const backoff = (failures: number): number =>
      Math.min(this.deps.reconnectMaxMs ?? 30_000, (this.deps.reconnectMinMs ?? 100) * 2 ** (failures - 1));
    this.ready = this.open().then(
      () => {
        this.failures = 0;
        this.probeFailures = 0;
        this.retryAtMs = 0;
        this.failed = false;
        this.endBackoffWaits();
        if (this.wasDown) {
          this.wasDown = false;
          this.deps.onPeerAlive?.(this.peer);
        }
      },
      (err: unknown) => {
        this.ready = null;
        this.ws?.terminate();
        this.ws = null;
        this.wasDown = true;
        this.failed = true;
        if (probe) this.probeFailures++;
        else this.retryAtMs = this.deps.clock.now() + backoff(++this.failures);
        this.probeLater(backoff(this.probeFailures + 1));
        throw err instanceof PeerUnavailableError ? err : new PeerUnavailableError(this.peer, String(err));
      },
    );
    return this.ready;
  }

  /**
   * A connection that failed or dropped is dialled again in the background, with a backoff of its own,
   * until it is back: so a peer's return is noticed (onPeerAlive) without waiting for the next call.
   */
  private probeLater(waitMs = 0): void {
    if (this.closed || this.probeTimer) return;
    this.probeTimer = this.deps.clock.setTimer(waitMs, () => {
      this.probeTimer = null;
      if (this.closed || this.ready) return;
      this.dial(true).catch(() => {}); // a failure schedules the next probe
    });
  }

  private async open(): Promise<void> {
    const url = await this.deps.resolveUrl(this.peer);
    if (!url) throw new PeerUnavailableError(this.peer, 'no known address');
    const ws = new WebSocket(url, { maxPayload: MAX_FRAME, handshakeTimeout: this.deps.timeoutMs });
    // The socket under ws, known once the handshake's answer came (before 'open', so before any call).
    let socket: Duplex | null = null;
    ws.once('upgrade', (res) => (socket = res.socket));
    const channel = new RequestChannel({
      send: (text) => {
        if (socket) holdForTick(socket);
        ws.send(text, (err) => {
          // A failed write loses the socket: its close fails the calls on it.
          if (err) ws.terminate();
        });
      },
      timeoutMs: this.deps.timeoutMs,
      timers: this.deps.clock,
      errors: this.errors,
      // Events are not for server sessions.
    });
    this.ws = ws;
    this.channel = channel;
    ws.on('message', (data, isBinary) => {
      if (!isBinary) channel.receive(data.toString());
    });
    ws.on('close', () => this.onClose(ws, channel));
    ws.on('error', (err) => this.deps.log.debug('peer socket error', { peer: this.peer, err: err.message }));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
      ws.once('close', () => reject(new PeerUnavailableError(this.peer, 'closed while connecting')));
    });
    this.heartbeat(ws);
    const nonceB64 = toBase64(randomBytes(16));
    const timestampMs = this.deps.clock.now();
    const text = s2sSigningText({ from: this.deps.serverLogin, to: this.peer, timestampMs, nonceB64 });
    await channel.call('ServerAuth', {
      serverLogin: this.deps.serverLogin,
      targetServerLogin: this.peer,
      timestampMs,
      nonceB64,
      signatureB64: this.deps.sign(text),
    });
  }

  /** Pings while ws is this connection's socket; terminates it when a ping went unanswered (see HEARTBEATS_PER_TIMEOUT). */
  private heartbeat(ws: WebSocket): void {
    const every = Math.max(1, Math.floor(this.deps.timeoutMs / HEARTBEATS_PER_TIMEOUT));
    let answered = true;
    ws.on('pong', () => (answered = true));
    const tick = (): void => {
      if (this.ws !== ws || ws.readyState !== WebSocket.OPEN) return;
      if (!answered) {
        // Checked once more after the socket has been read: when this process was busy for a while, the
        // pong may sit unread in the socket while this timer fires first.
        this.deps.clock.setTimer(0, () => {
          if (answered) return tick();
          if (this.ws !== ws) return;
          this.deps.log.warn('peer connection silent: replacing it', { peer: this.peer, silentMs: every });
          // The peer is down from now: a host that hangs or drops packets lets the redial hang for a whole
          // timeout too, and nothing should wait for that (docs/protocol.md §6.2).
          this.failed = true;
          // terminate, not close: a closing handshake would wait on the silent peer.
          ws.terminate();
        });
        return;
      }
      answered = false;
      ws.ping();
      this.deps.clock.setTimer(every, tick);
    };
    this.deps.clock.setTimer(every, tick);
  }

  private readonly errors: ChannelErrors = {
    answered: (frame) => errorOfAnswer(frame, `${this.peer}: `),
    unanswered: (why, op, message) =>
      why === 'TIMEOUT'
        ? new PeerUnavailableError(this.peer, `${op} timed out`, true)
        : new PeerUnavailableError(this.peer, message),
  };

  private onClose(ws: WebSocket, channel: RequestChannel): void {
    channel.failAll('connection closed', true);
    if (this.ws !== ws) return;
    this.ws = null;
    this.channel = null;
    this.ready = null;
    this.wasDown = true;
    this.probeLater();
  }

  /** The peer proved it is up (it authenticated to this server): the next call dials at once. */
  reachable(): void {
    this.retryAtMs = 0;
    this.failed = false;
    this.endBackoffWaits();
  }

  /** The last connection failed and no dial has succeeded since (a redial may be under way or due later). */
  get down(): boolean {
    return !this.closed && this.failed && !this.connected;
  }

  /** A socket is open to the peer now. */
  get connected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  close(): void {
    this.closed = true;
    this.endBackoffWaits(); // they fail at once: 'pool closed'
    this.probeTimer?.cancel();
    this.channel?.failAll('pool closed', true);
    this.ws?.terminate();
    this.ws = null;
  }
}

/** One connection per peer server, made on first use. */
export class PeerPool implements PeerCaller {
  private readonly connections = new Map<string, PeerConnection>();
  /** Calls not finished yet per peer, including those waiting out a backoff. */
  private readonly open = new Map<string, number>();

  constructor(private readonly deps: PeerPoolDeps) {}

  async call<K extends OpName>(serverLogin: string, op: K, payload: OpPayload<K>): Promise<OpAnswer<K>> {
    if (serverLogin === this.deps.serverLogin) throw new Error('a server does not call itself');
    let c = this.connections.get(serverLogin);
    if (!c) this.connections.set(serverLogin, (c = new PeerConnection(serverLogin, this.deps)));
    this.open.set(serverLogin, (this.open.get(serverLogin) ?? 0) + 1);
    try {
      const answer = answerSchema(op).safeParse(await c.call(op, payload));
      if (!answer.success)
        throw new ShineError('INTERNAL', `${serverLogin}: malformed ${op} answer: ${answer.error.issues[0]?.message}`);
      return answer.data;
    } finally {
      this.open.set(serverLogin, this.open.get(serverLogin)! - 1);
    }
  }

  /** Unfinished calls by peer, for /metrics. */
  openCalls(): [{ peer: string }, number][] {
    return [...this.open].map(([peer, n]) => [{ peer }, n]);
  }

  /**
   * A server that just authenticated to this one is up: calls to it stop waiting out the backoff of
   * earlier failures (up to reconnectMaxMs), which would otherwise send copies meant for it to sync only.
   */
  reachable(serverLogin: string): void {
    this.connections.get(serverLogin)?.reachable();
  }

  down(serverLogin: string): boolean {
    return this.connections.get(serverLogin)?.down ?? false;
  }

  /** Whether a socket to serverLogin is open now (for /debug/peers). */
  connected(serverLogin: string): boolean {
    return this.connections.get(serverLogin)?.connected ?? false;
  }

  /**
   * Shutdown, before the background queue drains: calls to a peer that is down fail now ('pool closed')
   * instead of holding the drain until its redial, up to a call timeout each; their rows stay `accepted`
   * for the worker. Its connection stays closed, so no later call dials it. Calls to peers that are up run on.
   */
  closeDown(): void {
    for (const c of this.connections.values()) if (c.down) c.close();
  }

  async close(): Promise<void> {
    for (const c of this.connections.values()) c.close();
    this.connections.clear();
  }
}
