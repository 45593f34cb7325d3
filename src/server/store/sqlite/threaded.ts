/**
 * The SQLite store with its writes on a thread of their own (SHINE_SQLITE_WRITER=thread; docs/performance.md,
 * "Issue 12, eleventh session", says when it pays). The event loop keeps a connection that only reads; every call that writes — every method
 * whose work goes through SqliteDb.write — runs whole on the writer thread (./thread.ts), with the group
 * commit, its fsync and the checkpoints. A write is answered after its commit, as on one connection,
 * and a read issued after that answer sees it (WAL: each read starts from the newest commit).
 */
import { once } from 'node:events';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ErrorCode, ErrorDetails } from '../../../protocol/errors.js';
import { ShineError } from '../../../protocol/errors.js';
import { BusyRef, bundleForNode, perTurn } from '../../worker-thread.js';
import type { Store } from '../types.js';
import { SqliteArea, SqliteDb, WRITES_ELSEWHERE } from './db.js';
import type { SqliteStoreOptions } from './store.js';
import { SqliteStore } from './store.js';

/** A call sent to the writer thread: a method of an area, or (area null) of the store itself. */
export interface ThreadCall {
  id: number;
  area: string | null;
  method: string;
  args: unknown[];
}

export interface ThreadReply {
  id: number;
  value?: unknown;
  error?: { message: string; code?: ErrorCode; details?: ErrorDetails | undefined; sqliteCode?: string | undefined };
}

/** Answers the writer thread sends in one message, with its commit counters at that time. */
export interface ThreadReplies {
  replies: ThreadReply[];
  stats: { commits: number; writes: number; checkpoints: number };
}

/**
 * Starts the thread's module, which sits beside this one: JavaScript once built (or bundled, as the tests
 * do). Under tsx, whose loader a thread does not inherit, the thread's TypeScript is bundled once per
 * process with esbuild (both are development packages): loading it through tsx in every thread took about
 * a second a start.
 */
async function startThread(workerData: Record<string, unknown>): Promise<Worker> {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./thread.js', import.meta.url), { workerData });
  return new Worker(await (devBundle ??= bundleForDevelopment()), { workerData });
}

let devBundle: Promise<string> | null = null;

async function bundleForDevelopment(): Promise<string> {
  // Inside the repository, so the bundle's packages resolve from its node_modules.
  const dir = fileURLToPath(new URL(`../../../../.tmp/sqlite-thread/${process.pid}/`, import.meta.url));
  mkdirSync(dir, { recursive: true });
  const outfile = join(dir, 'thread.mjs');
  await bundleForNode(fileURLToPath(new URL('./thread.ts', import.meta.url)), outfile);
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return outfile;
}

/** Starts the writer thread on the file, then opens the reading connection beside it. */
export async function openThreadedSqliteStore(opts: SqliteStoreOptions): Promise<Store> {
  const worker = await startThread({ options: opts });
  try {
    await once(worker, 'message'); // 'ready': the file is open, in WAL mode (rejects if the thread fails first)
  } catch (err) {
    await worker.terminate();
    throw err;
  }
  return new ThreadedSqliteStore(worker, new SqliteDb(Object.assign({}, opts, { role: 'reader' })));
}

