/** The Store contract on SQLite: a fresh database file per test (SQLite-only behaviour: sqlite-store.test.ts). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
import { storeContract } from '../helpers/store-contract.js';

const dir = mkdtempSync(join(tmpdir(), 'shine-contract-'));
const opened: SqliteStore[] = [];
after(async () => {
  await Promise.all(opened.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

storeContract({
  dialect: 'sqlite',
  async open() {
    const store = openSqliteStore({ path: join(dir, `db${opened.length}.sqlite`), sync: 'normal' });
    opened.push(store);
    await store.migrate();
    return store;
  },
});
