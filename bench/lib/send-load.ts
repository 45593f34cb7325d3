/**
 * The SendMessagePair load both send benches drive: CLIENTS senders (each with its own recipient on the
 * same server), spread round-robin over one or more processes of one server, WINDOW requests in flight
 * per client. Pairs are signed and sealed before the clock starts: that is the clients' work.
 */
import WebSocket from 'ws';
import { makeProfile, createIdentity } from '../../src/client/identity.js';
import { ShineClient } from '../../src/client/client.js';
import type { BuiltPair } from '../../src/client/pairs.js';
import { buildTextPairs, perClient } from './build-pairs.js';

export interface SendLoadOptions {
  /** WebSocket URLs of the processes of one server; client i connects to wsUrls[i % length]. */
  wsUrls: string[];
  clients: number;
  pairsPerClient: number;
  window: number;
  /**
   * Pairs per client sent before the clock starts and not counted (0 by default): the server's code is then
   * compiled and its caches warm, so the figure is its steady rate rather than one that includes its first
   * seconds (docs/performance.md, twenty-eighth session).
   */
  warmupPerClient?: number;
  /** Called with the clock started and stopped, e.g. to read the servers' CPU time around the run. */
  onStart?: () => void;
}

export interface SendLoadResult {
  pairs: number;
  seconds: number;
  pairsPerSec: number;
  latencyMsP50: number;
  latencyMsP99: number;
}

/** Rate limits a load generator must lift: the per-connection limit (200/s) would measure itself. */
export const UNLIMITED_RATE = { rateLimit: { perSecond: 1_000_000, burst: 1_000_000 } };

/**
 * A load's requests: each client's `perClient` items in order, `window` of them in flight per client at a
 * time (fn gets the client's index and the item's).
 */
export async function inLanes(
  clients: number,
  perClient: number,
  window: number,
  fn: (client: number, item: number) => Promise<unknown>,
): Promise<void> {
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < perClient) await fn(i, next++);
      };
      await Promise.all(Array.from({ length: window }, lane));
    }),
  );
}

export async function runSendLoad(opts: SendLoadOptions): Promise<SendLoadResult> {
  const { clients: n, pairsPerClient, window, wsUrls } = opts;
  const warmup = opts.warmupPerClient ?? 0;
  const senders = Array.from({ length: n }, (_, i) => createIdentity(`alice${i}`));
  const recipients = Array.from({ length: n }, (_, i) => createIdentity(`bob${i}`));
  // Built before the clients connect: a client busy for longer than two heartbeats would miss the
  // server's pings and be dropped.
  const base = Date.now();
  const each = warmup + pairsPerClient;
  const built = await buildTextPairs(
    senders,
    recipients,
    senders.flatMap((s, i) =>
      Array.from({ length: each }, (_, k) => ({
        from: i,
        to: i,
        text: `message ${k} from ${s.login}`,
        timeMs: base + k,
      })),
    ),
  );
  const pairs = perClient(built, n, each);
  const clients: ShineClient[] = [];
  for (let i = 0; i < n; i++) {
    const c = await ShineClient.connect(wsUrls[i % wsUrls.length]!, { WebSocket: WebSocket as never });
    await c.register(makeProfile(senders[i]!, ['local'], 1, Date.now()));
    await c.register(makeProfile(recipients[i]!, ['local'], 1, Date.now()));
    await c.login(senders[i]!, 'bench');
    clients.push(c);
  }
  const send = (c: ShineClient, p: BuiltPair): Promise<unknown> =>
    c.call('SendMessagePair', { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 });
  await inLanes(n, warmup, window, (i, k) => send(clients[i]!, pairs[i]![k]!));
  opts.onStart?.();
  const latencies: number[] = [];
  const t0 = performance.now();
  await inLanes(n, pairsPerClient, window, async (i, k) => {
    const p = pairs[i]![warmup + k]!;
    const s = performance.now();
    await send(clients[i]!, p);
    latencies.push(performance.now() - s);
  });
  const seconds = (performance.now() - t0) / 1000;
  await Promise.all(clients.map((c) => c.close()));
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number =>
    Number(latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]!.toFixed(2));
  const total = n * pairsPerClient;
  return {
    pairs: total,
    seconds: Number(seconds.toFixed(2)),
    pairsPerSec: Math.round(total / seconds),
    latencyMsP50: pct(0.5),
    latencyMsP99: pct(0.99),
  };
}
