/**
 * A WebSocket relay put in front of a server's /ws (give that server SHINE_PUBLIC_WS_URL = proxy.wsUrl
 * so its peers dial the relay). It forwards text frames both ways unchanged, shows every frame to the
 * test, and can hold back chosen client frames — so a test can stop a peer between two steps of a
 * protocol (e.g. after it stored a sync page, before its ACK reaches the source). Pings are relayed too,
 * so `blackholeOpen()` makes the connections open now half-open: nothing passes either way, nothing closes.
 */
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';

export type ProxyVerdict = 'pass' | 'hold';

export interface WsProxy extends AsyncDisposable {
  readonly wsUrl: string;
  /** Decides for each frame from a client (a connecting peer); frames held wait for releaseHeld(). */
  filter: (frame: ParsedFrame) => ProxyVerdict;
  /** Called for every frame the upstream server sends back. */
  onAnswer: (frame: ParsedFrame) => void;
  /** Decides for each frame the upstream server sends back (after onAnswer); frames held wait for releaseHeld(). */
  answerFilter: (frame: ParsedFrame) => ProxyVerdict;
  /** Forwards the frames held so far (on connections still open), in order; returns how many. */
  releaseHeld(): number;
  /** From now on the connections open now pass nothing (frames, pings, pongs) and stay open; new ones pass. */
  blackholeOpen(): void;
  /** Connections made through the relay so far. */
  readonly connections: number;
  close(): Promise<void>;
}

/** A frame as JSON, or null for text that is not JSON. */
export type ParsedFrame = { op?: string; requestId?: string; payload?: Record<string, unknown> } | null;

function parse(text: string): ParsedFrame {
  try {
    return JSON.parse(text) as ParsedFrame;
  } catch {
    return null;
  }
}

export async function startWsProxy(upstreamWsUrl: string): Promise<WsProxy> {
  // No automatic pong: pings are relayed to the upstream server, so a blackholed path answers none.
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 64 * 1024 * 1024, autoPong: false });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  const sockets = new Set<WebSocket>();
  const dead = new Set<WebSocket>();
  let connections = 0;
  let held: (() => void)[] = [];
  const proxy: WsProxy = {
    wsUrl: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/ws`,
    filter: () => 'pass',
    onAnswer: () => undefined,
    answerFilter: () => 'pass',
    blackholeOpen: () => sockets.forEach((s) => dead.add(s)),
    releaseHeld: () => {
      const now = held;
      held = [];
      now.forEach((forward) => forward());
      return now.length;
    },
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.terminate();
        server.close(() => resolve());
      }),
    [Symbol.asyncDispose]: () => proxy.close(),
  };
  server.on('connection', (client) => {
    const upstream = new WebSocket(upstreamWsUrl, { maxPayload: 64 * 1024 * 1024, autoPong: false });
    sockets.add(client).add(upstream);
    connections++;
    const passes = (): boolean => !dead.has(client);
    client.on('ping', (data) => passes() && upstream.readyState === WebSocket.OPEN && upstream.ping(data));
    upstream.on('pong', (data) => passes() && client.pong(data));
    upstream.on('ping', (data) => passes() && client.ping(data));
    client.on('pong', (data) => passes() && upstream.readyState === WebSocket.OPEN && upstream.pong(data));
    const early: string[] = [];
    upstream.on('open', () => {
      for (const text of early.splice(0)) upstream.send(text);
    });
    client.on('message', (data) => {
      const text = String(data);
      if (!passes()) return;
      const forward = (): void => {
        if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
        else if (upstream.readyState === WebSocket.CONNECTING) early.push(text);
      };
      if (proxy.filter(parse(text)) === 'hold') held.push(forward);
      else forward();
    });
    upstream.on('message', (data) => {
      const text = String(data);
      if (!passes()) return;
      const frame = parse(text);
      proxy.onAnswer(frame);
      const forward = (): void => {
        if (client.readyState === WebSocket.OPEN) client.send(text);
      };
      if (proxy.answerFilter(frame) === 'hold') held.push(forward);
      else forward();
    });
    const end = (): void => {
      client.terminate();
      upstream.terminate();
      sockets.delete(client);
      sockets.delete(upstream);
      dead.delete(client);
      dead.delete(upstream);
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  return proxy;
}
