/**
 * The processes of one server on one database (docs/protocol.md §9.2, decision 27): each keeps a
 * heartbeat row, and a PostgreSQL process refuses to start beside live processes it could not share
 * session events with (no Redis on one side).
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../log.js';
import type { Metrics } from '../metrics.js';
import type { ProcessRecord, Store } from '../store/types.js';

/** A row not refreshed for this many heartbeat intervals belongs to a dead process. */
export const LIVE_INTERVALS = 3;

/** Why a process does not start: printed by `shine serve` as `shine: refusing to start: …` (exit 1). */
export class RefusedToStart extends Error {
  override name = 'RefusedToStart';
  constructor(reason: string) {
    super(`refusing to start: ${reason}`);
  }
}

export interface ProcessRegistryDeps {
  store: Pick<Store, 'dialect' | 'processes'>;
  clock: Clock;
  log: Logger;
  metrics?: Metrics;
  intervalMs: number;
  /** Whether this process fans events out through Redis (SHINE_REDIS_URL set). */
  redis: boolean;
  /** The bound port; with the machine's name it tells a restarted process from another one. */
  port: number;
  pid?: number;
  host?: string;
}

/** A process as /debug/processes shows it. */
export interface ProcessView extends ProcessRecord {
  self: boolean;
}

export class ProcessRegistry {
  readonly processId: string;
  private readonly place: string;
  private readonly startedAtMs: number;
  private timer: TimerHandle | null = null;
  private beating: Promise<void> = Promise.resolve();
  private closed = false;
  private liveCount = 1;

  constructor(private readonly deps: ProcessRegistryDeps) {
    // The machine's name rather than the listen address: two machines both listening on 0.0.0.0:8080
    // are two processes, while a process on the same machine and port as a row is that row's successor.
    this.place = `${deps.host ?? hostname()}:${deps.port}:`;
    this.processId = `${this.place}${deps.pid ?? process.pid}:${randomBytes(4).toString('hex')}`;
    this.startedAtMs = deps.clock.now();
    deps.metrics?.gauge('processes_live', 'Processes of this server with a live heartbeat row', () => this.liveCount);
  }

  /**
   * Registers this process, then checks the others (after writing its own row, so that of two
   * processes starting at the same moment at least one sees the other). Throws RefusedToStart, with
   * the row removed again, when this process may not run beside them.
   */
  async start(): Promise<void> {
    await this.beat();
    const others = await this.others();
    const refusal = this.refusal(others);
    if (refusal) {
      await this.deps.store.processes.removeProcess(this.processId);
      throw new RefusedToStart(refusal);
    }
    this.liveCount = others.length + 1;
    this.schedule();
  }

  /** Stops the heartbeat and removes the row, so the others need not wait for it to go stale. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.timer?.cancel();
    await this.beating; // a beat still in flight would write the row again
    await this.deps.store.processes.removeProcess(this.processId);
  }

  /** The live processes, this one included. */
  async list(): Promise<ProcessView[]> {
    const rows = await this.deps.store.processes.liveProcesses(this.liveSince());
    return rows.map((r) => Object.assign({}, r, { self: r.processId === this.processId }));
  }

  /** Live processes other than this one; a stale row of a dead process at this host and port is removed. */
  private async others(): Promise<ProcessRecord[]> {
    const rows = await this.deps.store.processes.liveProcesses(this.liveSince());
    const others: ProcessRecord[] = [];
    for (const r of rows) {
      if (r.processId === this.processId) continue;
      // This process holds the port now, so the row's process is gone (killed before its row went stale).
      if (r.processId.startsWith(this.place)) await this.deps.store.processes.removeProcess(r.processId);
      else others.push(r);
    }
    return others;
  }

  /** Why this process may not run beside the others, or null. Only PostgreSQL is shared by processes. */
  private refusal(others: readonly ProcessRecord[]): string | null {
    if (this.deps.store.dialect !== 'postgres' || others.length === 0) return null;
    const names = (list: readonly ProcessRecord[]): string => list.map((r) => r.processId).join(', ');
    if (!this.deps.redis) {
      return (
        `another process of this server is live on this database (${names(others)}); ` +
        'several processes need SHINE_REDIS_URL on every one of them'
      );
    }
    const withoutRedis = others.filter((r) => !r.redis);
    if (withoutRedis.length > 0) {
      return (
        `a process of this server without SHINE_REDIS_URL is live on this database (${names(withoutRedis)}); ` +
        'stop it or give it SHINE_REDIS_URL'
      );
    }
    return null;
  }

  private liveSince(): number {
    return this.deps.clock.now() - LIVE_INTERVALS * this.deps.intervalMs;
  }

  private beat(): Promise<void> {
    return this.deps.store.processes.heartbeat({
      processId: this.processId,
      startedAtMs: this.startedAtMs,
      heartbeatAtMs: this.deps.clock.now(),
      redis: this.deps.redis,
    });
  }

  private schedule(): void {
    this.timer = this.deps.clock.setTimer(this.deps.intervalMs, () => {
      if (this.closed) return;
      this.beating = this.refresh().finally(() => {
        if (!this.closed) this.schedule();
      });
    });
  }

  private async refresh(): Promise<void> {
    try {
      await this.beat();
      this.liveCount = (await this.deps.store.processes.liveProcesses(this.liveSince())).length;
    } catch (err) {
      // The next beat tries again; a row that goes stale meanwhile only lets another process start.
      this.deps.log.warn('process heartbeat failed', { processId: this.processId, err: String(err) });
    }
  }
}
