/**
 * better-sqlite3 connection with group commit: writes queued in the same turn of the event loop share
 * one transaction and one fsync, and no caller is answered before that commit (docs/protocol.md §9).
 */
import Database from 'better-sqlite3';
import { ShineError } from '../../../protocol/errors.js';
import { Checkpointer } from './checkpointer.js';
import { SQLITE_MIGRATIONS } from './migrations.js';

export type SqliteSync = 'full' | 'normal';

/**
 * SQLite errors that mean "the database cannot be written now" (a full disk, a read-only file or
 * connection, an I/O error, a lock held past busy_timeout), not "this write is wrong": answered 503
 * OVERLOADED. The transaction is rolled back, reads go on, and the next write tries again.
 */
function unavailable(err: unknown): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^SQLITE_(FULL|READONLY|IOERR|CANTOPEN|BUSY|LOCKED|NOMEM)/.test(code))
    return new ShineError('OVERLOADED', `database cannot be written now (${code})`, { cause: err });
  return err;
}

/**
 * Page size of a new database file (docs/performance.md, "SQLite page size"). The page cache stays at
 * better-sqlite3's 16 MiB: while the database is under 1 GiB, a COMMIT that rebalanced a B-tree walks every
 * page of the cache, so a larger cache makes those commits slower, and a smaller one reads more pages from
 * the OS (docs/performance.md, twenty-fourth session).
 */
const SQLITE_PAGE_SIZE = 1024;
/** WAL size at which a commit checkpoints it into the database file, when the writer checkpoints itself. */
const WAL_CHECKPOINT_BYTES = 4 * 1024 * 1024;
/** Least time between two checkpoints on the checkpoint thread (./checkpointer.ts). */
const CHECKPOINT_INTERVAL_MS = 250;
/** WAL size from which the checkpoint thread has the WAL started over. */
const WAL_RESTART_BYTES = 16 * 1024 * 1024;
/** WAL size past which the writer checkpoints itself although a checkpoint thread runs. */
const MAX_WAL_BYTES = 64 * 1024 * 1024;
/** Size the WAL file is cut back to when it starts over, after a time it grew past it. */
const WAL_SIZE_LIMIT_BYTES = 32 * 1024 * 1024;

interface Job {
  run: () => unknown;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

export interface SqliteDbOptions {
  path: string;
  sync: SqliteSync;
  /** Writes waiting for a commit before new ones are refused with 503 OVERLOADED. */
  maxQueuedWrites?: number;
  /** Jobs per transaction; a longer queue is committed in several transactions. */
  maxBatch?: number;
  /** Page size if the file is new (benchmarks compare them); an existing file keeps its own. */
  pageSize?: number;
  /**
   * Where WAL checkpoints run: 'thread' (default) on a worker thread with its own connection, off the
   * event loop; 'commit' inside the writer's COMMIT once the WAL holds 4 MiB, as SQLite does by default.
   */
  checkpoints?: 'thread' | 'commit';
  /** The checkpoint thread's timing and WAL sizes (tests make them small); defaults below. */
  checkpointTuning?: { intervalMs?: number; restartBytes?: number; maxWalBytes?: number };
  /**
   * 'reader': a connection that only reads, beside a writer on another thread (./threaded.ts): `write`
   * throws WRITES_ELSEWHERE at once, so the caller can send the whole call to the writer.
   */
  role?: 'writer' | 'reader';
}

/** Thrown by a reader's `write`: the call belongs on the writer's connection. */
export const WRITES_ELSEWHERE = Symbol('writes elsewhere');

/**
 * Decides, for a writer connection that shares the file with a writer thread (./threaded.ts, `auto`), where
 * each write runs, and when this connection may commit: never while the thread has writes in flight, so the
 * two never wait for each other's lock.
 */
export interface WriteRouter {
  /** Whether a write asked for now runs on this connection (else `write` throws WRITES_ELSEWHERE). */
  here(queued: number): boolean;
  /** Whether this connection may commit now. */
  mayCommit(): boolean;
  /** After each commit here, with the writes it held. */
  committed(jobs: number): void;
  /**
   * The checkpoint thread holds this connection's commits back (true) for its final pass, or lets them go;
   * the router holds the other writer's too, and resolves once that one has no commit left in flight.
   */
  hold(held: boolean): Promise<void> | void;
}

export class SqliteDb {
  readonly conn: Database.Database;
  private queue: Job[] = [];
  private scheduled = false;
  /** Commits wait while the checkpoint thread copies the WAL's last frames (./checkpointer.ts). */
  private held = false;
  private closed = false;
  private readonly maxQueued: number;
  private readonly maxBatch: number;
  private readonly statements = new Map<string, Database.Statement>();
  /** Commits made and jobs committed, for metrics and benchmarks. */
  readonly stats = { commits: 0, jobs: 0 };
  /** Runs the WAL checkpoints off the event loop; null for an in-memory database or `checkpoints: 'commit'`. */
  readonly checkpointer: Checkpointer | null = null;

