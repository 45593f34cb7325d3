/** The machine a bench ran on, as every bench's JSON line states it. */
import os from 'node:os';

export function machine(): { cpu: string; cores: number; node: string; platform: string } {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
  };
}
