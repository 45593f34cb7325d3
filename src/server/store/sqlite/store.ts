/** The Store on SQLite (better-sqlite3, WAL, group commit): one connection shared by every area. */
import type { Store } from '../types.js';
import { SqliteChainStore } from './chains.js';
import { SqliteCheckStore } from './check.js';
import type { SqliteDbOptions } from './db.js';
import { SqliteDb } from './db.js';
import { SqliteDeliveryStore } from './delivery.js';
import { SqliteDeviceStore } from './devices.js';
import { SqliteDirectoryStore } from './directory.js';
import { SqliteMessageStore } from './messages.js';
import { SqliteMetaStore } from './meta.js';
import { SqliteNonceStore } from './nonces.js';
import { SqliteProcessStore } from './processes.js';
import { SqlitePushStore } from './push.js';
import { SqliteReplicationStore } from './replication.js';
import { SqliteSettingsStore } from './settings.js';

export type SqliteStoreOptions = SqliteDbOptions;

export function openSqliteStore(opts: SqliteStoreOptions): SqliteStore {
  return new SqliteStore(new SqliteDb(opts));
}

/**
 * Every area on one SQLite connection. The areas share its statement cache and its group commit, so
 * writes of different areas queued in one turn of the event loop still share one transaction.
 */
export class SqliteStore implements Store {
  readonly dialect = 'sqlite';
  readonly meta: SqliteMetaStore;
  readonly directory: SqliteDirectoryStore;
  readonly messages: SqliteMessageStore;
  readonly delivery: SqliteDeliveryStore;
  readonly replication: SqliteReplicationStore;
  readonly nonces: SqliteNonceStore;
  readonly devices: SqliteDeviceStore;
  readonly settings: SqliteSettingsStore;
  readonly push: SqlitePushStore;
  readonly processes: SqliteProcessStore;
  readonly check: SqliteCheckStore;
  readonly chains: SqliteChainStore;

  constructor(readonly db: SqliteDb) {
    this.meta = new SqliteMetaStore(db);
    this.directory = new SqliteDirectoryStore(db);
    this.messages = new SqliteMessageStore(db);
    this.delivery = new SqliteDeliveryStore(db);
    this.replication = new SqliteReplicationStore(db);
    this.nonces = new SqliteNonceStore(db);
    this.devices = new SqliteDeviceStore(db);
    this.settings = new SqliteSettingsStore(db);
    this.push = new SqlitePushStore(db);
    this.processes = new SqliteProcessStore(db);
    this.check = new SqliteCheckStore(db);
    this.chains = new SqliteChainStore(db);
  }

  commitStats(): { commits: number; writes: number; checkpoints: number } {
    return {
      commits: this.db.stats.commits,
      writes: this.db.stats.jobs,
      checkpoints: this.db.checkpointer?.stats.checkpoints ?? 0,
    };
  }

  async migrate(): Promise<void> {
    this.db.migrate();
  }

  async ping(): Promise<void> {
    this.db.sql('SELECT 1').get();
  }

  async close(): Promise<void> {
    await this.db.close();
  }
}
