/**
 * Reads of a whole SQLite database (`shine check`'s integrity check and its searches for rows that refer to
 * nothing) on a thread of their own with a read-only connection, so that a live server's event loop goes on
 * meanwhile: on the event loop they stalled every session for seconds per hundred thousand messages
 * (docs/performance.md). The statements run in one read transaction, so they see one snapshot.
 */
import { evalWorker } from '../../worker-thread.js';

/** The worker (../../worker-thread.ts): runs workerData.statements, answers their rows, and ends. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.paths['better-sqlite3']);
let db;
try {
  db = new Database(workerData.path, { readonly: true, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  const rows = {};
  db.transaction(() => {
    for (const [name, sql] of workerData.statements) rows[name] = db.prepare(sql).all();
  })();
  parentPort.postMessage({ rows });
} catch (err) {
  parentPort.postMessage({ error: String((err && err.message) || err) });
} finally {
  if (db) db.close();
}
`;

/**
 * Runs each named statement (no parameters) on a new thread against the database file at path; answers
 * each one's rows by name (BLOBs arrive as Uint8Array).
 */
export function readOnThread<K extends string>(
  path: string,
  statements: Record<K, string>,
): Promise<Record<K, Record<string, unknown>[]>> {
  return new Promise((resolve, reject) => {
    const worker = evalWorker(WORKER_SOURCE, ['better-sqlite3'], { path, statements: Object.entries(statements) });
    // The caller waits for the answer: the thread keeps the process alive until it ends.
    worker.ref();
    worker.once('message', (m: { rows?: Record<K, Record<string, unknown>[]>; error?: string }) =>
      m.rows ? resolve(m.rows) : reject(new Error(`database read thread: ${m.error}`)),
    );
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`database read thread ended (exit ${code}) without an answer`)));
  });
}
