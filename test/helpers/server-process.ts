/** Starts `shine serve` as a separate process on a loopback port (fault tests kill it; benchmarks measure it). */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ConfigInput } from '../../src/server/config/config.js';
import { cliBundle } from './cli-bundle.js';
import type { TestDb } from './test-db.js';
import { TEST_DB_POOL_SIZE, freshTestDb } from './test-db.js';

/**
 * Every test server is reached from loopback, where all clients share one address: the per-address
 * limits (docs/operations.md) are raised so that only the tests of those limits meet them.
 */
export const LOOPBACK_LIMITS: ConfigInput = { maxConnectionsPerAddress: 100_000, challengeLimit: '100000,100000' };
/** LOOPBACK_LIMITS as a server process's environment. */
export const LOOPBACK_LIMITS_ENV = {
  SHINE_MAX_CONNECTIONS_PER_ADDRESS: '100000',
  SHINE_CHALLENGE_LIMIT: '100000,100000',
};

export interface ServerProcess {
  readonly pid: number;
  readonly port: number;
  readonly dataDir: string;
  /** Its SHINE_DB: the one opts.env names, else a fresh freshTestDb kept across restarts and dropped on close. */
  readonly dbUrl: string;
  readonly httpUrl: string;
  readonly wsUrl: string;
  /** CPU time (user + system) the process has used so far. */
  cpuMs(): number;
  /** Peak resident memory (VmHWM). */
  peakRssKiB(): number;
  /** Resident memory now (VmRSS). */
  rssKiB(): number;
  /** Kills the process with the signal and waits for it to exit (SIGKILL in fault tests). */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again on the same port and data folder. */
  restart(): Promise<void>;
  /**
   * Empties its database (it must be stopped; only the database it was given): started again, it finds
   * a new one, as a server that lost its disk. Its key stays if SHINE_SERVER_KEY_SEED_B64 names it.
   */
  resetDb(): Promise<void>;
  /** Stops it, drops the database it was given (not one opts.env named) and removes its data folder. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A free loopback port below the kernel's ephemeral range (32768 and up on Linux). Port 0 would give an
 * ephemeral one, and between this probe and the server's own listen (or while a test has the server
 * stopped) the kernel may hand that port out as the source port of some outgoing connection, and the
 * server would fail with EADDRINUSE.
 *
 * Test files run two at a time, and one file's probe cannot see a port another file has picked but not
 * yet bound (or has stopped its server on, to start it again). Under scripts/test.mjs (SHINE_TEST_RUN set)
 * a port is therefore claimed for the whole run first: a file made with O_EXCL in a folder of the run's,
 * which test.mjs removes at the end. A claimed port is never handed out twice in one run.
 */
export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 50; tries++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (claimForRun(port) && (await canListen(port))) return port;
  }
  throw new Error('no free loopback port found below the ephemeral range');
}

