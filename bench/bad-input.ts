/**
 * Bad requests beside good ones (docs/protocol.md §5: a bad request is answered with its error code, changes
 * nothing and does not disturb other sessions): what a flood of malformed requests costs the clients that send
 * valid ones, on one server.
 *
 * One `shine serve` (SQLite, WAL + synchronous FULL). The per-connection rate limit is lifted (UNLIMITED_RATE),
 * so what is measured is the server's own handling of bad requests, not the limiter that normally stops a
 * flooding socket at 200 requests/s. HONEST clients send valid SendMessagePair to local recipients at RATE pairs/s
 * in total, open loop, for SECONDS: first alone, then beside FLOODERS clients that each keep WINDOW
 * SendMessagePair requests with a malformed payload (blobs that are not strings: BAD_FIELDS) in flight. Prints, for
 * each phase, the valid answers' p50/p99/max, the bad answers a second, the server's CPU and its main thread's GC
 * pauses (young generation and full).
 *
 * Env: BENCH_HONEST (4), BENCH_RATE (200), BENCH_SECONDS (10), BENCH_FLOODERS (4), BENCH_WINDOW (8).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ShineClient } from '../src/client/client.js';
import { ShineClientError } from '../src/client/client.js';
import { createIdentity } from '../src/client/identity.js';
import type { BuiltPair } from '../src/client/pairs.js';
import { textPair } from '../src/client/pairs.js';
import { connectIdentity, profileOf } from '../test/helpers/federated-processes.js';
import { startServerProcess } from '../test/helpers/server-process.js';
import type { ServerProcess } from '../test/helpers/server-process.js';
import { gcBetween, gcPausesIn, scrape } from './lib/federated-load.js';
import type { GcPauses } from './lib/federated-load.js';
import { machine, sqliteWriter } from './lib/machine.js';
import { ascending, pct } from './lib/percentile.js';
import { UNLIMITED_RATE } from './lib/send-load.js';

const HONEST = Number(process.env.BENCH_HONEST ?? 4);
const RATE = Number(process.env.BENCH_RATE ?? 200);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const FLOODERS = Number(process.env.BENCH_FLOODERS ?? 4);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 8);

interface Phase {
  honestPairs: number;
  answerMsP50: number;
  answerMsP99: number;
  answerMsMax: number;
  honestErrors: Record<string, number>;
  badAnswersPerSec: number;
  badErrors: Record<string, number>;
  serverCpuPercentOfOneCore: number;
  gcPauses: GcPauses;
}

const count = (into: Record<string, number>, err: unknown): void => {
  const code = err instanceof ShineClientError ? err.code : String(err);
  into[code] = (into[code] ?? 0) + 1;
};

/** One phase: the honest load at RATE for SECONDS, with `flooders` sending bad requests meanwhile. */
async function phase(
  server: ServerProcess,
  honest: ShineClient[],
  pairs: BuiltPair[],
  flooders: ShineClient[],
): Promise<Phase> {
  const honestErrors: Record<string, number> = {};
  const badErrors: Record<string, number> = {};
  let bad = 0;
  let stop = false;
  const flood = flooders.flatMap((c) =>
    Array.from({ length: WINDOW }, async () => {
      while (!stop) {
        try {
          await c.call('SendMessagePair', { incomingBlobB64: 1, outgoingBlobB64: 1 });
          badErrors.accepted = (badErrors.accepted ?? 0) + 1;
        } catch (err) {
          if (err instanceof ShineClientError && err.code === 'BAD_FIELDS') bad++;
          else count(badErrors, err);
        }
      }
    }),
  );
  const gc0 = gcPausesIn(await scrape(server));
  const cpu0 = server.cpuMs();
  const bad0 = bad;
  const latencies: number[] = [];
  const sent: Promise<void>[] = [];
  const t0 = performance.now();
  for (let n = 0; n < pairs.length; n++) {
    const wait = t0 + (n * 1000) / RATE - performance.now();
    if (wait > 1) await sleep(wait);
    const p = pairs[n]!;
    const started = performance.now();
    sent.push(
      honest[n % honest.length]!.call('SendMessagePair', {
        incomingBlobB64: p.incomingBlobB64,
        outgoingBlobB64: p.outgoingBlobB64,
      }).then(
        () => void latencies.push(performance.now() - started),
        (err: unknown) => count(honestErrors, err),
      ),
    );
  }
  await Promise.all(sent);
  const ms = performance.now() - t0;
  const badAnswered = bad - bad0;
  const cpuMs = server.cpuMs() - cpu0;
  const gc = gcBetween(gc0, gcPausesIn(await scrape(server)));
  stop = true;
  await Promise.all(flood);
  const sorted = ascending(latencies);
  return {
    honestPairs: latencies.length,
    answerMsP50: pct(sorted, 0.5),
    answerMsP99: pct(sorted, 0.99),
    answerMsMax: Number((sorted.at(-1) ?? 0).toFixed(1)),
    honestErrors,
    badAnswersPerSec: Math.round(badAnswered / (ms / 1000)),
    badErrors,
    serverCpuPercentOfOneCore: Math.round((cpuMs / ms) * 100),
    gcPauses: gc,
  };
}

const configFile = join(mkdtempSync(join(tmpdir(), 'shine-bench-cfg-')), 'config.json');
writeFileSync(configFile, JSON.stringify(UNLIMITED_RATE));
await using server = await startServerProcess({
  env: { SHINE_SQLITE_SYNC: 'full', SHINE_LOG_LEVEL: 'warn', SHINE_CONFIG_FILE: configFile },
});
const senders = Array.from({ length: HONEST }, (_, i) => createIdentity(`alice${i}`));
const recipients = Array.from({ length: HONEST }, (_, i) => createIdentity(`bob${i}`));
const base = Date.now();
// Signed and sealed before the clients connect (building many pairs blocks this process for a while).
const build = (from: number, n: number): BuiltPair[] =>
  Array.from({ length: n }, (_, k) =>
    textPair(
      senders[(from + k) % HONEST]!,
      { login: recipients[(from + k) % HONEST]!.login, encKey: recipients[(from + k) % HONEST]!.encPublicKey },
      `message ${from + k}`,
      { timeMs: base + from + k },
    ),
  );
const perPhase = RATE * SECONDS;
const alonePairs = build(0, perPhase);
const floodedPairs = build(perPhase, perPhase);
const honest: ShineClient[] = [];
for (let i = 0; i < HONEST; i++) {
  const c = await connectIdentity(server.wsUrl, senders[i]!, ['local'], 'bench');
  await c.register(profileOf(recipients[i]!, ['local']));
  honest.push(c);
}
const flooders: ShineClient[] = [];
for (let i = 0; i < FLOODERS; i++)
  flooders.push(await connectIdentity(server.wsUrl, createIdentity(`mallory${i}`), ['local'], 'bench'));
const alone = await phase(server, honest, alonePairs, []);
const flooded = await phase(server, honest, floodedPairs, flooders);
await Promise.all([...honest, ...flooders].map((c) => c.close()));
console.log(
  JSON.stringify({
    bench: 'bad-input',
    date: new Date().toISOString(),
    machine: machine(),
    durability: 'WAL+synchronous=FULL',
    sqliteWriter: sqliteWriter(),
    setup: `one server, per-connection rate limit lifted; ${HONEST} clients send valid pairs at ${RATE}/s in total for ${SECONDS} s, alone and beside ${FLOODERS} clients each keeping ${WINDOW} malformed SendMessagePair requests (BAD_FIELDS) in flight; client and server share the cores`,
    alone,
    flooded,
  }),
);
