/**
 * WebSocket sessions on /ws (docs/protocol.md §5): frame limits, binary frames, rate limits per connection
 * and per login, connections per source address, the login deadline, backpressure, heartbeats, and
 * shutdown that lets in-flight requests answer first.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import type { RawData } from 'ws';
import { WebSocket, WebSocketServer } from 'ws';
import { MAX_CLIENT_FRAME, MAX_FRAME } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import type { KeyedLimiter } from '../cluster/limits.js';
import type { AppContext } from '../context.js';
import type { Counter } from '../metrics.js';
import type { Session } from '../sessions.js';
import { Dispatcher } from './dispatch.js';
import { holdForTick } from './tick-cork.js';
import { TokenBucket } from './rate-limit.js';

/** Close codes of RFC 6455 this server uses. */
export const CloseCode = { GoingAway: 1001, Unsupported: 1003, PolicyViolation: 1008 } as const;

/** How long closing sockets get to finish the close handshake at shutdown (wall time, not the injected clock). */
const CLOSE_GRACE_MS = 2_000;

/**
 * The heartbeat ticks about this often and pings one slice of the sockets per tick, each socket once
 * per ping interval: pinging 20 000 sockets in one burst (and reading their 20 000 pongs right after)
 * held every request behind it for most of a second (docs/performance.md, idle sessions).
 */
const HEARTBEAT_TICK_MS = 100;

/** A connected socket as the rest of the server sees it. */
class WsSession implements Session {
  readonly id = randomUUID();
  login: string | null = null;
  deviceId: string | null = null;
  serverLogin: string | null = null;
  challenge: Session['challenge'] = null;
  /** Settles when everything written so far has been handed to the OS (or the write failed). */
  flushed: Promise<void> = Promise.resolve();
  /** Answered the last ping (or just connected). */
  alive = true;
  readonly closed: Promise<void>;

  constructor(
    readonly ws: WebSocket,
    /** The socket under ws, held per tick by write(). */
    readonly socket: Duplex,
    readonly remoteAddress: string,
    private readonly gateway: WsGateway,
  ) {
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
  }

  send(frame: object): boolean {
    return this.gateway.write(this, JSON.stringify(frame));
  }

  sendPaced(frame: object): Promise<boolean> {
    return this.gateway.writePaced(this, JSON.stringify(frame));
  }
}

