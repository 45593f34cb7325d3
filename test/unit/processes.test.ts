/**
 * Heartbeat rows and the start-up refusal (src/server/cluster/processes.ts) on a real SQLite file and a
 * hand-moved clock. The refusal is a PostgreSQL rule; these tests present the SQLite processes area as
 * PostgreSQL's, so the rule runs against real rows (the cluster tests run it on PostgreSQL itself).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ManualClock } from '../../src/server/clock.js';
import { ProcessRegistry, RefusedToStart } from '../../src/server/cluster/processes.js';
import { silentLogger } from '../../src/server/log.js';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
import { waitUntil } from '../helpers/wait.js';

const INTERVAL = 1_000;

describe('ProcessRegistry', () => {
  let dir: string;
  let sqlite: SqliteStore;
  let clock: ManualClock;
  const asPostgres = () => ({ dialect: 'postgres' as const, processes: sqlite.processes });
  const registry = (opts: {
    redis: boolean;
    port: number;
    pid?: number;
    dialect?: 'sqlite' | 'postgres';
    /** A killed process: its own clock, never advanced, so it never beats again. */
    frozen?: boolean;
  }) =>
    new ProcessRegistry({
      store: opts.dialect === 'sqlite' ? sqlite : asPostgres(),
      clock: opts.frozen ? new ManualClock(clock.now()) : clock,
      log: silentLogger,
      intervalMs: INTERVAL,
      redis: opts.redis,
      port: opts.port,
      pid: opts.pid ?? opts.port,
      host: 'box',
    });
  const liveIds = async () =>
    (await sqlite.processes.liveProcesses(clock.now() - 3 * INTERVAL)).map((r) => r.processId);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'shine-processes-'));
    sqlite = openSqliteStore({ path: join(dir, 'db.sqlite'), sync: 'full' });
    await sqlite.migrate();
  });
  after(async () => {
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps a heartbeat row fresh while running and removes it on close', async () => {
    clock = new ManualClock();
    const p = registry({ redis: true, port: 1 });
    assert.match(p.processId, /^box:1:1:[0-9a-f]{8}$/);
    await p.start();
    assert.deepEqual(await liveIds(), [p.processId]);
    for (let i = 0; i < 5; i++) {
      clock.advance(INTERVAL);
      // The beat is written in the background: wait for the row to show the new time.
      const at = clock.now();
      await waitUntil(async () => (await sqlite.processes.liveProcesses(at)).length === 1, 5_000, 'heartbeat written');
    }
    assert.deepEqual(await liveIds(), [p.processId], 'live after five intervals');
    await p.close();
    assert.deepEqual(await liveIds(), []);
  });

  it('on PostgreSQL: without Redis it refuses beside a live process, and with Redis beside one without', async () => {
    clock = new ManualClock();
    const first = registry({ redis: false, port: 2 });
    await first.start();
    await assert.rejects(registry({ redis: false, port: 3 }).start(), (err: Error) => {
      assert.ok(err instanceof RefusedToStart);
      assert.match(err.message, /^refusing to start: another process of this server is live .*SHINE_REDIS_URL/);
      assert.ok(err.message.includes(first.processId), 'names the live process');
      return true;
    });
    await assert.rejects(
      registry({ redis: true, port: 4 }).start(),
      /^RefusedToStart: refusing to start: a process of this server without SHINE_REDIS_URL is live/,
    );
    assert.deepEqual(await liveIds(), [first.processId], 'a refused process leaves no row');
    await first.close();

    const withRedis = registry({ redis: true, port: 5 });
    await withRedis.start();
    const second = registry({ redis: true, port: 6 });
    await second.start();
    await assert.rejects(registry({ redis: false, port: 7 }).start(), RefusedToStart);
    assert.equal((await withRedis.list()).length, 2);
    assert.deepEqual(
      (await second.list()).map((v) => v.self),
      [false, true],
      'list marks the asking process',
    );
    await Promise.all([withRedis.close(), second.close()]);
  });

  it('ignores a stale row, and a row left at its own host and port by a killed process', async () => {
    clock = new ManualClock();
    const killed = registry({ redis: false, port: 8, pid: 100, frozen: true });
    await killed.start(); // never closed: its row stays, as after SIGKILL
    // Same host and port, new pid: the port is ours now, so that process is gone.
    const successor = registry({ redis: false, port: 8, pid: 101 });
    await successor.start();
    assert.deepEqual(await liveIds(), [successor.processId], 'the dead process row is removed');
    // A process elsewhere, killed: its row refuses others until it is 3 intervals old.
    await successor.close();
    const elsewhere = registry({ redis: false, port: 9, frozen: true });
    await elsewhere.start();
    await assert.rejects(registry({ redis: false, port: 10 }).start(), RefusedToStart);
    clock.advance(3 * INTERVAL + 1);
    const later = registry({ redis: false, port: 10 });
    await later.start();
    await later.close();
  });

  it('on SQLite the rule does not apply (one database file, one server)', async () => {
    clock = new ManualClock();
    const a = registry({ redis: false, port: 11, dialect: 'sqlite' });
    const b = registry({ redis: true, port: 12, dialect: 'sqlite' });
    await a.start();
    await b.start();
    await Promise.all([a.close(), b.close()]);
  });
});
