/**
 * A pg.Pool with a bounded line of waiting callers, transactions retried on serialization failures and
 * deadlocks, and the database's own failures mapped to the protocol's codes (docs/protocol.md §9.2 and
 * decision 26).
 */
import pg from 'pg';
import { sha256 } from '../../crypto/sha256.js';
import { ShineError } from '../../../protocol/errors.js';

export interface PgDbOptions {
  url: string;
  /** Connections in the pool. */
  poolSize: number;
  /** Callers waiting for a connection before new ones are refused with 503 OVERLOADED (default 20 000). */
  maxWaiting?: number;
  /** Attempts of a transaction that fails with 40001 / 40P01. */
  maxAttempts?: number;
}

/** What a query runs on: a pooled client inside a transaction, or the pool itself. */
export interface Queryable {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string | pg.QueryConfig,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

const preparedNames = new Map<string, string>();

/**
 * A statement each connection parses once and then runs by name: PostgreSQL skips parsing it again, and
 * with a generic plan (plan_cache_mode) planning too. A pair's statements were parsed and planned on every
 * call, about a third of the database's CPU a pair (docs/performance.md). Only for statements whose text
 * comes in a few shapes with every value a parameter: each distinct text stays prepared on every
 * connection that ran it.
 */
export function prepared(text: string, values: unknown[]): pg.QueryConfig {
  let name = preparedNames.get(text);
  if (name === undefined) {
    name = `shine_${sha256(text, 'hex').slice(0, 32)}`;
    preparedNames.set(text, name);
  }
  return { name, text, values };
}

/** Names of the statements (prepared) each connection has parsed through runPrepared. */
const parsedOn = new WeakMap<pg.ClientBase, Set<string>>();

/** Runs a prepared statement, noting that this connection has parsed it (executeText). */
async function runPrepared<R extends pg.QueryResultRow>(
  client: pg.ClientBase,
  q: pg.QueryConfig,
): Promise<pg.QueryResult<R>> {
  const r = await client.query<R>(q);
  if (q.name !== undefined) {
    const names = parsedOn.get(client);
    if (names) names.add(q.name);
    else parsedOn.set(client, new Set([q.name]));
  }
  return r;
}

/** The text node-postgres sends for a parameter (arrays as array literals, bytes as hex): pg's own conversion. */
const parameterText = (pg as unknown as { utils: { prepareValue(v: unknown): string | Buffer | null } }).utils
  .prepareValue;

const DOLLAR_QUOTE = '$shine_value$';

/**
 * SQL that runs a prepared statement by name in a simple query, its values inlined as literals of the very
 * text node-postgres would send as parameters; null where this connection has not parsed it yet. In a simple
 * query it can go with other statements in one round trip (PgDb.pipelinedTx).
 */
function executeText(client: pg.ClientBase, q: pg.QueryConfig): string | null {
  if (q.name === undefined || !parsedOn.get(client)?.has(q.name)) return null;
  const literals = (q.values ?? []).map((v) => {
    const value = parameterText(v);
    if (value === null) return 'NULL';
    const text = typeof value === 'string' ? value : `\\x${value.toString('hex')}`;
    // Dollar-quoted, so the text goes as it is: escaping tens of KiB of hex a character at a time cost more
    // than the round trip saved. A text with a $ in it could end the quote early: escaped instead.
    return text.includes('$') ? pg.escapeLiteral(text) : `${DOLLAR_QUOTE}${text}${DOLLAR_QUOTE}`;
  });
  return `EXECUTE ${q.name}(${literals.join(', ')})`;
}

/** The last statement's result of a simple query (node-postgres answers several statements with a list). */
const lastResult = <R extends pg.QueryResultRow>(r: pg.QueryResult<R> | pg.QueryResult<R>[]): pg.QueryResult<R> =>
  Array.isArray(r) ? r[r.length - 1]! : r;

/** BIGINT (milliseconds, counts) as JS numbers, for this pool only: every value we store fits in 2^53. */
const TYPES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8
      ? (v: string) => Number(v)
      : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser'],
};

