/**
 * Calls made in one turn of the event loop, served by one statement: the first call of a turn schedules
 * `run` for the turn's end, which gets every waiting call's input and answers each by its position (or
 * fails them all). A round trip each cost the server more than the statement's own work when the calls
 * come in bursts, as a batch of stored pairs answered in one turn makes them (docs/performance.md).
 *
 * With `keyOf`, calls of one key are served one statement after another in the order asked: a call whose
 * key is in the coming statement or in one still running waits for the next after it. For writes whose
 * outcome depends on the row as an earlier call of the same key left it.
 */
import type pg from 'pg';
import type { PgDb } from './db.js';
import { prepared } from './db.js';

export class PerTurn<I, R> {
  private waiting: Call<I, R>[] = [];
  private scheduled = false;
  /** Keys of the statements running now. */
  private readonly running = new Set<string>();

  constructor(
    private readonly run: (inputs: I[]) => Promise<R[]>,
    private readonly keyOf?: (input: I) => string,
  ) {}

  call(input: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ input, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.waiting.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.serve();
    });
  }

  private serve(): void {
    let calls = this.waiting;
    this.waiting = [];
    const keys: string[] = [];
    if (this.keyOf) {
      const now: Call<I, R>[] = [];
      for (const call of calls) {
        const key = this.keyOf(call.input);
        if (this.running.has(key)) this.waiting.push(call);
        else {
          this.running.add(key);
          keys.push(key);
          now.push(call);
        }
      }
      calls = now;
    }
    if (calls.length === 0) return;
    this.run(calls.map((c) => c.input))
      .then(
        (results) => calls.forEach((c, i) => c.resolve(results[i]!)),
        (err: unknown) => calls.forEach((c) => c.reject(err)),
      )
      .finally(() => {
        for (const key of keys) this.running.delete(key);
        this.schedule();
      });
  }
}

interface Call<I, R> {
  input: I;
  resolve: (r: R) => void;
  reject: (err: unknown) => void;
}

/** The tables rowsByKey reads, each with its primary key. */
const PRIMARY_KEY = { signed_messages: 'message_key', dm_delivery_state: 'outgoing_key' } as const;

/**
 * The rows of `table` whose primary key is among `keys` (a PerTurn's keys), in one prepared statement: each
 * key's row, or null.
 */
export async function rowsByKey<Row extends pg.QueryResultRow, R>(
  db: PgDb,
  table: keyof typeof PRIMARY_KEY,
  keys: readonly string[],
  toRow: (row: Row) => R,
): Promise<(R | null)[]> {
  const column = PRIMARY_KEY[table];
  const r = await db.query<Row>(prepared(`SELECT * FROM ${table} WHERE ${column} = ANY($1::text[])`, [keys]));
  const byKey = new Map(r.rows.map((row) => [row[column] as string, row]));
  return keys.map((key) => {
    const row = byKey.get(key);
    return row ? toRow(row) : null;
  });
}
