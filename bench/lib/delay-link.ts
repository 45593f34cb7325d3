/**
 * A TCP relay on loopback that holds every chunk for a fixed time before passing it on, each way, in order: a link
 * between two servers with a round trip of 2 × oneWayMs (bandwidth is not limited). Benches put it between two
 * servers to measure what a distance between data centres does (`BENCH_RTT_MS` in bench/catch-up.ts). It reads no
 * frame, so it adds almost no CPU of its own.
 */
import { type AddressInfo, type Socket, createServer, connect } from 'node:net';

export interface DelayLink extends AsyncDisposable {
  /** `ws://127.0.0.1:PORT/ws`: dial this instead of the server. */
  readonly wsUrl: string;
}

/** One direction: each chunk read from `from` is written to `to` oneWayMs later, in the order read. */
function relay(from: Socket, to: Socket, oneWayMs: number): void {
  from.on('data', (chunk: Buffer) => {
    setTimeout(() => {
      if (!to.destroyed) to.write(chunk);
    }, oneWayMs);
  });
  // The end and errors travel with the same delay, so nothing written before them is cut off.
  from.on('end', () => setTimeout(() => to.end(), oneWayMs));
  from.on('error', () => setTimeout(() => to.destroy(), oneWayMs));
  from.on('close', () => setTimeout(() => to.destroy(), oneWayMs + 1));
}

export async function startDelayLink(upstreamPort: number, oneWayMs: number): Promise<DelayLink> {
  const sockets = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(upstreamPort, '127.0.0.1');
    for (const s of [downstream, upstream]) {
      s.setNoDelay(true);
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    }
    relay(downstream, upstream, oneWayMs);
    relay(upstream, downstream, oneWayMs);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const port = (server.address() as AddressInfo).port;
  return {
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    async [Symbol.asyncDispose]() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
