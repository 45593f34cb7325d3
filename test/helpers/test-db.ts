/**
 * The database a test server runs on. SQLite (a file in the server's data directory) unless
 * SHINE_TEST_DB=postgres, where every call makes a fresh database on the machine's PostgreSQL
 * (SHINE_TEST_PG_URL, default postgres://postgres@127.0.0.1:5432/test, is used to create and drop it).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pg from 'pg';

export type TestDbKind = 'sqlite' | 'postgres';

export const testDbKind = (): TestDbKind => (process.env.SHINE_TEST_DB === 'postgres' ? 'postgres' : 'sqlite');

const adminUrl = (): string => process.env.SHINE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface TestDb {
  /** A SHINE_DB value. */
  readonly url: string;
  readonly kind: TestDbKind;
  /** Drops the database (PostgreSQL; SQLite files go with their directory). */
  drop(): Promise<void>;
}

/** A fresh SQLite file under dataDir, or a fresh PostgreSQL database, as kind (default testDbKind()) says. */
export async function freshTestDb(dataDir: string, kind: TestDbKind = testDbKind()): Promise<TestDb> {
  if (kind === 'sqlite') return { url: `sqlite:${join(dataDir, 'shine.sqlite')}`, kind, drop: async () => {} };
  const name = `shine_t_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    kind,
    drop: async () => {
      await adminQuery(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
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

/** A Redis key prefix no other test uses. */
export const freshRedisPrefix = (): string => `shine-test-${randomBytes(6).toString('hex')}:`;

export const testRedisUrl = (): string => process.env.SHINE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
