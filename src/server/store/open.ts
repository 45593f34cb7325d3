/** Opens the store the config names: SQLite (a file) or PostgreSQL (a pool). The only place that picks a dialect. */
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Config } from '../config/config.js';
import { openPostgresStore } from './postgres/store.js';
import { openSqliteStore } from './sqlite/store.js';
import { openThreadedSqliteStore } from './sqlite/threaded.js';
import type { Store } from './types.js';

export async function openStore(
  config: Pick<Config, 'db' | 'dbPoolSize' | 'sqliteSync'> & Partial<Pick<Config, 'sqliteWriter'>>,
): Promise<Store> {
  if (config.db.kind === 'postgres') return openPostgresStore({ url: config.db.url, poolSize: config.dbPoolSize });
  await mkdir(dirname(config.db.path), { recursive: true });
  const opts = { path: config.db.path, sync: config.sqliteSync };
  // Without the setting (a test's store opened directly, not a server's), the connection alone: `inline`.
  const writer = config.sqliteWriter ?? 'inline';
  return writer === 'inline' ? openSqliteStore(opts) : openThreadedSqliteStore(opts, writer);
}
