/**
 * The Store contract on PostgreSQL (a fresh database for this file, dropped after; every table emptied
 * before each test), and what only PostgreSQL has: several pools (processes) on one database.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { encodeDeleteMessageBody, encodeReceiptBody, messageKeyOf } from '../../src/protocol/container.js';
import { POSTGRES_MIGRATIONS } from '../../src/server/store/postgres/migrations.js';
import { prepared } from '../../src/server/store/postgres/db.js';
import { ackQuery } from '../../src/server/store/postgres/replication.js';
import type { PostgresStore } from '../../src/server/store/postgres/store.js';
import { openPostgresStore } from '../../src/server/store/postgres/store.js';
import type { Store } from '../../src/server/store/types.js';
import type { PairSpec } from '../helpers/containers.js';
import { testPair } from '../helpers/containers.js';
import { allSettings, outbox, putPair, storeContract, T0 } from '../helpers/store-contract.js';
import type { TestDb } from '../helpers/test-db.js';
import { freshTestDb, queryTestDb } from '../helpers/test-db.js';

const dir = mkdtempSync(join(tmpdir(), 'shine-pg-contract-'));
let db: TestDb | undefined;
const stores: PostgresStore[] = [];

async function database(): Promise<TestDb> {
  db ??= await freshTestDb(dir, 'postgres');
  return db;
}

/** Another process's pool on the same database. */
async function openPool(poolSize = 4): Promise<PostgresStore> {
  const store = openPostgresStore({ url: (await database()).url, poolSize });
  stores.push(store);
  return store;
}