/** The areas of the Store (meta, messages, …): the reading store's, each routed (see `routed`). */
type Areas = Omit<Store, 'dialect' | 'commitStats' | 'migrate' | 'ping' | 'close'>;
// The areas are set in the constructor, one per area of the reading SqliteStore.
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export interface ThreadedSqliteStore extends Areas {
  readonly dialect: 'sqlite';
}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging
export class ThreadedSqliteStore implements Store {
  readonly dialect = 'sqlite';

  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void }>();
  /** The calls of one turn go in one message, so their writes share a commit on the thread. */
  private readonly post = perTurn<ThreadCall>((calls) => {
    // A thread that stopped meanwhile has had every pending call rejected (stop).
    if (!this.stopped) this.worker.postMessage(calls);
  });
  private stats = { commits: 0, writes: 0, checkpoints: 0 };
  /** Why the thread stopped, once it has: every later write fails with it. */
  private stopped: ShineError | null = null;
  private readonly busy: BusyRef;
  private readonly reads: SqliteStore;

  constructor(
    private readonly worker: Worker,
    private readonly reader: SqliteDb,
  ) {
    this.busy = new BusyRef(worker);
    worker.unref();
    worker.on('message', (m: ThreadReplies) => this.answered(m));
    worker.on('error', (err) => this.stop(`failed: ${err.message}`));
    worker.on('exit', (code) => this.stop(`exited with ${code}`));
    this.reads = new SqliteStore(reader);
    const self = this as unknown as Record<string, unknown>;
    for (const [name, area] of Object.entries(this.reads))
      if (area instanceof SqliteArea) self[name] = this.routed(name, area);
  }

  commitStats(): { commits: number; writes: number; checkpoints: number } {
    return { ...this.stats };
  }

  async migrate(): Promise<void> {
    await this.call(null, 'migrate', []);
  }

  /** A PRAGMA on the writer's connection; answers its first value (tests set the connection's limits with it). */
  writerPragma(text: string): Promise<unknown> {
    return this.call(null, 'pragma', [text]);
  }

  /** The database file. */
  get path(): string {
    return this.reader.conn.name;
  }

  async ping(): Promise<void> {
    if (this.stopped) throw this.stopped;
    await this.reads.ping();
  }

  async close(): Promise<void> {
    if (!this.stopped) await this.call(null, 'close', []);
    this.stopped ??= new ShineError('INTERNAL', 'database closed');
    await this.worker.terminate();
    this.reader.conn.close();
  }

  /** Ends the writer thread as a crash would (tests): later writes fail, reads go on. */
  async kill(): Promise<void> {
    await this.worker.terminate();
  }

  /**
   * An area whose methods run on the reading connection until one reaches SqliteDb.write; that call is
   * then sent whole to the writer thread (nothing was written here: the reader cannot write).
   */
  private routed(area: string, reads: object): object {
    // By function, not by name: a method replaced on the area (tests do) is routed as it is now.
    const methods = new WeakMap<object, (...args: unknown[]) => unknown>();
    const route =
      (method: string, fn: (...args: unknown[]) => unknown) =>
      (...args: unknown[]) => {
        const elsewhere = (err: unknown) => {
          if (err === WRITES_ELSEWHERE) return this.call(area, method, args);
          throw err;
        };
        try {
          const r = fn.apply(reads, args);
          return r instanceof Promise ? r.catch(elsewhere) : r;
        } catch (err) {
          return elsewhere(err);
        }
      };
    return new Proxy(reads, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== 'function' || typeof prop !== 'string') return value;
        let m = methods.get(value);
        if (!m) methods.set(value, (m = route(prop, value as (...args: unknown[]) => unknown)));
        return m;
      },
    });
  }

  private call(area: string | null, method: string, args: unknown[]): Promise<unknown> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextId++;
    this.post({ id, area, method, args });
    this.busy.begin();
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  private answered(m: ThreadReplies): void {
    this.stats = m.stats;
    for (const { id, value, error } of m.replies) {
      const p = this.take(id);
      if (!error) p?.resolve(value);
      else if (error.code) p?.reject(new ShineError(error.code, error.message, { details: error.details }));
      else p?.reject(Object.assign(new Error(error.message), { code: error.sqliteCode }));
    }
  }

  /** The pending call id, no longer pending. */
  private take(id: number): { resolve: (v: unknown) => void; reject: (e: unknown) => void } | undefined {
    const p = this.pending.get(id);
    if (p) {
      this.pending.delete(id);
      this.busy.end();
    }
    return p;
  }

  private stop(why: string): void {
    if (this.stopped) return;
    this.stopped = new ShineError('INTERNAL', `the SQLite writer thread ${why}`);
    for (const id of [...this.pending.keys()]) this.take(id)?.reject(this.stopped);
  }
}
