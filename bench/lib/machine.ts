/** The machine a bench ran on, as every bench's JSON line states it. */
import os from 'node:os';
import pg from 'pg';
import { resolveConfig } from '../../src/server/config/config.js';
import type { SqliteWriter } from '../../src/server/store/sqlite/threaded.js';

export function machine(): { cpu: string; cores: number; node: string; platform: string } {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
  };
}

/** Where the bench's SQLite servers run their writes: SHINE_SQLITE_WRITER, else this machine's default. */
export function sqliteWriter(): SqliteWriter {
  return resolveConfig({ sqliteWriter: process.env.SHINE_SQLITE_WRITER || undefined }).sqliteWriter;
}

/** A PostgreSQL database's durability settings, as the benches that run on it print them. */
export async function postgresDurability(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const sc = (await client.query<{ synchronous_commit: string }>('SHOW synchronous_commit')).rows[0]!;
    const fs = (await client.query<{ fsync: string }>('SHOW fsync')).rows[0]!;
    return `synchronous_commit=${sc.synchronous_commit},fsync=${fs.fsync}`;
  } finally {
    await client.end();
  }
}
