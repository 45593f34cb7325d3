/**
 * Delivery trouble as an operator sees it: per destination server, whether calls work, since when they
 * fail and why. It logs only what changes — the first failure (warn), the recovery (info) — plus one
 * periodic summary line per server still failing, so a server that is down for an hour costs a handful
 * of lines instead of one per call. /debug/peers reads the same state.
 */
import { ShineError } from '../../protocol/errors.js';
import type { Clock, TimerHandle } from '../clock.js';
import { PeerUnavailableError } from '../federation/peer-client.js';
import type { Logger } from '../log.js';

/** What is known about calls to one destination server. */
export interface RouteHealth {
  serverLogin: string;
  state: 'up' | 'failing';
  lastSuccessAtMs: number | null;
  consecutiveFailures: number;
  /** The cause of the latest failure (kept after a recovery, for the record). */
  lastError: string | null;
  lastFailureAtMs: number | null;
  /** When the current run of failures began. */
  failingSinceMs: number | null;
  /**
   * Its last call got no answer on a connection that stayed up, or a server-side error answer (5xx): its process
   * runs but cannot do the work, e.g. its database is stuck. Until a call succeeds, one call at a time goes to
   * it (admit).
   */
  notAnswering: boolean;
}

/** What admit allows: a call as usual, the one call to a server not answering, or no call. */
export type Admission = 'call' | 'probe' | 'skip';

/** A failure that says the server's process is up but does not do the work: no answer in time, or a 5xx answer. */
function notAnswering(err: unknown): boolean {
  if (err instanceof PeerUnavailableError) return err.unanswered;
  return err instanceof ShineError && err.status >= 500;
}

export interface TroubleDeps {
  clock: Clock;
  log: Logger;
  /** The URL calls to a server go to, for the log lines (null when unknown). */
  urlOf(serverLogin: string): Promise<string | null>;
  /** Period of the summary of servers still failing. */
  summaryEveryMs?: number;
}

/** A failure's cause without the server name the peer client puts in front. */
export function causeOf(serverLogin: string, err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.startsWith(`${serverLogin}: `) ? text.slice(serverLogin.length + 2) : text;
}

export class DeliveryTrouble {
  private readonly routes = new Map<string, RouteHealth>();
  /** Failed calls per server since the last summary, so the summary says how much went wrong meanwhile. */
  private readonly failedSinceSummary = new Map<string, number>();
  /** Servers not answering whose one call (the probe) is under way. */
  private readonly probing = new Set<string>();
  private timer: TimerHandle | null = null;

  constructor(private readonly deps: TroubleDeps) {}

  /** Starts the periodic summary. */
  start(): void {
    const every = this.deps.summaryEveryMs ?? 300_000;
    const tick = (): void => {
      this.summarize();
      this.timer = this.deps.clock.setTimer(every, tick);
    };
    this.timer = this.deps.clock.setTimer(every, tick);
  }

  close(): void {
    this.timer?.cancel();
    this.timer = null;
  }

  /**
   * Whether a delivery call to serverLogin goes now (docs/protocol.md §6.4). Always, unless the server is not
   * answering (RouteHealth.notAnswering): then one call at a time goes, the probe, and the others are not made —
   * each would hold its caller (a sender's answer, a place in the worker's pool) for a whole call timeout, and
   * pile up on the server for when it recovers. The probe's success tells it works again. A 'probe' is
   * reported back with `probe` set in succeeded or failed.
   */
  admit(serverLogin: string): Admission {
    if (!this.routes.get(serverLogin)?.notAnswering) return 'call';
    if (this.probing.has(serverLogin)) return 'skip';
    this.probing.add(serverLogin);
    return 'probe';
  }

  /**
   * A call to serverLogin has gone unanswered for as long as a sender waits for a first attempt
   * (firstAttemptWaitMs): it is not answering from now, though the call may still succeed or time out.
   */
  unanswered(serverLogin: string): void {
    this.markNotAnswering(this.route(serverLogin), 'a call unanswered for as long as a sender waits');
  }