after(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** The texts of the statements fn's calls ran outside transactions (PgDb.query), and fn's value. */
async function statementsOf<T>(store: PostgresStore, fn: () => Promise<T>): Promise<{ texts: string[]; value: T }> {
  const texts: string[] = [];
  const query = store.db.query.bind(store.db);
  store.db.query = ((text: string | pg.QueryConfig, values?: unknown[]) => {
    texts.push(typeof text === 'string' ? text : text.text);
    return query(text, values);
  }) as typeof store.db.query;
  try {
    return { texts, value: await fn() };
  } finally {
    store.db.query = query;
  }
}

let shared: PostgresStore | undefined;

storeContract({
  dialect: 'postgres',
  async open() {
    if (!shared) {
      shared = await openPool();
      await shared.migrate();
    }
    const tables = await shared.db.query<{ tablename: string }>(
      `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'`,
    );
    await shared.db.query(`TRUNCATE ${tables.rows.map((t) => t.tablename).join(', ')}`);
    return shared;
  },
  query: async (_store, sql, params) => queryTestDb((await database()).url, sql, params),
});

describe('PostgreSQL: several processes on one database', () => {
  let a: PostgresStore;
  let b: PostgresStore;
  before(async () => {
    a = await openPool(3);
    b = await openPool(3);
    // Migrations from two pools at once run once.
    await Promise.all([a.migrate(), b.migrate(), a.migrate()]);
  });

  it('migrations from several pools at once run once', async () => {
    const r = await a.db.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(
      r.rows.map((row) => row.version),
      POSTGRES_MIGRATIONS.map((_, i) => i + 1),
    );
  });

  it("reads BIGINT as numbers through its own pool only, leaving pg's global parsers alone", async () => {
    const r = await a.db.query<{ n: unknown }>('SELECT 9007199254740991::bigint AS n');
    assert.equal(r.rows[0]!.n, Number.MAX_SAFE_INTEGER);
    assert.equal(pg.types.getTypeParser(pg.types.builtins.INT8, 'text')('42'), '42');
  });

  it('keys sort by bytes whatever the database collation: key columns are COLLATE "C"', async () => {
    const r = await a.db.query<{ column: string; collation: string | null }>(
      `SELECT table_name || '.' || column_name AS column, collation_name AS collation FROM information_schema.columns
       WHERE table_schema = 'public' AND data_type = 'text' AND (column_name LIKE '%login' OR column_name LIKE '%key'
         OR column_name IN ('sync_id', 'device_id', 'endpoint', 'target', 'nonce', 'process_id', 'origin_device'))
         AND column_name NOT IN ('sign_key', 'enc_key')`,
    );
    assert.ok(r.rows.length >= 25, `${r.rows.length} key columns`);
    assert.deepEqual(
      r.rows.filter((row) => row.collation !== 'C'),
      [],
    );
  });

  it('two pools storing copies of one owner concurrently end as storing them one after another', async () => {
    // Fresh logins per run of this test: the contract tests empty the tables between their own tests only.
    const [alice, bob] = ['conc-alice', 'conc-bob'];
    const specs: PairSpec[] = [];
    for (let i = 0; i < 12; i++) specs.push({ from: alice, to: bob, timeMs: T0 + i, nonce: i });
    for (let i = 0; i < 12; i += 3)
      specs.push({ from: alice, to: bob, timeMs: T0 + i, nonce: i, revisionTimeMs: T0 + 100 + i });
    for (let i = 1; i < 12; i += 4)
      specs.push({
        type: 3,
        from: bob,
        to: alice,
        timeMs: T0 + 200 + i,
        nonce: 1000 + i,
        body: encodeReceiptBody({ readAtMs: T0 + 200 + i, targetTimeMs: T0 + i, targetNonce: i }),
      });
    const deleted = new Set([2, 7].map((i) => T0 + i));
    for (const i of [2, 7])
      specs.push({
        type: 5,
        from: alice,
        to: bob,
        timeMs: T0 + 300 + i,
        nonce: 2000 + i,
        body: encodeDeleteMessageBody({ targetTimeMs: T0 + i, targetNonce: i, targetSender: 0 }),
      });
    const input = (spec: PairSpec, s: Store) =>
      putPair(s, spec, {
        outbox: {
          owners: new Map([
            [alice, false],
            [bob, false],
          ]),
        },
        nowMs: spec.timeMs,
        delivery: { state: 'accepted', attempt: 1, acceptedAtMs: spec.timeMs, nextAttemptAtMs: spec.timeMs },
      });
    // Concurrently: every pair twice, once through each pool, in shuffled orders.
    const shuffled = (list: PairSpec[], seed: number) =>
      list
        .map((spec, i) => ({ spec, k: (i * 7919 + seed * 104_729) % 101 }))
        .sort((x, y) => x.k - y.k)
        .map((x) => x.spec);
    await Promise.all([
      ...shuffled(specs, 1).map((spec) => input(spec, a)),
      ...shuffled(specs, 2).map((spec) => input(spec, b)),
    ]);
    const concurrent = await snapshot(a, alice, bob, specs, deleted);

    const seqDb = await freshTestDb(dir, 'postgres');
    const seq = openPostgresStore({ url: seqDb.url, poolSize: 1 });
    try {
      await seq.migrate();
      for (const spec of specs) await input(spec, seq);
      assert.deepEqual(concurrent, await snapshot(seq, alice, bob, specs, deleted));
    } finally {
      await seq.close();
      await seqDb.drop();
    }
    assert.ok(concurrent.history.length > 0);
  });

  it('one new device logged in through two pools at once is new for exactly one', async () => {
    const results = await Promise.all([
      a.devices.touchDevice('race-dev', 'phone', T0),
      b.devices.touchDevice('race-dev', 'phone', T0 + 1),
    ]);
    assert.equal(results.filter((r) => r.isNew).length, 1);
    assert.equal(results[0]!.firstSeenAtMs, results[1]!.firstSeenAtMs);
  });

  it('settings written through two pools at once: the winner by the rule is stored, whatever the order', async () => {
    const writes = Array.from({ length: 20 }, (_, i) => ({
      owner: 'race-set',
      key: 'theme',
      value: new Uint8Array([i % 7, i]),
      updatedAtMs: T0 + (i % 5),
      nowMs: T0 + 100,
      synced: false,
    }));
    await Promise.all(writes.map((w, i) => (i % 2 === 0 ? a : b).settings.setSetting(w)));
    const [stored] = await allSettings(a, 'race-set');
    // The newest updatedAtMs (T0 + 4: i = 4, 9, 14, 19), then the largest value bytes among them.
    assert.deepEqual([stored?.updatedAtMs, [...(stored?.value ?? [])]], [T0 + 4, [5, 19]]);
  });

  it('exclusively: while one pool holds the lock, another does not run', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const first = a.processes.exclusively('cycle', async () => {
      entered();
      await held;
    });
    await inside;
    let ran = false;
    assert.equal(await b.processes.exclusively('cycle', async () => void (ran = true)), false);
    assert.equal(await b.processes.exclusively('other', async () => void (ran = true)), true);
    release();
    assert.equal(await first, true);
    assert.equal(await b.processes.exclusively('cycle', async () => {}), true);
    assert.ok(ran);
  });

  it('refuses callers beyond the waiting bound with 503 OVERLOADED; close fails the waiting ones', async () => {
    const small = openPostgresStore({ url: (await database()).url, poolSize: 1, maxWaiting: 2 });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const holder = small.db.withClient(() => held);
    const codes = (p: Promise<unknown>) =>
      p.then(
        () => 'ok',
        (err: { code?: string }) => err.code ?? String(err),
      );
    const waiting = [1, 2].map(() => codes(small.meta.getMeta('x')));
    assert.equal(await codes(small.meta.getMeta('x')), 'OVERLOADED');
    release();
    assert.deepEqual(await Promise.all(waiting), ['ok', 'ok']);
    await holder;
    let release2!: () => void;
    const held2 = new Promise<void>((resolve) => (release2 = resolve));
    const holder2 = small.db.withClient(() => held2);
    const waiter = codes(small.meta.getMeta('x'));
    const closing = small.close();
    assert.equal(await waiter, 'INTERNAL');
    release2();
    await holder2;
    await closing;
    assert.equal(await codes(small.meta.getMeta('x')), 'INTERNAL');
  });

  it('a transaction failing with a serialization failure or a deadlock runs again; other errors do not', async () => {
    const retriesBefore = a.db.stats.retries;
    let runs = 0;
    const value = await a.db.tx(async (c) => {
      runs++;
      await c.query(`INSERT INTO server_meta (key, value) VALUES ('retried', $1)`, [String(runs)]);
      if (runs < 3) throw Object.assign(new Error('conflict'), { code: runs === 1 ? '40001' : '40P01' });
      return runs;
    });
    assert.equal(value, 3);
    assert.equal(a.db.stats.retries - retriesBefore, 2);
    // The failed runs were rolled back: only the last insert is there.
    assert.equal(await a.meta.getMeta('retried'), '3');
    let once = 0;
    await assert.rejects(
      a.db.tx(async () => {
        once++;
        throw Object.assign(new Error('bad'), { code: '23505' });
      }),
      /bad/,
    );
    assert.equal(once, 1);
  });

  it('a transaction whose BEGIN statements fail leaves no open transaction on its connection', async () => {
    const one = openPostgresStore({ url: (await database()).url, poolSize: 1 });
    try {
      await assert.rejects(
        one.db.tx(async () => 1, 'SELECT 1 / 0;'),
        /division by zero/,
      );
      // The pool's only connection is used next: it must not be inside an aborted transaction.
      assert.equal(await one.meta.getMeta('nothing'), null);
    } finally {
      await one.close();
    }
  });

  it('a database that cannot be reached answers 503 OVERLOADED', async () => {
    const gone = openPostgresStore({ url: 'postgres://postgres@127.0.0.1:1/none', poolSize: 1 });
    await assert.rejects(gone.ping(), { code: 'OVERLOADED' });
    await gone.close();
  });
});