const RETRYABLE = new Set(['40001', '40P01']);

/** Command tags of a statement that writes rows. */
const WRITE_COMMANDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

/** SQLSTATE classes and socket errors that mean "the database cannot serve now", not "this query is wrong". */
function isUnavailable(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return err instanceof Error && /Connection terminated|timeout/i.test(err.message);
  return (
    code.startsWith('08') || // connection exception
    code === '53300' || // too_many_connections
    code === '53100' || // disk_full
    code === '53200' || // out_of_memory
    code === '25006' || // read_only_sql_transaction (a read-only standby or database)
    code === '57P01' || // admin_shutdown
    code === '57P02' || // crash_shutdown
    code === '57P03' || // cannot_connect_now
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code)
  );
}

function mapError(err: unknown): unknown {
  if (err instanceof ShineError) return err;
  if (isUnavailable(err)) return new ShineError('OVERLOADED', 'database unavailable', { cause: err });
  return err;
}

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class PgDb implements Queryable {
  readonly pool: pg.Pool;
  private readonly size: number;
  private readonly maxWaiting: number;
  private readonly maxAttempts: number;
  private active = 0;
  private readonly waiting: Waiter[] = [];
  private closed = false;
  private idle: (() => void) | null = null;
  /** Transactions committed (a write outside one counts as one) and retried, for metrics and benchmarks. */
  readonly stats = { commits: 0, retries: 0 };

  constructor(private readonly opts: PgDbOptions) {
    this.size = opts.poolSize;
    this.maxWaiting = opts.maxWaiting ?? 20_000;
    this.maxAttempts = opts.maxAttempts ?? 5;
    // The pool never has a caller waiting inside it: the slots below hand out at most `size` connections.
    this.pool = new pg.Pool({ connectionString: opts.url, max: opts.poolSize, types: TYPES });
    // An idle client losing its connection must not crash the process; the next checkout reconnects.
    this.pool.on('error', () => {});
  }

  /** Callers waiting for a connection now. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /** A fresh client outside the pool (session-level advisory locks that must outlive one checkout). */
  async dedicatedClient(): Promise<pg.Client> {
    if (this.closed) throw new ShineError('INTERNAL', 'database closed');
    const client = new pg.Client({ connectionString: this.opts.url, types: TYPES });
    client.on('error', () => {});
    try {
      await client.connect();
    } catch (err) {
      throw mapError(err);
    }
    return client;
  }

  private async acquireSlot(): Promise<void> {
    if (this.closed) throw new ShineError('INTERNAL', 'database closed');
    if (this.active < this.size) {
      this.active++;
      return;
    }
    if (this.waiting.length >= this.maxWaiting) throw new ShineError('OVERLOADED', 'database pool busy');
    // The releasing caller hands its slot over (active stays the same).
    await new Promise<void>((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  private releaseSlot(): void {
    const next = this.waiting.shift();
    if (next) return next.resolve();
    this.active--;
    if (this.active === 0) this.idle?.();
  }

  /** Runs fn with a pooled client (no transaction unless fn begins one). */
  async withClient<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    await this.acquireSlot();
    try {
      let client: pg.PoolClient;
      try {
        client = await this.pool.connect();
      } catch (err) {
        throw mapError(err);
      }
      let broken: Error | undefined;
      try {
        return await fn(client);
      } catch (err) {
        if (isUnavailable(err)) broken = err as Error;
        throw mapError(err);
      } finally {
        // A client whose connection failed is destroyed rather than handed to the next caller.
        client.release(broken);
      }
    } finally {
      this.releaseSlot();
    }
  }

  /**
   * One statement outside a transaction (a read, or a write that is atomic on its own). A write of rows is
   * a transaction of its own, committed before it is answered, and counts in stats.commits.
   */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string | pg.QueryConfig,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    return this.withClient(async (c) => {
      const r = await (typeof text === 'string' ? c.query<R>(text, values) : c.query<R>(text));
      if (WRITE_COMMANDS.has(r.command) && (r.rowCount ?? 0) > 0) this.stats.commits++;
      return r;
    });
  }

  /**
   * Runs fn in a READ COMMITTED transaction and resolves after COMMIT (synchronous_commit on: durable).
   * A serialization failure or deadlock rolls back and runs fn again, so fn must be safe to repeat.
   * `begin` may add statements run with BEGIN in the same round trip (they take no parameters).
   */
  tx<T>(fn: (client: pg.PoolClient) => Promise<T>, begin = ''): Promise<T> {
    return this.retried(() =>
      this.withClient(async (client) => {
        try {
          // Inside the try: when a statement after BEGIN fails (a lock's deadlock), the client must not go
          // back to the pool in an aborted transaction.
          await client.query(`BEGIN;${begin}`);
          const value = await fn(client);
          await client.query('COMMIT');
          this.stats.commits++;
          return value;
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      }),
    );
  }

  /**
   * A transaction of a first statement, whatever `middle` runs on its result, and a last statement, in two
   * round trips where the connection has both statements parsed: BEGIN, `begin` (no parameters) and `first`
   * in one simple query, `last` and COMMIT in another, each prepared statement run by name (executeText).
   * node-postgres sends one statement a round trip, and on a loaded machine a socket write to the database
   * cost the server more than the statement's own work (docs/performance.md). Until a connection has parsed
   * them they go as separate statements, as tx sends them. Retried as tx is.
   */
  async pipelinedTx<F extends pg.QueryResultRow, L extends pg.QueryResultRow, T>(
    begin: string,
    first: pg.QueryConfig,
    middle: (
      client: pg.PoolClient,
      r: pg.QueryResult<F>,
    ) => Promise<{ last: pg.QueryConfig; done: (r: pg.QueryResult<L>) => T }>,
  ): Promise<T> {
    return this.retried(() =>
      this.withClient(async (client) => {
        try {
          const firstText = executeText(client, first);
          let r1: pg.QueryResult<F>;
          if (firstText !== null) {
            r1 = lastResult(await client.query<F>(`BEGIN;${begin}${firstText}`));
          } else {
            await client.query(`BEGIN;${begin}`);
            r1 = await runPrepared<F>(client, first);
          }
          const { last, done } = await middle(client, r1);
          const lastText = executeText(client, last);
          let r2: pg.QueryResult<L>;
          if (lastText !== null) {
            const both = await client.query<L>(`${lastText};COMMIT`);
            r2 = Array.isArray(both) ? both[0]! : both;
          } else {
            r2 = await runPrepared<L>(client, last);
            await client.query('COMMIT');
          }
          this.stats.commits++;
          return done(r2);
        } catch (err) {
          await client.query('ROLLBACK').catch(() => {});
          throw err;
        }
      }),
    );
  }

  /** Runs attempt again on a serialization failure or deadlock, up to maxAttempts times. */
  private async retried<T>(attempt: () => Promise<T>): Promise<T> {
    for (let n = 1; ; n++) {
      try {
        return await attempt();
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (typeof code === 'string' && RETRYABLE.has(code) && n < this.maxAttempts) {
          this.stats.retries++;
          continue;
        }
        throw err;
      }
    }
  }

  /** Refuses new callers, fails the waiting ones, waits for the running ones, then closes the pool. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.waiting.splice(0)) w.reject(new ShineError('INTERNAL', 'database closed'));
    if (this.active > 0) await new Promise<void>((resolve) => (this.idle = resolve));
    await this.pool.end();
  }
}

/**
 * The advisory lock key of a name (the first 8 bytes of its SHA-256, signed): the same in every process,
 * and a plain number, so it can go into SQL text without parameters.
 */
export function lockKey(name: string): string {
  return sha256(name).readBigInt64BE(0).toString();
}
