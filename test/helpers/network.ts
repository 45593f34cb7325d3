/**
 * Boots real servers in-process on free loopback ports with temporary data directories, for
 * integration tests: `await using net = await startNetwork({servers: [{serverLogin: 'alpha'}]})`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunningServer, ServerDeps } from '../../src/server/app.js';
import type { CallPush } from '../../src/server/calls/service.js';
import { startServer } from '../../src/server/app.js';
import type { Clock } from '../../src/server/clock.js';
import type { ConfigInput } from '../../src/server/config/config.js';
import type { Logger } from '../../src/server/log.js';
import { LOOPBACK_LIMITS, freePort } from './server-process.js';
import type { TestDb } from './test-db.js';
import { TEST_DB_POOL_SIZE, freshTestDb } from './test-db.js';

export interface NetworkServerSpec extends ConfigInput {
  /** Overrides the network's clock for this server. */
  clock?: Clock;
  log?: Logger;
  /** The server's `call` push (docs/protocol.md §5.6), to watch which callees it would wake. */
  callPush?: CallPush;
}

export interface NetworkOptions {
  servers: NetworkServerSpec[];
  /** Shared by every server that does not bring its own. */
  clock?: Clock;
  /**
   * Federate the servers: each gets a port chosen up front and SHINE_PEERS naming all the others
   * (unless its spec sets peers), so descriptors are fetched and pinned on first use.
   */
  federate?: boolean;
}

export interface TestNetwork extends AsyncDisposable {
  /** The running servers by index; a stopped one keeps its last entry until started again. */
  readonly servers: RunningServer[];
  /** Server i's database (freshTestDb), kept across stop and start; reset() it while i is stopped to lose it. */
  readonly dbs: TestDb[];
  /** Stops server i (its port and data stay reserved for start). */
  stop(i: number): Promise<void>;
  /** Starts server i again on the same port and data directory. */
  start(i: number): Promise<RunningServer>;
  /** Stops every server, drops their databases and removes their data directories. */
  close(): Promise<void>;
}

/**
 * Starts the servers in order. Defaults: serverLogin `server<N>` (1-based), host 127.0.0.1, port 0,
 * a fresh dataDir under the OS temp dir, a fresh database from freshTestDb (SQLite in the dataDir, or
 * PostgreSQL under SHINE_TEST_DB=postgres) unless the spec names one, log level from SHINE_TEST_LOG_LEVEL
 * (else silent), and the per-address limits raised (LOOPBACK_LIMITS).
 */
export async function startNetwork(opts: NetworkOptions): Promise<TestNetwork> {
  const servers: RunningServer[] = [];
  const running = new Set<number>();
  const dirs: string[] = [];
  const dbs: TestDb[] = [];
  const inputs: { input: ConfigInput; deps: ServerDeps }[] = [];
  let closing: Promise<void> | null = null;
  const stop = async (i: number): Promise<void> => {
    if (!running.delete(i)) return;
    await servers[i]!.close();
  };
  const start = async (i: number): Promise<RunningServer> => {
    const { input, deps } = inputs[i]!;
    const server = await startServer(input, deps);
    servers[i] = server;
    running.add(i);
    // A port-0 server keeps the port it got, so a restart is reachable where it was.
    input.port = server.port;
    return server;
  };
  const close = () =>
    (closing ??= (async () => {
      for (const i of [...running].sort((a, b) => b - a)) await stop(i);
      await Promise.all([...dbs.map((db) => db.drop()), ...dirs.map((d) => rm(d, { recursive: true, force: true }))]);
    })());

  try {
    const ports = await Promise.all(opts.servers.map(() => freePort()));
    const logins = opts.servers.map((spec, i) => spec.serverLogin ?? `server${i + 1}`);
    for (const [i, spec] of opts.servers.entries()) {
      const { clock = opts.clock, log, callPush, ...rest } = spec;
      const dataDir = await mkdtemp(join(tmpdir(), 'shine-test-'));
      dirs.push(dataDir);
      const db = await freshTestDb(dataDir);
      dbs.push(db);
      const peers = opts.federate
        ? logins
            .map((login, j) => (j === i ? null : `${login}=ws://127.0.0.1:${ports[j]}/ws`))
            .filter((p) => p !== null)
            .join(',')
        : undefined;
      const input: ConfigInput = {
        serverLogin: logins[i],
        host: '127.0.0.1',
        port: ports[i] ?? 0,
        dataDir,
        db: db.url,
        dbPoolSize: TEST_DB_POOL_SIZE,
        logLevel: process.env.SHINE_TEST_LOG_LEVEL ?? 'silent',
        ...LOOPBACK_LIMITS,
        ...(peers ? { peers } : {}),
        ...rest,
      };
      inputs.push({ input, deps: { clock, log, callPush } });
      await start(i);
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { servers, dbs, stop, start, close, [Symbol.asyncDispose]: close };
}
