/**
 * The database a test server runs on. SQLite (a file in the server's data directory) unless
 * SHINE_TEST_DB=postgres, where every call makes a fresh database on the machine's PostgreSQL
 * (SHINE_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/test, is used to create and drop it).
 * Tests read and write a server's database only through queryTestDb / queryServerDb, in SQL both
 * dialects run.
 */
import { randomBytes } from 'node:crypto';
import { copyFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { RunningServer } from '../../src/server/app.js';
import type { DbConfig } from '../../src/server/config/config.js';
import { parseDb } from '../../src/server/config/config.js';
import { openStore } from '../../src/server/store/open.js';
import type { Store } from '../../src/server/store/types.js';

/** Connections per test store: many servers of many test files share one PostgreSQL's connection limit. */
export const TEST_DB_POOL_SIZE = 3;

export type TestDbKind = 'sqlite' | 'postgres';

export const testDbKind = (): TestDbKind => (process.env.SHINE_TEST_DB === 'postgres' ? 'postgres' : 'sqlite');

/**
 * How many tests of a suite that starts a network per test run at once: all on SQLite; three on
 * PostgreSQL, where each server holds pooled connections and a dozen networks at once (two files run
 * side by side) came near the server's max_connections and slowed first attempts past their wait.
 */
export const suiteConcurrency = (): number | true => (testDbKind() === 'postgres' ? 3 : true);

const adminUrl = (): string => process.env.SHINE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/**
 * The prefix of every PostgreSQL database this test run makes: scripts/test.mjs sets SHINE_TEST_RUN and
 * drops whatever is left under it at the end, even after a crash (a database is never left behind).
 */
export const testDbPrefix = (): string => `shine_t_${(process.env.SHINE_TEST_RUN ?? 'x').replace(/\W/g, '')}_`;

export interface TestDb {
  /** A SHINE_DB value. */
  readonly url: string;
  readonly kind: TestDbKind;
  /** Empties the database: a server started on it again finds a new one (a server that lost its data). */
  reset(): Promise<void>;
  /** Drops the database (PostgreSQL; SQLite files go with their directory). */
  drop(): Promise<void>;
  /**
   * Copies the database as it is now (its server stopped, so nothing is half-written); restore() puts the
   * copy back, as an operator restores a backup.
   */
  backup(): Promise<{ restore(): Promise<void> }>;
}

/**
 * A fresh SQLite file under dataDir, or a fresh PostgreSQL database, as kind (default testDbKind()) says.
 * PostgreSQL test databases commit without waiting for the WAL flush unless durable (benchmarks).
 */
export async function freshTestDb(
  dataDir: string,
  kind: TestDbKind = testDbKind(),
  opts: { durable?: boolean } = {},
): Promise<TestDb> {
  if (kind === 'sqlite') {
    const path = join(dataDir, 'shine.sqlite');
    return {
      url: `sqlite:${path}`,
      kind,
      reset: async () => {
        for (const suffix of SQLITE_FILES) await rm(path + suffix, { force: true });
      },
      drop: async () => {},
      backup: async () => {
        const copy = `${path}.backup-${randomBytes(4).toString('hex')}`;
        const copied = await copySqlite(path, copy);
        return {
          restore: async () => {
            for (const suffix of SQLITE_FILES) await rm(path + suffix, { force: true });
            for (const suffix of copied) await copyFile(copy + suffix, path + suffix);
          },
        };
      },
    };
  }
  const name = `${testDbPrefix()}${randomBytes(6).toString('hex')}`;
  const durable = opts.durable ?? false;
  await createDatabase(name, durable);
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    kind,
    reset: async () => {
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await createDatabase(name, durable);
    },
    drop: async () => {
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
    backup: async () => {
      // Named under the run's prefix: the end of the run drops it if a test did not.
      const copy = `${name}_b${randomBytes(3).toString('hex')}`;
      await adminQuery(`CREATE DATABASE ${copy} TEMPLATE ${name}`);
      return {
        restore: async () => {
          await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
          await adminQuery(`CREATE DATABASE ${name} TEMPLATE ${copy}`);
          await adminQuery(`DROP DATABASE ${copy}`);
        },
      };
    },
  };
}

const SQLITE_FILES = ['', '-wal', '-shm'];

/** Copies a SQLite database's files that exist; answers their suffixes. */
async function copySqlite(from: string, to: string): Promise<string[]> {
  const copied: string[] = [];
  for (const suffix of SQLITE_FILES) {
    try {
      await copyFile(from + suffix, to + suffix);
      copied.push(suffix);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return copied;
}

/**
 * A commit returns before its WAL record is flushed: the tests kill SHiNE processes, never PostgreSQL, so
 * what they check is unchanged, and a flush per commit stalls every test on a shared machine (the SQLite
 * servers of federation tests likewise run with sqliteSync 'normal').
 */
async function createDatabase(name: string, durable: boolean): Promise<void> {
  await adminQuery(`CREATE DATABASE ${name}`);
  if (!durable) await adminQuery(`ALTER DATABASE ${name} SET synchronous_commit = off`);
}

async function adminQuery(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl() });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** A row as both dialects give it: integers as numbers (PostgreSQL BIGINT too), blobs as Buffers. */
export type TestRow = Record<string, unknown>;

// PostgreSQL answers BIGINT (type 20) as text; the tests compare numbers, as SQLite gives them.
const pgTypes = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20
      ? (v: string) => Number(v)
      : pg.types.getTypeParser(oid, format as never)) as typeof pg.types.getTypeParser,
};

/**
 * Runs one statement on the database at url (a SHINE_DB value) and returns its rows (none for a write).
 * Placeholders are `?`, turned into `$1…` for PostgreSQL; quote aliases ("readAtMs") where case matters,
 * as PostgreSQL folds unquoted names to lower case; pass flags as boolean parameters (SQLite gets 0/1).
 */
export async function queryTestDb(
  url: string | DbConfig,
  sql: string,
  params: readonly unknown[] = [],
): Promise<TestRow[]> {
  const db = parseDb(url);
  if (db.kind === 'sqlite') {
    const conn = new Database(db.path);
    try {
      // The server may hold the write lock for a group commit; wait for it instead of failing.
      conn.pragma('busy_timeout = 10000');
      const stmt = conn.prepare(sql);
      // SQLite keeps booleans as 0/1 (PostgreSQL columns such as `synced` are BOOLEAN).
      const values = params.map((p) => (typeof p === 'boolean' ? Number(p) : p));
      if (stmt.reader) return stmt.all(...values) as TestRow[];
      stmt.run(...values);
      return [];
    } finally {
      conn.close();
    }
  }
  const client = new pg.Client({ connectionString: db.url, types: pgTypes });
  await client.connect();
  try {
    let n = 0;
    const text = sql.replace(/\?/g, () => `$${++n}`);
    return (await client.query(text, [...params])).rows as TestRow[];
  } finally {
    await client.end();
  }
}

/** queryTestDb on the database of an in-process server (running or stopped). */
export const queryServerDb = (
  server: RunningServer,
  sql: string,
  params: readonly unknown[] = [],
): Promise<TestRow[]> => queryTestDb(server.config.db, sql, params);

/** A store of the test's own on the database at url (a SHINE_DB value), as a server process would open it. */
export const openTestStore = (url: string): Promise<Store> =>
  openStore({ db: parseDb(url), sqliteSync: 'full', dbPoolSize: TEST_DB_POOL_SIZE });

/** A Redis key prefix no other test uses. */
export const freshRedisPrefix = (): string => `shine-test-${randomBytes(6).toString('hex')}:`;

export const testRedisUrl = (): string => process.env.SHINE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
