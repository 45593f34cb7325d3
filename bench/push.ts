/**
 * WebPush throughput: how many pushes per second the send queue hands to a push endpoint, each one
 * encrypted (RFC 8291 aes128gcm, a fresh ECDH key per push) and signed (VAPID) by web-push, its answer
 * written to the subscription's health. Prints one JSON line, with the library's encryption rate alone
 * measured in the same run as the limit to compare against.
 *
 * A real server runs in this process; the push endpoint is a plain HTTP server on loopback in a child
 * process (so its CPU is not counted as the server's). Users subscribe through UpsertPushToken and log
 * out; the pushes are then queued through the push service directly (the queue, not SendMessagePair, is
 * measured).
 *
 * Env: BENCH_OWNERS (50), BENCH_SUBS (subscriptions per owner, 2), BENCH_MESSAGES (per owner, 50),
 * BENCH_CONCURRENCY (requests in flight, the default 16), BENCH_SYNC (full | normal).
 */
import { machine } from './lib/machine.js';
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import webpush from 'web-push';
import { startServer } from '../src/server/app.js';
import { makeSubscriptionKeys } from '../test/helpers/push-endpoint.js';
import { LOOPBACK_LIMITS } from '../test/helpers/server-process.js';
import { connectUser, makeUser } from '../test/helpers/users.js';

const OWNERS = Number(process.env.BENCH_OWNERS ?? 50);
const SUBS = Number(process.env.BENCH_SUBS ?? 2);
const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 50);
const CONCURRENCY = process.env.BENCH_CONCURRENCY;
const SYNC = process.env.BENCH_SYNC === 'normal' ? 'normal' : 'full';

if (process.argv[2] === 'endpoint') {
  // The child: answers every push 201 after reading its body, and reports its port.
  const { createServer } = await import('node:http');
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(201);
      res.end();
    });
  });
  server.listen(0, '127.0.0.1', () => process.send!((server.address() as { port: number }).port));
} else {
  await main();
}

async function main(): Promise<void> {
  const child = fork(new URL(import.meta.url).pathname, ['endpoint'], { execArgv: ['--import', 'tsx'] });
  const port = await new Promise<number>((resolve) => child.once('message', (m) => resolve(m as number)));
  const dataDir = mkdtempSync(join(tmpdir(), 'shine-bench-push-'));
  try {
    const server = await startServer({
      ...LOOPBACK_LIMITS,
      serverLogin: 'alpha',
      port: 0,
      dataDir,
      logLevel: 'warn',
      webPushAllowInsecure: '1',
      sqliteSync: SYNC,
      pushQueueSize: OWNERS * SUBS * MESSAGES,
      ...(CONCURRENCY ? { pushConcurrency: CONCURRENCY } : {}),
      rateLimit: { perSecond: 1_000_000, burst: 1_000_000 },
    });
    try {
      const owners = Array.from({ length: OWNERS }, (_, i) => makeUser(`owner${i}`, ['alpha']));
      for (const owner of owners) {
        const c = await connectUser(server.wsUrl, owner, 'setup');
        for (let s = 0; s < SUBS; s++) {
          const keys = makeSubscriptionKeys();
          await c.call('UpsertPushToken', {
            endpoint: `http://127.0.0.1:${port}/${owner.login}/${s}`,
            deviceId: `device${s}`,
            p256dhB64: keys.p256dhB64,
            authB64: keys.authB64,
          });
        }
        await c.close();
      }
      const { push, hub } = server.ctx;
      while (hub.size > 0) await new Promise((r) => setImmediate(r));

      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      let queued = 0;
      for (let m = 0; m < MESSAGES; m++) {
        const counts = await Promise.all(
          owners.map((o) =>
            push.notifyMessage({
              owner: o.login,
              fromLogin: 'sender',
              messageKey: `sender|${o.login}|${1_774_700_000_000 + m}|1|1`,
              messageType: 1,
            }),
          ),
        );
        queued += counts.reduce((a, b) => a + b, 0);
      }
      await push.idle();
      const seconds = (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      const metrics = await server.ctx.metrics.render();
      const sent = Number(/^shine_push_sent_total (\d+)$/m.exec(metrics)?.[1] ?? 0);

      console.log(
        JSON.stringify({
          bench: 'webpush-queue',
          date: new Date().toISOString(),
          machine: machine(),
          durability: `WAL+synchronous=${SYNC.toUpperCase()} (health written per answer)`,
          subscriptions: OWNERS * SUBS,
          pushes: queued,
          sent,
          concurrency: server.config.pushConcurrency,
          pushesPerSec: Math.round(sent / seconds),
          serverCpuPercent: Math.round(((cpu.user + cpu.system) / 1000 / (seconds * 1000)) * 100),
          libraryEncryptPerSec: encryptRate(),
        }),
      );
    } finally {
      await server.close();
    }
  } finally {
    child.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** web-push's RFC 8291 encryption alone (ECDH + HKDF + AES-GCM per call): the ceiling for the queue. */
function encryptRate(): number {
  const keys = makeSubscriptionKeys();
  const payload = JSON.stringify({ v: 1, kind: 'dm', fromLogin: 'sender', messageKey: 'sender|owner|1|1|1' });
  const n = 2000;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) webpush.encrypt(keys.p256dhB64, keys.authB64, payload, 'aes128gcm');
  return Math.round(n / ((performance.now() - t0) / 1000));
}
