/**
 * A database that cannot be written (issue 13): writes answer 503 OVERLOADED with nothing half
 * written, reads are still served, other sessions are not disturbed, and writing works again, without
 * a restart, once space is back. SQLite's own limit on the file's pages (`max_page_count`) makes it
 * answer SQLITE_FULL, the error a full disk gives; `query_only` gives SQLITE_READONLY as a read-only
 * file does.
 */
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { after, describe, it } from 'node:test';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { ThreadedSqliteStore } from '../../src/server/store/sqlite/threaded.js';
import { assertError } from '../helpers/assert.js';
import { history, textPair } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { testDbKind } from '../helpers/test-db.js';
import { assertSessionWorks, connectUser, makeUser } from '../helpers/users.js';

const sqlite = testDbKind() === 'sqlite';

describe(
  'a database that cannot be written',
  { skip: !sqlite && 'SQLite only: PostgreSQL maps disk_full and read-only to 503 the same way' },
  () => {
    for (const writer of ['inline', 'thread', 'auto'] as const)
      it(`full disk, then read-only: writes get 503 and change nothing, reads go on, and writing resumes without a restart (writer ${writer})`, async () => {
        await using net = await startNetwork({ servers: [{ serverLogin: 'local', sqliteWriter: writer }] });
        const server = net.servers[0]!;
        const store = server.ctx.store;
        // The limits are set on the connections that write: the event loop's, the writer thread's, or both.
        const pragma = async (text: string): Promise<unknown> =>
          store instanceof ThreadedSqliteStore
            ? store.writerPragma(text)
            : (store as SqliteStore).db.conn.pragma(text, { simple: true });
        const conn = new Database(
          store instanceof ThreadedSqliteStore ? store.path : (store as SqliteStore).db.conn.name,
        );
        conn.pragma('busy_timeout = 5000');
        after(() => conn.close());
        const alice = makeUser('alice', ['local']);
        const bob = makeUser('bob', ['local']);
        await using bobSession = await connectUser(server.wsUrl, bob, 'bob-phone');
        await using aliceSession = await connectUser(server.wsUrl, alice, 'alice-laptop');
        const first = textPair(alice, bob.login, { body: 'before' });
        await aliceSession.call('SendMessagePair', {
          incomingBlobB64: first.incomingBlobB64,
          outgoingBlobB64: first.outgoingBlobB64,
        });
        const copies = () =>
          Number((conn.prepare('SELECT COUNT(*) AS n FROM signed_messages').get() as { n: number }).n);
        const stored = copies();

        for (const [what, fail, heal] of [
          [
            'full',
            // The file may not grow past the pages it has now: the next write needs more and fails.
            async () => pragma(`max_page_count = ${(await pragma('page_count')) as number}`),
            () => pragma('max_page_count = 4294967294'),
          ],
          ['read-only', () => pragma('query_only = ON'), () => pragma('query_only = OFF')],
        ] as const) {
          await fail();
          // A long body, so the write needs new pages.
          const blocked = textPair(alice, bob.login, { body: `${what} `.repeat(3_000) });
          const payload = { incomingBlobB64: blocked.incomingBlobB64, outgoingBlobB64: blocked.outgoingBlobB64 };
          assertError(await aliceSession.request('SendMessagePair', payload), 503, 'OVERLOADED', {
            op: 'SendMessagePair',
          });
          assert.equal(copies(), stored, `${what}: nothing half written`);
          // Reads are served meanwhile, and the other session still works.
          assert.deepEqual(
            (await history(aliceSession, bob.login)).map((m) => m.messageKey),
            [first.outgoingKey],
          );
          await assertSessionWorks(bobSession);

          await heal();
          // The same request again, without a restart: stored now.
          const answer = await aliceSession.call<{ deliveryState: string }>('SendMessagePair', payload);
          assert.equal(answer.deliveryState, 'delivered');
          assert.ok((await history(bobSession, alice.login)).some((m) => m.messageKey === blocked.incomingKey));
          conn.prepare('DELETE FROM signed_messages WHERE base_key = ?').run(blocked.baseKey);
          conn.prepare('DELETE FROM dm_sync_outbox WHERE primary_message_key LIKE ?').run(`${blocked.baseKey}|%`);
        }
      });
  },
);