  private readonly reader: boolean;
  /** Set by a store that also writes on a thread (./threaded.ts, `auto`). */
  router: WriteRouter | null = null;

  constructor(opts: SqliteDbOptions) {
    this.conn = new Database(opts.path);
    this.reader = opts.role === 'reader';
    this.maxQueued = opts.maxQueuedWrites ?? 20_000;
    this.maxBatch = opts.maxBatch ?? 512;
    if (this.reader) {
      // The writer made the file, its page size and its WAL; this connection never writes.
      this.conn.pragma('query_only = ON');
      this.conn.pragma('busy_timeout = 5000');
      return;
    }
    // 1 KiB pages for a new database (an existing one keeps its own; docs/operations.md says how to
    // convert it). A stored pair dirties about twenty B-tree leaves in the middle of their trees — each
    // owner's part of the history, outbox and delivery indexes — and a commit writes every dirty page
    // whole to the WAL: at 4 KiB that was 80 KB a pair, at 1 KiB 33 KB (docs/performance.md).
    this.conn.pragma(`page_size = ${opts.pageSize ?? SQLITE_PAGE_SIZE}`);
    const wal = this.conn.pragma('journal_mode = WAL', { simple: true }) === 'wal';
    // Checkpoint when the WAL holds 4 MiB, whatever the page size (SQLite counts pages: 1 000 by default).
    const pageSize = this.conn.pragma('page_size', { simple: true }) as number;
    const autocheckpoint = `wal_autocheckpoint = ${Math.round(WAL_CHECKPOINT_BYTES / pageSize)}`;
    this.conn.pragma(autocheckpoint);
    if (wal && (opts.checkpoints ?? 'thread') === 'thread') {
      // A commit that checkpoints copies the WAL's pages into the file and fsyncs it, 20–50 ms at 4 MiB of
      // WAL, all on the event loop; on the thread the event loop only commits (docs/performance.md).
      this.conn.pragma('wal_autocheckpoint = 0');
      this.conn.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
      this.checkpointer = new Checkpointer({
        path: opts.path,
        pageSize,
        intervalMs: opts.checkpointTuning?.intervalMs ?? CHECKPOINT_INTERVAL_MS,
        restartBytes: opts.checkpointTuning?.restartBytes ?? WAL_RESTART_BYTES,
        maxWalBytes: opts.checkpointTuning?.maxWalBytes ?? MAX_WAL_BYTES,
        inline: () => this.conn.pragma('wal_checkpoint(PASSIVE)'),
        hold: (held) => {
          this.held = held;
          if (!held) this.resume();
          return this.router?.hold(held);
        },
        onFailure: () => {
          if (this.conn.open) this.conn.pragma(autocheckpoint);
        },
      });
    }
    this.conn.pragma(`synchronous = ${opts.sync === 'normal' ? 'NORMAL' : 'FULL'}`);
    this.conn.pragma('foreign_keys = ON');
    // Several processes may share one file (workers, tests); wait for the lock instead of failing.
    this.conn.pragma('busy_timeout = 5000');
  }

