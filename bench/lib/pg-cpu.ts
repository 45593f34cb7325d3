/** CPU of the PostgreSQL backends serving a bench's databases (this machine's /proc shows their CPU). */
import pg from 'pg';
import { procCpuMs } from '../../test/helpers/server-process.js';

export interface BackendCpuMeter {
  /** Starts the clock: the CPU of the backends open when the meter was made is read now (synchronously). */
  mark(): void;
  /**
   * CPU the databases' backends used since mark(), in ms: those open then from their reading, those the
   * pools opened since from zero; a backend closed meanwhile (idle) is gone from /proc and counts nothing.
   */
  msSinceMark(): Promise<number>;
  /** Backends connected to the databases at the last msSinceMark(). */
  backends: number;
}

/** A meter of the backends connected to the databases at `urls` (none: a meter that reads 0). */
export async function backendCpuMeter(urls: readonly string[]): Promise<BackendCpuMeter> {
  const before = (await Promise.all(urls.map(backendPids))).flat();
  const atMark = new Map<number, number>();
  const cpuMs = (pid: number): number => {
    try {
      return procCpuMs(pid);
    } catch {
      return atMark.get(pid) ?? 0;
    }
  };
  const meter: BackendCpuMeter = {
    backends: before.length,
    mark: () => {
      for (const pid of before) atMark.set(pid, cpuMs(pid));
    },
    msSinceMark: async () => {
      const after = (await Promise.all(urls.map(backendPids))).flat();
      meter.backends = after.length;
      return after.reduce((sum, pid) => sum + cpuMs(pid) - (atMark.get(pid) ?? 0), 0);
    },
  };
  return meter;
}

/** The PostgreSQL backends connected to the database at `url` now, but this query's own. */
async function backendPids(url: string): Promise<number[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
    );
    return r.rows.map((row) => row.pid);
  } finally {
    await client.end();
  }
}
