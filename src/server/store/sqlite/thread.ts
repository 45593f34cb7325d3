/**
 * The writer thread of a threaded SQLite store (./threaded.ts): the store's one writing connection, its
 * group commit and its checkpoint thread, off the event loop that serves the sockets. It runs the calls
 * it is sent, in order, on a SqliteStore of its own: calls that arrive in one message start in the
 * same turn, so their writes share a commit, as they would on the event loop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ShineError } from '../../../protocol/errors.js';
import { perTurn } from '../../worker-thread.js';
import type { SqliteStoreOptions } from './store.js';
import { openSqliteStore } from './store.js';
import type { ThreadCall, ThreadReply, ThreadReplies } from './threaded.js';

const port = parentPort!;
const store = openSqliteStore(workerData.options as SqliteStoreOptions);
const areas = store as unknown as Record<string, Record<string, (...args: unknown[]) => Promise<unknown>>>;

// One message for every answer of a turn (a commit answers its whole group at once).
const reply = perTurn<ThreadReply>((replies) => {
  const batch: ThreadReplies = { replies, stats: store.commitStats() };
  port.postMessage(batch);
});

async function run(call: ThreadCall): Promise<unknown> {
  if (call.area === null) {
    if (call.method === 'migrate') return store.migrate();
    if (call.method === 'close') return store.close();
    if (call.method === 'pragma') return store.db.conn.pragma(call.args[0] as string, { simple: true });
    if (call.method === 'checkpoints') {
      await store.db.checkpointer?.idle();
      return store.db.checkpointer?.stats ?? null;
    }
    throw new ShineError('INTERNAL', `no store call ${call.method}`);
  }
  const area = areas[call.area]!;
  return area[call.method]!.apply(area, call.args);
}

port.on('message', (calls: ThreadCall[]) => {
  for (const call of calls) {
    run(call).then(
      (value) => reply({ id: call.id, value }),
      (err: unknown) => reply({ id: call.id, error: errorOf(err) }),
    );
  }
});

port.postMessage('ready');

/** What crosses to the event loop of an error: a ShineError's code and details, or a plain message. */
function errorOf(err: unknown): NonNullable<ThreadReply['error']> {
  if (err instanceof ShineError) return { code: err.code, message: err.message, details: err.details };
  return { message: err instanceof Error ? err.message : String(err), sqliteCode: (err as { code?: string })?.code };
}
