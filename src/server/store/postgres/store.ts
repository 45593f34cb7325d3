/** The Store on PostgreSQL: every area over one pool (docs/protocol.md §9.2). */
import type { Store } from '../types.js';
import { PgChainStore } from './chains.js';
import { PgCheckStore } from './check.js';
import { PgDb } from './db.js';
import { PgDeliveryStore } from './delivery.js';
import { PgDeviceStore } from './devices.js';
import { PgDirectoryStore } from './directory.js';
import { PgMessageStore } from './messages.js';
import { PgMetaStore } from './meta.js';
import { migratePostgres } from './migrations.js';
import { PgNonceStore } from './nonces.js';
import { PgProcessStore } from './processes.js';
import { PgPushStore } from './push.js';
import { PgReplicationStore } from './replication.js';
import { PgSettingsStore } from './settings.js';

export interface PostgresStoreOptions {
  url: string;
  poolSize: number;
  /** Callers waiting for a connection before new ones get 503 OVERLOADED. */
  maxWaiting?: number;
}

export function openPostgresStore(opts: PostgresStoreOptions): PostgresStore {
  return new PostgresStore(new PgDb(opts));
}

export class PostgresStore implements Store {
  readonly dialect = 'postgres';
  readonly meta: PgMetaStore;
  readonly directory: PgDirectoryStore;
  readonly messages: PgMessageStore;
  readonly delivery: PgDeliveryStore;
  readonly replication: PgReplicationStore;
  readonly nonces: PgNonceStore;
  readonly devices: PgDeviceStore;
  readonly settings: PgSettingsStore;
  readonly push: PgPushStore;
  readonly processes: PgProcessStore;
  readonly check: PgCheckStore;
  readonly chains: PgChainStore;

  constructor(readonly db: PgDb) {
    this.meta = new PgMetaStore(db);
    this.directory = new PgDirectoryStore(db);
    this.messages = new PgMessageStore(db);
    this.delivery = new PgDeliveryStore(db);
    this.replication = new PgReplicationStore(db);
    this.nonces = new PgNonceStore(db);
    this.devices = new PgDeviceStore(db);
    this.settings = new PgSettingsStore(db);
    this.push = new PgPushStore(db);
    this.processes = new PgProcessStore(db);
    this.check = new PgCheckStore(db);
    this.chains = new PgChainStore(db);
  }

  commitStats(): { commits: number; writes: number; checkpoints: number } {
    return { commits: this.db.stats.commits, writes: this.db.stats.commits, checkpoints: 0 };
  }

  migrate(): Promise<void> {
    return migratePostgres(this.db);
  }

  async ping(): Promise<void> {
    await this.db.query('SELECT 1');
  }

  close(): Promise<void> {
    return this.db.close();
  }
}
