/**
 * Boots real servers in-process on free loopback ports with temporary data directories, for
 * integration tests: `await using net = await startNetwork({servers: [{serverLogin: 'alpha'}]})`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunningServer } from '../../src/server/app.js';
import { startServer } from '../../src/server/app.js';
import type { Clock } from '../../src/server/clock.js';
import type { ConfigInput } from '../../src/server/config/config.js';
import type { Logger } from '../../src/server/log.js';

export interface NetworkServerSpec extends ConfigInput {
  /** Overrides the network's clock for this server. */
  clock?: Clock;
  log?: Logger;
}

export interface NetworkOptions {
  servers: NetworkServerSpec[];
  /** Shared by every server that does not bring its own. */
  clock?: Clock;
}

export interface TestNetwork extends AsyncDisposable {
  readonly servers: RunningServer[];
  /** Stops every server and removes their data directories. */
  close(): Promise<void>;
}

/**
 * Starts the servers in order. Defaults: serverLogin `server<N>` (1-based), host 127.0.0.1, port 0,
 * a fresh dataDir under the OS temp dir, log level from SHINE_TEST_LOG_LEVEL (else silent).
 */
export async function startNetwork(opts: NetworkOptions): Promise<TestNetwork> {
  const servers: RunningServer[] = [];
  const dirs: string[] = [];
  let closing: Promise<void> | null = null;
  const close = () =>
    (closing ??= (async () => {
      for (const s of [...servers].reverse()) await s.close();
      await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
    })());

  try {
    for (const [i, spec] of opts.servers.entries()) {
      const { clock = opts.clock, log, ...input } = spec;
      const dataDir = await mkdtemp(join(tmpdir(), 'shine-test-'));
      dirs.push(dataDir);
      const server = await startServer(
        {
          serverLogin: `server${i + 1}`,
          host: '127.0.0.1',
          port: 0,
          dataDir,
          logLevel: process.env.SHINE_TEST_LOG_LEVEL ?? 'silent',
          ...input,
        },
        { clock, log },
      );
      servers.push(server);
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { servers, close, [Symbol.asyncDispose]: close };
}