  /**
   * A call to serverLogin succeeded; answers whether this is a recovery: calls to it were failing until now,
   * or it was not answering (calls to it were not made).
   */
  succeeded(serverLogin: string, probe = false): boolean {
    const now = this.deps.clock.now();
    const route = this.route(serverLogin);
    const wasFailing = route.state === 'failing';
    const recovered = wasFailing || route.notAnswering;
    const failures = route.consecutiveFailures;
    const since = route.failingSinceMs;
    if (probe) this.probing.delete(serverLogin);
    Object.assign(route, {
      state: 'up',
      lastSuccessAtMs: now,
      consecutiveFailures: 0,
      failingSinceMs: null,
      notAnswering: false,
    });
    this.failedSinceSummary.delete(serverLogin);
    if (wasFailing)
      this.logWithUrl('info', 'delivery to server works again', serverLogin, {
        failedCalls: failures,
        failingForMs: now - (since ?? now),
      });
    return recovered;
  }

  /**
   * A call to serverLogin failed (no answer, or an error answer) with err; answers whether the server is not
   * answering now (RouteHealth.notAnswering).
   */
  failed(serverLogin: string, err: unknown, probe = false): boolean {
    const now = this.deps.clock.now();
    const route = this.route(serverLogin);
    const cause = causeOf(serverLogin, err);
    const first = route.state === 'up';
    if (probe) this.probing.delete(serverLogin);
    // Any other answer shows it does the work; a connection that failed is the peer client's to tell (down).
    if (notAnswering(err)) this.markNotAnswering(route, cause);
    else route.notAnswering = false;
    route.consecutiveFailures++;
    route.lastFailureAtMs = now;
    // While the peer client backs off, calls fail without trying: the cause worth showing is the last real one.
    if (!/backing off/.test(cause) || route.lastError === null) route.lastError = cause;
    this.failedSinceSummary.set(serverLogin, (this.failedSinceSummary.get(serverLogin) ?? 0) + 1);
    if (first) {
      route.state = 'failing';
      route.failingSinceMs = now;
      this.logWithUrl('warn', 'delivery to server failing', serverLogin, {
        cause,
        lastSuccessAtMs: route.lastSuccessAtMs,
      });
    }
    return route.notAnswering;
  }

  /** The server is not answering from now (logged once, as it starts). */
  private markNotAnswering(route: RouteHealth, cause: string): void {
    if (route.notAnswering) return;
    route.notAnswering = true;
    this.logWithUrl('warn', 'server not answering: one call at a time until one succeeds', route.serverLogin, {
      cause,
    });
  }

  /** Every destination seen so far. */
  snapshot(): RouteHealth[] {
    return [...this.routes.values()].map((r) => ({ ...r }));
  }

  get(serverLogin: string): RouteHealth | null {
    const r = this.routes.get(serverLogin);
    return r ? { ...r } : null;
  }

  /** One line per server still failing; nothing when all is well. */
  summarize(): void {
    const now = this.deps.clock.now();
    for (const route of this.routes.values()) {
      if (route.state !== 'failing') continue;
      this.logWithUrl('warn', 'delivery to server still failing', route.serverLogin, {
        cause: route.lastError,
        consecutiveFailures: route.consecutiveFailures,
        failedSinceLastSummary: this.failedSinceSummary.get(route.serverLogin) ?? 0,
        failingForMs: now - (route.failingSinceMs ?? now),
      });
    }
    this.failedSinceSummary.clear();
  }

  private route(serverLogin: string): RouteHealth {
    let r = this.routes.get(serverLogin);
    if (!r) {
      // A server never called is presumed up: its first failure is news.
      r = {
        serverLogin,
        state: 'up',
        lastSuccessAtMs: null,
        consecutiveFailures: 0,
        lastError: null,
        lastFailureAtMs: null,
        failingSinceMs: null,
        notAnswering: false,
      };
      this.routes.set(serverLogin, r);
    }
    return r;
  }

  private logWithUrl(level: 'info' | 'warn', msg: string, serverLogin: string, fields: Record<string, unknown>): void {
    void this.deps
      .urlOf(serverLogin)
      .catch(() => null)
      .then((url) => this.deps.log[level](msg, { peer: serverLogin, url: url ?? 'unknown', ...fields }));
  }
}
