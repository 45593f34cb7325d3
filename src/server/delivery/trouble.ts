/**
 * Delivery trouble as an operator sees it: per destination server, whether calls work, since when they
 * fail and why. It logs only what changes — the first failure (warn), the recovery (info) — plus one
 * periodic summary line per server still failing, so a server that is down for an hour costs a handful
 * of lines instead of one per call. /debug/peers reads the same state.
 */
import type { Clock, TimerHandle } from '../clock.js';
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

  /** A call to serverLogin succeeded; answers whether calls to it were failing until now. */
  succeeded(serverLogin: string): boolean {
    const now = this.deps.clock.now();
    const route = this.route(serverLogin);
    const wasFailing = route.state === 'failing';
    const failures = route.consecutiveFailures;
    const since = route.failingSinceMs;
    Object.assign(route, { state: 'up', lastSuccessAtMs: now, consecutiveFailures: 0, failingSinceMs: null });
    this.failedSinceSummary.delete(serverLogin);
    if (wasFailing)
      this.logWithUrl('info', 'delivery to server works again', serverLogin, {
        failedCalls: failures,
        failingForMs: now - (since ?? now),
      });
    return wasFailing;
  }

  /** A call to serverLogin failed (no answer, or an error answer) with err. */
  failed(serverLogin: string, err: unknown): void {
    const now = this.deps.clock.now();
    const route = this.route(serverLogin);
    const cause = causeOf(serverLogin, err);
    const first = route.state === 'up';
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