describe('PostgreSQL: a transaction in two round trips (PgDb.pipelinedTx)', () => {
  it('values go by name as pg would send them, whatever their quotes, dollars and backslashes; a failing last statement commits nothing', async () => {
    const store = await openPool(1);
    await store.migrate();
    const odd = [`it's $shine_value$ \\ " '' $$ $1`, 'plain', '$shine_value', '\\x00'];
    const statement = (i: number): pg.QueryConfig =>
      prepared('SELECT $1::text AS t, $2::text[] AS list, $3::bytea AS b, $4::bigint AS n, $5::text AS nothing', [
        odd[i % odd.length],
        [...odd, null],
        Buffer.from([0, 36, 39, 92, 255]),
        2 ** 53 - i,
        null,
      ]);
    const insert = (k: string): pg.QueryConfig =>
      prepared("INSERT INTO server_meta (key, value) VALUES ($1, 'v') RETURNING key", [k]);
    type Row = { t: string; list: (string | null)[]; b: Buffer; n: number; nothing: null };
    // The first run parses both statements; the later ones run them by name (EXECUTE) in two round trips.
    for (let i = 0; i < 5; i++) {
      const [first, last] = await store.db.pipelinedTx<Row, { key: string }, [Row, string]>(
        '',
        statement(i),
        async (_c, r) => ({ last: insert(`pipelined-${i}`), done: (r2) => [r.rows[0]!, r2.rows[0]!.key] }),
      );
      assert.deepEqual(first, {
        t: odd[i % odd.length],
        list: [...odd, null],
        b: Buffer.from([0, 36, 39, 92, 255]),
        n: 2 ** 53 - i,
        nothing: null,
      });
      assert.equal(last, `pipelined-${i}`);
    }
    // The same key again fails the last statement: its transaction commits nothing.
    await assert.rejects(
      store.db.pipelinedTx('', insert('pipelined-extra'), async () => ({
        last: insert('pipelined-0'),
        done: () => null,
      })),
      /duplicate key/,
    );
    const kept = await store.db.query<{ key: string }>(
      "SELECT key FROM server_meta WHERE key LIKE 'pipelined-%' ORDER BY key",
    );
    assert.deepEqual(
      kept.rows.map((r) => r.key),
      ['pipelined-0', 'pipelined-1', 'pipelined-2', 'pipelined-3', 'pipelined-4'],
    );
  });
});

