/** The processes area on SQLite: heartbeat rows; one process per database, so every lock is free. */
import type { ProcessRecord, ProcessStore } from '../types.js';
import { SqliteArea } from './db.js';

export class SqliteProcessStore extends SqliteArea implements ProcessStore {
  heartbeat(r: ProcessRecord): Promise<void> {
    return this.db.write(() => {
      this.db.conn
        .prepare(
          `INSERT INTO server_processes (process_id, started_at_ms, heartbeat_at_ms, redis) VALUES (?, ?, ?, ?)
           ON CONFLICT (process_id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms, redis = excluded.redis`,
        )
        .run(r.processId, r.startedAtMs, r.heartbeatAtMs, r.redis ? 1 : 0);
    });
  }

  async liveProcesses(sinceMs: number): Promise<ProcessRecord[]> {
    const rows = this.db.conn
      .prepare(
        'SELECT process_id, started_at_ms, heartbeat_at_ms, redis FROM server_processes WHERE heartbeat_at_ms >= ? ORDER BY process_id',
      )
      .all(sinceMs) as { process_id: string; started_at_ms: number; heartbeat_at_ms: number; redis: number }[];
    return rows.map((r) => ({
      processId: r.process_id,
      startedAtMs: r.started_at_ms,
      heartbeatAtMs: r.heartbeat_at_ms,
      redis: r.redis === 1,
    }));
  }

  removeProcess(processId: string): Promise<void> {
    return this.db.write(() => {
      this.db.conn.prepare('DELETE FROM server_processes WHERE process_id = ?').run(processId);
    });
  }

  async exclusively(_name: string, fn: () => Promise<void>): Promise<boolean> {
    await fn();
    return true;
  }
}
