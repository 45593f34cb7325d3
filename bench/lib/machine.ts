/** The machine a bench ran on, as every bench's JSON line states it. */
import os from 'node:os';
import { resolveConfig } from '../../src/server/config/config.js';

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
export function sqliteWriter(): 'thread' | 'inline' {
  return resolveConfig({ sqliteWriter: process.env.SHINE_SQLITE_WRITER || undefined }).sqliteWriter;
}