describe('PostgreSQL: pairs and copies stored in batches, calls of one turn in one statement', () => {
  let store: PostgresStore;
  before(async () => {
    store = await openPool(6);
    await store.migrate();
  });

  const local = (...logins: string[]) => ({
    outbox: { owners: new Map(logins.map((l) => [l, false])) },
  });
  /** n pairs, each between two owners of its own. */
  const ownPairs = (n: number, prefix: string): PairSpec[] =>
    Array.from({ length: n }, (_, i) => ({ from: `${prefix}a${i}`, to: `${prefix}b${i}`, timeMs: T0 + i, nonce: i }));

  it('pairs of many owners asked for in one turn share a few transactions, each stored as alone', async () => {
    const specs = ownPairs(60, 'batch-');
    const commits = store.db.stats.commits;
    const results = await Promise.all(
      specs.map((spec, i) =>
        putPair(store, spec, {
          ...local(spec.from, spec.to),
          delivery: { state: 'accepted', attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 + i },
        }),
      ),
    );
    // 60 pairs of 120 owners: batches of at most 32, so at least two, and far fewer than 60.
    const used = store.db.stats.commits - commits;
    assert.ok(used >= 2 && used <= 6, `${used} commits for 60 pairs`);
    for (const [i, spec] of specs.entries()) {
      const p = testPair(spec);
      assert.equal(results[i]!.outgoing.outcome, 'inserted');
      assert.equal(results[i]!.incoming.outcome, 'inserted');
      assert.equal(results[i]!.deliveryState, 'accepted');
      assert.equal(results[i]!.outgoing.messageKey, messageKeyOf(p.outgoing));
      assert.equal((await store.delivery.getDelivery(messageKeyOf(p.outgoing)))?.nextAttemptAtMs, T0 + i);
      assert.ok(await store.messages.getCopy(messageKeyOf(p.incoming)));
    }
  });

  it('pairs of one owner asked for in one turn are stored in the order asked, each seeing the one before', async () => {
    const [alice, bob] = ['batch-same-a', 'batch-same-b'];
    const first: PairSpec = { from: alice, to: bob, timeMs: T0, nonce: 1 };
    const edit: PairSpec = { ...first, revisionTimeMs: T0 + 50 };
    const delivery = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
    const [a, b, c] = await Promise.all([
      putPair(store, first, { ...local(alice, bob), delivery }),
      putPair(store, edit, { ...local(alice, bob), delivery }),
      putPair(store, first, { ...local(alice, bob), delivery }),
    ]);
    assert.deepEqual(
      [a, b, c].map((r) => r.outgoing.outcome),
      ['inserted', 'updated', 'unchanged'],
    );
    // The older revision asked for last changes neither the copy nor its delivery row.
    const copy = await store.messages.getCopy(b.outgoing.messageKey);
    assert.equal(copy?.revisionTimeMs, T0 + 50);
    assert.equal((await store.delivery.getDelivery(b.outgoing.messageKey))?.revisionTimeMs, T0 + 50);
    assert.equal(c.deliveryState, 'accepted');
  });

  it("single copies (a federated recipient's) share batches with pairs; a copy of an owner in flight waits for its turn", async () => {
    const pairs = ownPairs(10, 'copies-p-');
    const copies = ownPairs(20, 'copies-c-').map((spec) => testPair(spec).incoming);
    const commits = store.db.stats.commits;
    const [pairResults, copyResults, again] = await Promise.all([
      Promise.all(pairs.map((spec) => putPair(store, spec, local(spec.from, spec.to)))),
      Promise.all(
        copies.map((copy) => store.messages.storeCopy({ copy, nowMs: T0, outbox: local(copy.toLogin).outbox })),
      ),
      // The same copy again in the same turn: its owner is in the batch, so it is stored after it.
      store.messages.storeCopy({ copy: copies[0]!, nowMs: T0, outbox: local(copies[0]!.toLogin).outbox }),
    ]);
    const used = store.db.stats.commits - commits;
    assert.ok(used >= 2 && used <= 5, `${used} commits for 10 pairs and 21 copies`);
    assert.ok(pairResults.every((r) => r.outgoing.outcome === 'inserted' && r.incoming.outcome === 'inserted'));
    assert.deepEqual(
      copyResults.map((r) => [r.outcome, r.messageKey]),
      copies.map((c) => ['inserted', messageKeyOf(c)]),
    );
    assert.equal(again.outcome, 'unchanged');
    for (const copy of copies) {
      assert.ok(await store.messages.getCopy(messageKeyOf(copy)));
      assert.deepEqual(
        (await outbox(store, copy.toLogin)).map((i) => i.primaryMessageKey),
        [messageKeyOf(copy)],
        'its outbox row, once',
      );
    }
  });

  it('the delivered marks of one turn are one statement; a mark asked for twice waits for the next', async () => {
    const specs = ownPairs(6, 'marks-');
    const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
    await Promise.all(specs.map((spec) => putPair(store, spec, { ...local(spec.from, spec.to), delivery: accepted })));
    const keys = specs.map((spec) => messageKeyOf(testPair(spec).outgoing));
    const rev = { revisionTimeMs: 0, reencryptedAtMs: 0 };
    const { texts, value: marks } = await statementsOf(store, () =>
      Promise.all([...keys, keys[0]!].map((k) => store.delivery.markDelivered(k, rev, T0 + 1, null))),
    );
    assert.deepEqual(marks, [true, true, true, true, true, true, false]);
    assert.equal(texts.filter((t) => t.includes('UPDATE dm_delivery_state')).length, 2);
  });

  it('a write of rows outside a transaction counts as a commit; a read, or a write of no row, does not', async () => {
    const [spec] = ownPairs(1, 'count-');
    const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
    await putPair(store, spec!, { ...local(spec!.from, spec!.to), delivery: accepted });
    const key = messageKeyOf(testPair(spec!).outgoing);
    const rev = { revisionTimeMs: 0, reencryptedAtMs: 0 };
    const commits = () => store.commitStats().commits;
    const before = commits();
    assert.ok(await store.delivery.getDelivery(key));
    assert.equal(commits(), before, 'a read');
    assert.equal(await store.delivery.markDelivered(key, rev, T0 + 1, null), true);
    assert.equal(commits(), before + 1, 'the mark, committed on its own');
    assert.equal(await store.delivery.markDelivered(key, rev, T0 + 2, null), false);
    assert.equal(commits(), before + 1, 'a mark that found no accepted row');
  });

  it('a batch takes two round trips once its connection has parsed its statements: BEGIN with the facts, the rows with COMMIT', async () => {
    const one = await openPool(1);
    const texts: string[] = [];
    const withClient = one.db.withClient.bind(one.db);
    one.db.withClient = ((fn) =>
      withClient((client) => {
        const query = client.query.bind(client);
        client.query = ((q: string | pg.QueryConfig, values?: unknown[]) => {
          texts.push(typeof q === 'string' ? q : `(prepared) ${q.text}`);
          return query(q as string, values);
        }) as typeof client.query;
        return fn(client).finally(() => (client.query = query));
      })) as typeof one.db.withClient;
    const [first, ...rest] = ownPairs(5, 'rt-');
    await putPair(one, first!, local(first!.from, first!.to));
    assert.equal(texts.length, 4, 'the first: BEGIN, the facts and the rows parsed, COMMIT');
    texts.length = 0;
    const results = await Promise.all(rest.map((spec) => putPair(one, spec, local(spec.from, spec.to))));
    assert.deepEqual(
      texts.map((t) => /^BEGIN;.*EXECUTE shine_\w+\(/s.test(t) || /^EXECUTE shine_\w+\(.*\);COMMIT$/s.test(t)),
      [true, true],
      texts.join('\n---\n').slice(0, 2000),
    );
    assert.ok(results.every((r) => r.outgoing.outcome === 'inserted' && r.incoming.outcome === 'inserted'));
    for (const spec of rest) assert.ok(await one.messages.getCopy(messageKeyOf(testPair(spec).incoming)));
  });

  it("one sender's messages to many share a batch; a deletion, and that owner's calls after it, wait for the next", async () => {
    const sender = 'one-sender';
    const to = (i: number): PairSpec => ({ from: sender, to: `one-sender-to${i}`, timeMs: T0 + i, nonce: i });
    const commits = store.db.stats.commits;
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => putPair(store, to(i), local(sender, `one-sender-to${i}`))),
    );
    assert.ok(results.every((r) => r.outgoing.outcome === 'inserted' && r.incoming.outcome === 'inserted'));
    const used = store.db.stats.commits - commits;
    assert.ok(used <= 3, `${used} commits for 20 pairs of one sender`);

    // In the order asked: a message, the deletion of the next one, the next one (then tombstoned).
    const [alice, bob] = ['order-a', 'order-b'];
    const m = (i: number): PairSpec => ({ from: alice, to: bob, timeMs: T0 + i, nonce: i });
    const deletion: PairSpec = {
      type: 5,
      from: alice,
      to: bob,
      timeMs: T0 + 10,
      nonce: 10,
      body: encodeDeleteMessageBody({ targetTimeMs: T0 + 2, targetNonce: 2, targetSender: 0 }),
    };
    const [first, deleted, second] = await Promise.all(
      [m(1), deletion, m(2)].map((spec) => putPair(store, spec, local(alice, bob))),
    );
    assert.deepEqual(
      [first, deleted, second].map((r) => r!.outgoing.outcome),
      ['inserted', 'inserted', 'tombstoned'],
    );
  });

  it('a batch the database cannot serve fails all its pairs with 503 OVERLOADED, none tried again alone', async () => {
    const gone = openPostgresStore({ url: 'postgres://postgres@127.0.0.1:1/none', poolSize: 2 });
    let transactions = 0;
    const withClient = gone.db.withClient.bind(gone.db);
    gone.db.withClient = ((fn) => {
      transactions++;
      return withClient(fn);
    }) as typeof gone.db.withClient;
    const settled = await Promise.allSettled(
      ownPairs(4, 'batch-gone-').map((spec) => putPair(gone, spec, local(spec.from, spec.to))),
    );
    await gone.close();
    assert.deepEqual(
      settled.map((r) => r.status === 'rejected' && (r.reason as { code?: string }).code),
      ['OVERLOADED', 'OVERLOADED', 'OVERLOADED', 'OVERLOADED'],
    );
    assert.equal(transactions, 1);
  });

  it('the push subscriptions of the owners asked for in one turn are read in one statement', async () => {
    const { texts, value: lists } = await statementsOf(store, () =>
      Promise.all(['sub-a', 'sub-b', 'sub-c', 'sub-a'].map((o) => store.push.subscriptionsOf(o))),
    );
    assert.deepEqual(lists, [[], [], [], []]);
    assert.equal(texts.filter((t) => t.includes('FROM push_subscriptions')).length, 1);
  });

  it('the delivery rows asked for in one turn are read in one statement', async () => {
    const specs = ownPairs(3, 'rows-');
    const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
    await Promise.all(specs.map((spec) => putPair(store, spec, { ...local(spec.from, spec.to), delivery: accepted })));
    const keys = specs.map((spec) => messageKeyOf(testPair(spec).outgoing));
    const { texts, value: rows } = await statementsOf(store, () =>
      Promise.all([...keys, 'rows-x|rows-y|1|1|1', keys[1]!].map((k) => store.delivery.getDelivery(k))),
    );
    assert.deepEqual(
      rows.map((r) => r && [r.outgoingKey, r.state]),
      [...keys.map((k) => [k, 'accepted']), null, [keys[1], 'accepted']],
    );
    assert.equal(texts.filter((t) => t.includes('FROM dm_delivery_state')).length, 1);
  });

  it('the copies asked for in one turn are read in one statement', async () => {
    const specs = ownPairs(2, 'copies-');
    await Promise.all(specs.map((spec) => putPair(store, spec, local(spec.from, spec.to))));
    const keys = specs.flatMap((spec) => [
      messageKeyOf(testPair(spec).incoming),
      messageKeyOf(testPair(spec).outgoing),
    ]);
    const { texts, value: copies } = await statementsOf(store, () =>
      Promise.all([...keys, 'copies-x|copies-y|1|1|1', keys[2]!].map((k) => store.messages.getCopy(k))),
    );
    assert.deepEqual(
      copies.map((c) => c?.messageKey ?? null),
      [...keys, null, keys[2]],
    );
    assert.equal(texts.filter((t) => t.includes('FROM signed_messages')).length, 1);
  });

  it("a page's acks mark the rows of the syncIds named, and no row whose syncId moved on", async () => {
    // 3 000 outbox rows of one owner, 500 of them acked at once (a replication page's acks).
    await store.db.query(
      `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced)
       SELECT 'ack-owner', 'ack-owner|ack-peer|' || i || '|1|2', 'ack-owner|ack-peer|' || i || '|1|2:0:0', i,
         decode(repeat('ab', 500), 'hex'), false
       FROM generate_series(1, 3000) AS i`,
    );
    const keys = Array.from({ length: 500 }, (_, i) => `ack-owner|ack-peer|${1000 + i}|1|2`);
    // The first one's row moved on to a newer revision; the next one's key is acked with the first's syncId.
    await store.db.query(
      `UPDATE dm_sync_outbox SET sync_id = primary_message_key || ':7:0' WHERE primary_message_key = $1`,
      [keys[0]],
    );
    const syncIds = keys.map((k) => `${k}:0:0`);
    syncIds[1] = syncIds[0]!;
    const { texts } = await statementsOf(store, async () => {
      await store.db.query(
        ackQuery(
          'dm_sync_outbox',
          'primary_message_key',
          'ack-owner',
          keys.map((key, i) => ({ key, syncId: syncIds[i]! })),
        ),
      );
    });
    assert.equal(texts.length, 1);
    const synced = await store.db.query<{ k: string }>(
      `SELECT primary_message_key AS k FROM dm_sync_outbox WHERE owner_login = 'ack-owner' AND synced ORDER BY stored_at_ms`,
    );
    assert.deepEqual(
      synced.rows.map((r) => r.k),
      keys.slice(2),
    );
  });

  it('a pair that fails fails alone: the others of its batch are stored, it stores nothing', async () => {
    const specs = ownPairs(8, 'batch-f-');
    const commits = store.db.stats.commits;
    const settled = await Promise.allSettled(
      specs.map((spec, i) =>
        putPair(store, spec, {
          ...local(spec.from, spec.to),
          // attempt is an INTEGER column: 2^40 fails the statement that writes the delivery rows.
          delivery: { state: 'accepted', attempt: i === 5 ? 2 ** 40 : 1, acceptedAtMs: T0, nextAttemptAtMs: T0 },
        }),
      ),
    );
    assert.ok(store.db.stats.commits - commits >= 7, 'the others committed on their own');
    for (const [i, spec] of specs.entries()) {
      const p = testPair(spec);
      const stored = await store.messages.getCopy(messageKeyOf(p.outgoing));
      if (i === 5) {
        assert.equal(settled[i]!.status, 'rejected');
        assert.match(String((settled[i] as PromiseRejectedResult).reason), /out of range/);
        assert.equal(stored, null);
        assert.equal(await store.messages.getCopy(messageKeyOf(p.incoming)), null);
      } else {
        assert.equal(settled[i]!.status, 'fulfilled');
        assert.ok(stored);
      }
    }
  });
});