  /** The statement for text, prepared once per connection: every SQL text of the store is a constant. */
  sql(text: string): Database.Statement {
    let s = this.statements.get(text);
    if (!s) this.statements.set(text, (s = this.conn.prepare(text)));
    return s;
  }

  /** Runs the migrations not yet applied, up to `upTo` of them (all by default; tests stop earlier). */
  migrate(upTo = SQLITE_MIGRATIONS.length): void {
    const current = this.conn.pragma('user_version', { simple: true }) as number;
    for (let v = current; v < upTo; v++) {
      this.conn
        .transaction(() => {
          const m = SQLITE_MIGRATIONS[v]!;
          this.conn.exec(typeof m === 'string' ? m : m.sql);
          if (typeof m !== 'string') m.then(this.conn);
          this.conn.pragma(`user_version = ${v + 1}`);
        })
        .immediate();
    }
  }

  /**
   * Runs fn inside a shared write transaction and resolves after the commit. fn runs in its own
   * savepoint: if it throws, only its own changes are rolled back and only its caller sees the error.
   */
  write<T>(fn: () => T): Promise<T> {
    if (this.reader || (this.router && !this.router.here(this.queue.length))) throw WRITES_ELSEWHERE;
    if (this.closed) return Promise.reject(new ShineError('INTERNAL', 'database closed'));
    if (this.queue.length >= this.maxQueued) return Promise.reject(new ShineError('OVERLOADED', 'write queue full'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ run: fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Commits what is queued, in a later turn, once nothing holds it back (see `hold` and `router`). */
  resume(): void {
    if (this.queue.length > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.scheduled = false;
    if (this.held || (this.router && !this.router.mayCommit())) return;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      const results: { ok: boolean; value: unknown }[] = [];
      try {
        this.conn.exec('BEGIN IMMEDIATE');
        for (const job of batch) {
          this.conn.exec('SAVEPOINT job');
          try {
            results.push({ ok: true, value: job.run() });
            this.conn.exec('RELEASE job');
          } catch (err) {
            // Some errors (a full disk, an I/O error) make SQLite roll the whole transaction back itself:
            // then no job of the batch is committed, and every one of them fails with it.
            if (!this.conn.inTransaction) throw err;
            this.conn.exec('ROLLBACK TO job');
            this.conn.exec('RELEASE job');
            results.push({ ok: false, value: unavailable(err) });
          }
        }
        this.conn.exec('COMMIT');
      } catch (err) {
        if (this.conn.inTransaction) this.conn.exec('ROLLBACK');
        for (const job of batch) job.reject(unavailable(err));
        continue;
      }
      this.stats.commits++;
      this.stats.jobs += batch.length;
      this.router?.committed(batch.length);
      batch.forEach((job, i) => {
        const r = results[i]!;
        if (r.ok) job.resolve(r.value);
        else job.reject(r.value);
      });
      // After the answers: a checkpoint the writer runs itself (WAL past its limit) delays no one's.
      this.checkpointer?.committed();
    }
  }

  /** Waits for queued writes, then closes the connection. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.held = false;
    if (this.queue.length > 0) this.flush();
    await this.checkpointer?.close();
    this.conn.close();
  }
}

/** What every area of the SQLite store stands on: the one connection, its statements and its group commit. */
export abstract class SqliteArea {
  constructor(protected readonly db: SqliteDb) {}

  protected sql(text: string): Database.Statement {
    return this.db.sql(text);
  }
}

/** Statement parameters as SQLite stores them: booleans as 0/1. */
export const sqliteValues = (values: readonly unknown[]): unknown[] =>
  values.map((v) => (typeof v === 'boolean' ? Number(v) : v));
