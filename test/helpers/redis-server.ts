/**
 * A Redis of the test's own on a free loopback port, which the test may stop and start again at the
 * same port (tests of losing Redis). Nothing is saved to disk. The machine's shared Redis is never
 * stopped by a test.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { Redis } from 'ioredis';
import { freePort } from './server-process.js';

export interface RedisServer extends AsyncDisposable {
  readonly port: number;
  /** `redis://127.0.0.1:PORT` */
  readonly url: string;
  readonly running: boolean;
  /** Kills it (SIGKILL by default: a crash, no goodbye to the clients) and waits for it to exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts it again at the same port, empty, and waits until it answers PING. */
  start(): Promise<void>;
  /** Freezes it (SIGSTOP): connections stay open, nothing is answered. */
  pause(): void;
  /** Lets a paused server go on (SIGCONT). */
  resume(): void;
  close(): Promise<void>;
}

export async function startRedisServer(): Promise<RedisServer> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;

  const start = async (): Promise<void> => {
    const proc = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    child = proc;
    await new Promise<void>((resolve, reject) => {
      proc.once('spawn', () => resolve());
      proc.once('error', reject);
    });
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`redis-server exited with ${proc.exitCode}`);
      const probe = new Redis(url, { lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
      probe.on('error', () => {});
      try {
        await probe.connect();
        if ((await probe.ping()) === 'PONG') return;
      } catch {
        // not listening yet
      } finally {
        probe.disconnect();
      }
      if (Date.now() > deadline) throw new Error('redis-server did not start');
      await new Promise((r) => setTimeout(r, 20));
    }
  };

  const stop = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    const proc = child;
    child = null;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill(signal);
    await exited;
  };

  await start();
  return {
    port,
    url,
    get running() {
      return child !== null;
    },
    stop,
    start,
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    close: () => stop(),
    [Symbol.asyncDispose]: () => stop(),
  };
}