/** What a user sees of one owner pair, through the Store interface only. */
async function snapshot(store: Store, alice: string, bob: string, specs: PairSpec[], deleted: Set<number>) {
  const history = [];
  for (const [owner, peer] of [
    [alice, bob],
    [bob, alice],
  ] as const) {
    const page = await store.messages.getDirectMessages({
      owner,
      peer,
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 1000,
    });
    history.push(...page.items);
  }
  const outbox = [];
  for (const owner of [alice, bob]) {
    const page = await store.replication.dmSyncPage({
      owner,
      ackSyncIds: [],
      afterStoredAtMs: -1,
      afterKey: '',
      limit: 1000,
      maxBytes: 1 << 30,
    });
    outbox.push(...page.items);
  }
  const deliveries = [];
  const copies = [];
  for (const spec of specs) {
    const p = testPair(spec);
    // A row's version counts the revisions it went through, and a deleted message keeps the row it had
    // if it came before its delete: both depend on arrival order, by the rules, on either dialect.
    const row = await store.delivery.getDelivery(messageKeyOf(p.outgoing));
    if (!deleted.has(spec.timeMs)) deliveries.push(row && [row.state, row.revisionTimeMs, row.nextAttemptAtMs]);
    copies.push(
      await store.messages.getCopy(messageKeyOf(p.incoming)),
      await store.messages.getCopy(messageKeyOf(p.outgoing)),
    );
  }
  return { history, outbox, deliveries, copies };
}
