/** The processes area on PostgreSQL: heartbeat rows, and work one process at a time (advisory locks). */
import type { ProcessRecord, ProcessStore } from '../types.js';
import type { PgDb } from './db.js';
import { lockKey } from './db.js';

export class PgProcessStore implements ProcessStore {
  constructor(private readonly db: PgDb) {}

  async heartbeat(r: ProcessRecord): Promise<void> {
    await this.db.query(
      `INSERT INTO server_processes (process_id, started_at_ms, heartbeat_at_ms, redis) VALUES ($1, $2, $3, $4)
       ON CONFLICT (process_id) DO UPDATE SET heartbeat_at_ms = excluded.heartbeat_at_ms, redis = excluded.redis`,
      [r.processId, r.startedAtMs, r.heartbeatAtMs, r.redis],
    );
  }

  async liveProcesses(sinceMs: number): Promise<ProcessRecord[]> {
    const r = await this.db.query<{
      process_id: string;
      started_at_ms: number;
      heartbeat_at_ms: number;
      redis: boolean;
    }>(
      `SELECT process_id, started_at_ms, heartbeat_at_ms, redis FROM server_processes WHERE heartbeat_at_ms >= $1
       ORDER BY process_id`,
      [sinceMs],
    );
    return r.rows.map((row) => ({
      processId: row.process_id,
      startedAtMs: row.started_at_ms,
      heartbeatAtMs: row.heartbeat_at_ms,
      redis: row.redis,
    }));
  }

  async removeProcess(processId: string): Promise<void> {
    await this.db.query('DELETE FROM server_processes WHERE process_id = $1', [processId]);
  }

  /**
   * A session advisory lock on a connection of its own, outside the pool: fn uses the pool meanwhile,
   * and a pool of one connection must not wait on itself. If that connection dies, PostgreSQL releases
   * the lock; the process holding it dies with it in every case that matters (SIGKILL, lost host).
   */
  async exclusively(name: string, fn: () => Promise<void>): Promise<boolean> {
    const client = await this.db.dedicatedClient();
    try {
      const key = lockKey(`shine:exclusively:${name}`);
      const r = await client.query<{ locked: boolean }>(`SELECT pg_try_advisory_lock(${key}) AS locked`);
      if (!r.rows[0]?.locked) return false;
      try {
        await fn();
      } finally {
        await client.query(`SELECT pg_advisory_unlock(${key})`).catch(() => {});
      }
      return true;
    } finally {
      await client.end().catch(() => {});
    }
  }
}
