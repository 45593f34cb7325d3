/**
 * Several `shine serve` processes forming ONE logical server (docs/protocol.md §9.2): the same
 * SHINE_SERVER_LOGIN, server key seed and database, and (unless told otherwise) one Redis key prefix.
 * Clients connect to whichever process they like; there is no load balancer in tests.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerProcess, ServerProcessOptions } from './server-process.js';
import type { WsProxy } from './ws-proxy.js';
import { startWsProxy } from './ws-proxy.js';
import { freePort, startServerProcess } from './server-process.js';
import type { TestDb, TestDbKind } from './test-db.js';
import { freshRedisPrefix, freshTestDb, testRedisUrl } from './test-db.js';

/**
 * The database the cluster tests share between processes: PostgreSQL (the supported set-up for several
 * processes) unless SHINE_CLUSTER_DB=sqlite (one SQLite file in WAL mode, shared by the processes).
 */
export const clusterDbKind = (): TestDbKind => (process.env.SHINE_CLUSTER_DB === 'sqlite' ? 'sqlite' : 'postgres');

export interface ClusterOptions {
  processes: number;
  serverLogin?: string;
  /** Redis for fan-out (default: this machine's Redis under a fresh prefix); null runs without Redis. */
  redis?: { url: string; prefix: string } | null;
  /** Extra environment for every process. */
  env?: Record<string, string>;
  stderr?: ServerProcessOptions['stderr'];
  kind?: TestDbKind;
}

export interface Cluster {
  readonly serverLogin: string;
  readonly db: TestDb;
  readonly redis: { url: string; prefix: string } | null;
  /** The environment every process of this server gets (start more with startProcess). */
  readonly env: Record<string, string>;
  readonly processes: ServerProcess[];
  /** Starts one more process of the same server. */
  startProcess(extraEnv?: Record<string, string>): Promise<ServerProcess>;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const serverLogin = opts.serverLogin ?? 'cluster';
  const shared = mkdtempSync(join(tmpdir(), 'shine-cluster-'));
  const db = await freshTestDb(shared, opts.kind ?? clusterDbKind());
  const redis = opts.redis === undefined ? { url: testRedisUrl(), prefix: freshRedisPrefix() } : opts.redis;
  // Other servers reach the cluster through its first process's address (a load balancer in production).
  const firstPort = await freePort();
  const env: Record<string, string> = {
    SHINE_SERVER_LOGIN: serverLogin,
    SHINE_SERVER_KEY_SEED_B64: randomBytes(32).toString('base64'),
    SHINE_DB: db.url,
    SHINE_PUBLIC_WS_URL: `ws://127.0.0.1:${firstPort}/ws`,
    SHINE_DB_POOL_SIZE: '3',
    ...(redis ? { SHINE_REDIS_URL: redis.url, SHINE_REDIS_PREFIX: redis.prefix } : {}),
    ...opts.env,
  };
  const processes: ServerProcess[] = [];
  const startProcess = async (extraEnv: Record<string, string> = {}): Promise<ServerProcess> => {
    const p = await startServerProcess({
      env: { ...env, ...extraEnv },
      ...(processes.length === 0 ? { port: firstPort } : {}),
      ...(opts.stderr ? { stderr: opts.stderr } : {}),
    });
    processes.push(p);
    return p;
  };
  const close = async (): Promise<void> => {
    await Promise.all(processes.map((p) => p.close()));
    await db.drop();
    rmSync(shared, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < opts.processes; i++) await startProcess();
  } catch (err) {
    await close();
    throw err;
  }
  return { serverLogin, db, redis, env, processes, startProcess, close, [Symbol.asyncDispose]: close };
}

export interface ClusterBesideBeta {
  readonly cluster: Cluster;
  /** bob's server, one process. */
  readonly beta: ServerProcess;
  /** The relay in front of beta that the cluster's calls go through (the address in beta's descriptor). */
  readonly relay: WsProxy;
  close(): Promise<void>;
}

/**
 * A cluster (its processes with clusterEnv, log level from SHINE_TEST_LOG_LEVEL, default `error`)
 * and a server `beta` the cluster reaches through a WebSocket relay, so a test can count or hold what
 * the cluster's processes send to beta.
 */
export async function startClusterBesideBeta(opts: {
  processes: number;
  clusterEnv: Record<string, string>;
}): Promise<ClusterBesideBeta> {
  const betaPort = await freePort();
  const relay = await startWsProxy(`ws://127.0.0.1:${betaPort}/ws`);
  const logLevel = process.env.SHINE_TEST_LOG_LEVEL ?? 'error';
  let cluster: Cluster | undefined;
  let beta: ServerProcess | undefined;
  const close = async (): Promise<void> => {
    await beta?.close();
    await cluster?.close();
    await relay.close();
  };
  try {
    cluster = await startCluster({
      processes: opts.processes,
      env: { SHINE_LOG_LEVEL: logLevel, SHINE_PEERS: `beta=ws://127.0.0.1:${betaPort}/ws`, ...opts.clusterEnv },
    });
    beta = await startServerProcess({
      port: betaPort,
      env: {
        SHINE_LOG_LEVEL: logLevel,
        SHINE_SERVER_LOGIN: 'beta',
        SHINE_PUBLIC_WS_URL: relay.wsUrl,
        SHINE_PEERS: `cluster=${cluster.env.SHINE_PUBLIC_WS_URL}`,
      },
    });
  } catch (err) {
    await close();
    throw err;
  }
  return { cluster, beta, relay, close };
}