export class WsGateway {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME, perMessageDeflate: false });
  private readonly dispatcher: Dispatcher;
  private readonly inFlight = new Set<Promise<void>>();
  /** Open sockets, dealt round-robin into one slice per heartbeat tick of a ping interval. */
  private readonly slices: Set<WsSession>[];
  private nextSlice = 0;
  private tick = 0;
  private readonly slowClosed: Counter;
  private readonly deadClosed: Counter;
  private readonly refused: Counter;
  private readonly heartbeat: ReturnType<typeof setInterval>;
  /** Open sockets by source address. */
  private readonly perAddress = new Map<string, number>();
  /** Requests of one login across its sessions (on every process, with Redis). */
  private readonly perLogin: KeyedLimiter;
  private closing = false;

  constructor(private readonly ctx: AppContext) {
    this.dispatcher = new Dispatcher(ctx.registry, ctx.log, ctx.metrics, ctx.config);
    this.slowClosed = ctx.metrics.counter(
      'ws_slow_consumer_closed_total',
      'Sockets closed because their send buffer grew too large.',
    );
    this.deadClosed = ctx.metrics.counter(
      'ws_dead_closed_total',
      'Sockets terminated because they did not answer a ping within one heartbeat interval.',
    );
    this.refused = ctx.metrics.counter(
      'ws_limited_total',
      'Sockets refused or closed by a limit: too many connections from one address (address), no login in time (auth_timeout).',
      ['reason'],
    );
    this.perLogin = ctx.limiter('requests', ctx.config.loginRateLimit);
    ctx.metrics.gauge('sessions_open', 'Open WebSocket sessions.', () => ctx.hub.size);
    const ticks = Math.max(1, Math.round(ctx.config.wsPingIntervalMs / HEARTBEAT_TICK_MS));
    this.slices = Array.from({ length: ticks }, () => new Set());
    // Wall time, not the injected clock: a pong takes real time, and a test's clock jumping an hour
    // must not declare every socket dead.
    this.heartbeat = setInterval(() => this.beat(), ctx.config.wsPingIntervalMs / ticks);
    this.heartbeat.unref();
  }

  /**
   * Pings the sockets of this tick's slice, so each socket is pinged once per ping interval; one that
   * has not answered its previous ping is gone (a half-open TCP connection never reports itself) and
   * is terminated, which ends its presence in the hub.
   */
  private beat(): void {
    const slice = this.slices[this.tick]!;
    this.tick = (this.tick + 1) % this.slices.length;
    for (const session of slice) {
      const { ws } = session;
      if (ws.readyState !== WebSocket.OPEN) continue;
      if (!session.alive) {
        this.ctx.log.info('closing dead socket: no pong', { sessionId: session.id, login: session.login });
        this.deadClosed.inc();
        ws.terminate();
        continue;
      }
      session.alive = false;
      ws.ping();
    }
  }

  /** Takes over an HTTP upgrade on /ws. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    const address = req.socket.remoteAddress ?? 'unknown';
    if ((this.perAddress.get(address) ?? 0) >= this.ctx.config.maxConnectionsPerAddress) {
      this.refused.inc({ reason: 'address' });
      socket.end('HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, socket, address));
  }

  /** Queues text on the session's socket; a consumer too slow to keep up is cut off. */
  write(session: WsSession, text: string, onFlushed?: (err?: Error) => void): boolean {
    const { ws } = session;
    if (ws.readyState !== WebSocket.OPEN) return false;
    if (ws.bufferedAmount + text.length > this.ctx.config.wsMaxBufferedBytes) {
      this.ctx.log.warn('closing slow socket', {
        sessionId: session.id,
        login: session.login,
        bufferedBytes: ws.bufferedAmount,
      });
      this.slowClosed.inc();
      // terminate, not close: a close frame would wait behind the very buffer that is the problem.
      ws.terminate();
      return false;
    }
    holdForTick(session.socket);
    session.flushed = new Promise((resolve) =>
      ws.send(text, (err) => {
        onFlushed?.(err);
        resolve();
      }),
    );
    return true;
  }

  /**
   * Queues text once the socket's buffer has room for it, waiting for what is queued to flush first:
   * a bulk send (replay) paced by the reader instead of being cut off as a slow consumer. It leaves room
   * for the answers and live events written meanwhile: it fills the buffer to its limit less a frame (less
   * half the limit, when that is smaller), so a request answered during a replay does not cut the socket off.
   */
  async writePaced(session: WsSession, text: string): Promise<boolean> {
    const { ws } = session;
    const limit = this.ctx.config.wsMaxBufferedBytes;
    const mark = limit - Math.min(MAX_FRAME, limit / 2);
    while (ws.readyState === WebSocket.OPEN && ws.bufferedAmount > 0 && ws.bufferedAmount + text.length > mark) {
      await Promise.race([session.flushed, session.closed]);
    }
    return this.write(session, text);
  }

  /** Stops taking requests, lets in-flight ones answer, then closes every socket. */
  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.heartbeat);
    // Stop reading so the drain below is bounded however fast clients keep sending.
    for (const ws of this.wss.clients) ws.pause();
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    const sockets = [...this.wss.clients];
    for (const ws of sockets) {
      ws.resume();
      ws.close(CloseCode.GoingAway, 'server shutting down');
    }
    const closed = Promise.all(
      sockets.map((ws) => (ws.readyState === WebSocket.CLOSED ? null : new Promise((r) => ws.once('close', r)))),
    );
    // The grace timer is cancelled once every socket closed: left running, it held the process's exit
    // after SIGTERM for the whole 2 s.
    const grace = new AbortController();
    await Promise.race([closed, delay(CLOSE_GRACE_MS, undefined, { signal: grace.signal })]);
    grace.abort();
    for (const ws of this.wss.clients) ws.terminate();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  private accept(ws: WebSocket, socket: Duplex, address: string): void {
    const session = new WsSession(ws, socket, address, this);
    const bucket = new TokenBucket(this.ctx.config.rateLimit, this.ctx.clock);
    this.perAddress.set(address, (this.perAddress.get(address) ?? 0) + 1);
    // A socket that never logs in would hold its slot (and a challenge) for as long as it likes.
    const deadline = this.ctx.clock.setTimer(this.ctx.config.authTimeoutMs, () => {
      if (session.login || session.serverLogin || ws.readyState !== WebSocket.OPEN) return;
      this.refused.inc({ reason: 'auth_timeout' });
      ws.close(CloseCode.PolicyViolation, 'not authenticated in time');
    });
    this.ctx.hub.add(session);
    const slice = this.slices[this.nextSlice]!;
    this.nextSlice = (this.nextSlice + 1) % this.slices.length;
    slice.add(session);
    ws.on('pong', () => (session.alive = true));
    ws.on('message', (data, isBinary) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      if (isBinary) {
        ws.close(CloseCode.Unsupported, 'binary frames are not accepted');
        return;
      }
      this.track(this.onText(session, bucket, data));
    });
    ws.on('close', () => {
      deadline.cancel();
      const left = (this.perAddress.get(address) ?? 1) - 1;
      if (left > 0) this.perAddress.set(address, left);
      else this.perAddress.delete(address);
      slice.delete(session);
      this.ctx.hub.remove(session);
    });
    ws.on('error', (err) => this.ctx.log.debug('socket error', { sessionId: session.id, err }));
  }

  private async onText(session: WsSession, bucket: TokenBucket, data: RawData): Promise<void> {
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    const reject = await this.rejection(session, bucket, bytes.length);
    const { response, text, afterAnswer } = await this.dispatcher.dispatch(session, bytes.toString('utf8'), reject);
    if (!(await this.flush(session, text))) return;
    for (const fn of afterAnswer) {
      try {
        await fn();
      } catch (err) {
        this.ctx.log.error('after-answer work failed', {
          op: response.op,
          requestId: response.requestId,
          sessionId: session.id,
          err,
        });
      }
    }
  }

  /** The error a frame gets before its op is even looked at, if any. */
  private async rejection(session: WsSession, bucket: TokenBucket, size: number): Promise<ShineError | undefined> {
    if (this.closing) return new ShineError('OVERLOADED', 'server is shutting down');
    // An authenticated peer server multiplexes all its traffic over one socket: no per-connection limit.
    if (!session.serverLogin && !bucket.take())
      return new ShineError('RATE_LIMITED', 'too many requests on this connection');
    // A login opening more sessions gets no more than its own limit across them.
    if (session.login && !(await this.perLogin.take(session.login)))
      return new ShineError('RATE_LIMITED', 'too many requests from this login');
    // Server sessions may send frames up to the 4 MiB the socket accepts; clients up to 1 MiB.
    if (!session.serverLogin && size > MAX_CLIENT_FRAME)
      return new ShineError('TOO_LARGE', `a request may be at most ${MAX_CLIENT_FRAME} bytes`);
    return undefined;
  }

  /** Resolves true once the text has been handed to the OS, false if the socket went away first. */
  private flush(session: WsSession, text: string): Promise<boolean> {
    return new Promise((resolve) => {
      if (!this.write(session, text, (err) => resolve(!err))) resolve(false);
    });
  }

  private track(work: Promise<void>): void {
    const tracked = work.catch((err: unknown) => this.ctx.log.error('frame handling failed', { err }));
    this.inFlight.add(tracked);
    void tracked.finally(() => this.inFlight.delete(tracked));
  }
}
