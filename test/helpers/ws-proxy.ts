/**
 * A WebSocket relay put in front of a server's /ws (give that server SHINE_PUBLIC_WS_URL = proxy.wsUrl
 * so its peers dial the relay). It forwards text frames both ways unchanged, shows every frame to the
 * test, and can hold back chosen client frames — so a test can stop a peer between two steps of a
 * protocol (e.g. after it stored a sync page, before its ACK reaches the source). Pings are relayed too,
 * so `blackholeOpen()` makes the connections open now half-open: nothing passes either way, nothing closes.
 * The chaos test also cuts the link (`cut()`: open connections dropped, new ones refused), delays every
 * frame (`delay(ms)`), drops the open connections (`drop()`) and heals it all (`heal()`).
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
  /** Closes every connection open now (both sides); new ones pass. */
  drop(): void;
  /** Drops every open connection and refuses new ones (closed as soon as they open) until heal(). */
  cut(): void;
  /** Holds every frame (either way) for ms before forwarding it, order kept, until heal() (0: no delay). */
  delay(ms: number): void;
  /** Ends cut and delay, and drops the connections blackholeOpen() left half-open (their peers reconnect). */
  heal(): void;
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
  let cutting = false;
  let delayMs = 0;
  const dropAll = (only?: Set<WebSocket>): void => {
    for (const s of [...(only ?? sockets)]) s.terminate();
  };
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
    drop: () => dropAll(),
    cut: () => {
      cutting = true;
      dropAll();
    },
    delay: (ms) => {
      delayMs = ms;
    },
    heal: () => {
      cutting = false;
      delayMs = 0;
      dropAll(dead);
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
    if (cutting) {
      client.terminate();
      return;
    }
    const upstream = new WebSocket(upstreamWsUrl, { maxPayload: 64 * 1024 * 1024, autoPong: false });
    sockets.add(client).add(upstream);
    connections++;
    const passes = (): boolean => !dead.has(client);
    // Per direction, frames wait out the delay set when they came, in order; with no delay and none
    // waiting, a frame goes on at once (as before delay() existed).
    const lanes = { up: { tail: Promise.resolve(), waiting: 0 }, down: { tail: Promise.resolve(), waiting: 0 } };
    const later = (which: 'up' | 'down', forward: () => void): void => {
      const lane = lanes[which];
      if (delayMs === 0 && lane.waiting === 0) return forward();
      const at = Date.now() + delayMs;
      lane.waiting++;
      lane.tail = lane.tail
        .then(() => new Promise<void>((r) => setTimeout(r, Math.max(0, at - Date.now()))))
        .then(() => {
          lane.waiting--;
          forward();
        });
    };
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
      else later('up', forward);
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
      else later('down', forward);
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