function claimForRun(port: number): boolean {
  const run = process.env.SHINE_TEST_RUN;
  if (!run) return true;
  // scripts/test.mjs removes this folder when the run ends; the name is spelled the same there.
  const dir = join(tmpdir(), `shine-test-ports-${run}`);
  mkdirSync(dir, { recursive: true });
  try {
    closeSync(openSync(join(dir, String(port)), 'wx'));
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

/** CPU time (user + system) a process has used so far, in ms (Linux). */
export function procCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of /proc/PID/stat, in clock ticks (100 per second here).
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

/** A memory field of /proc/PID/status, in KiB. */
function statusKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

export interface ServerProcessOptions {
  env?: Record<string, string>;
  port?: number;
  /** Where stderr goes; inherited by default. */
  stderr?: 'inherit' | 'ignore';
  /** Node.js flags for this process, after SHINE_SERVER_NODE_ARGS (e.g. `--inspect=127.0.0.1:PORT`). */
  nodeArgs?: string[];
  /** Runs once the database exists and before the first launch, e.g. to write rows as if stored earlier. */
  beforeStart?: (dbUrl: string) => Promise<void>;
}

/**
 * Node.js flags for every server process: those of the installed `shine` (the first line of bin/shine.js),
 * so that servers run here as `shine serve` runs them, then SHINE_SERVER_NODE_ARGS (space-separated; a
 * later V8 flag wins), e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile the servers a benchmark starts.
 */
const nodeArgs = [
  ...readFileSync(new URL('../../bin/shine.js', import.meta.url), 'utf8')
    .split('\n')[0]!
    .split(' ')
    .filter((word) => word.startsWith('--')),
  ...(process.env.SHINE_SERVER_NODE_ARGS ?? '').split(' ').filter(Boolean),
];

/**
 * Where a server's stdout goes: nowhere, or with SHINE_SERVER_STDOUT_DIR set, a file `server-PORT.log` in that
 * folder, e.g. for what V8 prints with `SHINE_SERVER_NODE_ARGS=--trace-gc-nvp` (docs/performance.md).
 */
function stdoutTo(port: number): 'ignore' | number {
  const dir = process.env.SHINE_SERVER_STDOUT_DIR;
  if (!dir) return 'ignore';
  mkdirSync(dir, { recursive: true });
  return openSync(join(dir, `server-${port}.log`), 'a');
}

export async function startServerProcess(opts: ServerProcessOptions = {}): Promise<ServerProcess> {
  const port = opts.port ?? (await freePort());
  const dataDir = mkdtempSync(join(tmpdir(), 'shine-proc-'));
  let db: TestDb | null = null;
  if (opts.env?.SHINE_DB === undefined) {
    try {
      db = await freshTestDb(dataDir);
    } catch (err) {
      rmSync(dataDir, { recursive: true, force: true });
      throw err;
    }
  }
  const dbEnv: Record<string, string> = db ? { SHINE_DB: db.url, SHINE_DB_POOL_SIZE: String(TEST_DB_POOL_SIZE) } : {};
  const dbUrl = db?.url ?? opts.env!.SHINE_DB!;
  const httpUrl = `http://127.0.0.1:${port}`;
  let child: ChildProcess;

  const launch = async (): Promise<void> => {
    const bundle = await cliBundle();
    const stdout = stdoutTo(port);
    child = spawn(process.execPath, [...nodeArgs, ...(opts.nodeArgs ?? []), bundle, 'serve'], {
      env: {
        ...process.env,
        SHINE_HOST: '127.0.0.1',
        SHINE_PORT: String(port),
        SHINE_DATA_DIR: dataDir,
        ...LOOPBACK_LIMITS_ENV,
        ...dbEnv,
        ...opts.env,
      },
      stdio: ['ignore', stdout, opts.stderr ?? 'inherit'],
    });
    if (typeof stdout === 'number') closeSync(stdout);
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}`);
      try {
        if ((await fetch(`${httpUrl}/healthz`)).ok) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error('server did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  const kill = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<void> => {
    // Not launched (beforeStart failed), or already gone.
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(signal);
    await exited;
  };
  const close = async (): Promise<void> => {
    await kill('SIGTERM');
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    await opts.beforeStart?.(dbUrl);
    await launch();
  } catch (err) {
    await close();
    throw err;
  }
  return {
    get pid() {
      return child.pid!;
    },
    port,
    dataDir,
    dbUrl,
    httpUrl,
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    cpuMs: () => procCpuMs(child.pid!),
    peakRssKiB: () => statusKiB(child.pid!, 'VmHWM'),
    rssKiB: () => statusKiB(child.pid!, 'VmRSS'),
    kill,
    restart: launch,
    resetDb: async () => {
      if (child.exitCode === null && child.signalCode === null) throw new Error('resetDb of a running server');
      if (!db) throw new Error('resetDb of a database the test named itself (opts.env.SHINE_DB)');
      await db.reset();
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A SHINE_CONFIG_FILE holding settings (those without an environment variable), in a fresh temporary folder. */
export function configFileWith(settings: ConfigInput): string {
  const file = join(mkdtempSync(join(tmpdir(), 'shine-config-')), 'config.json');
  writeFileSync(file, JSON.stringify(settings));
  return file;
}
