/**
 * A bare WebSocket client for protocol-level tests: sends exactly what it is told and records every
 * frame it receives, so tests can wait on what the server actually said.
 */
import type { ClientOptions } from 'ws';
import { WebSocket } from 'ws';
import { RequestChannel } from '../../src/protocol/channel.js';
import type { ErrorResponse, EventFrame, OkResponse, Response } from '../../src/protocol/envelope.js';

/** Any frame the server sent, parsed. */
export type Frame = (Response | EventFrame) & Record<string, unknown>;

export interface RawClient {
  /** Sends a request with a fresh requestId (or `opts.requestId`) and resolves with its answer. */
  request<P = Record<string, unknown>>(
    op: string,
    payload?: unknown,
    opts?: { requestId?: string; timeoutMs?: number },
  ): Promise<OkResponse<P> | ErrorResponse>;
  /** Like request, but rejects unless the answer is a success; resolves with its payload. */
  call<P = Record<string, unknown>>(op: string, payload?: unknown): Promise<P>;
  sendText(text: string): void;
  sendBinary(bytes: Uint8Array): void;
  /** Every frame received, in order. */
  readonly frames: Frame[];
  /** The event frames among them. */
  readonly events: EventFrame[];
  /** Resolves with the first frame (already received or future) matching pred. */
  waitFor(pred: (frame: Frame) => boolean, timeoutMs?: number): Promise<Frame>;
  /** Resolves when the socket has closed, with the close code and reason. */
  readonly closed: Promise<{ code: number; reason: string }>;
  readonly isOpen: boolean;
  /** The socket itself, for tests of transport behaviour (pausing reads, pings). */
  readonly socket: WebSocket;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

const DEFAULT_TIMEOUT_MS = 10_000;

/** Opens a socket to wsUrl (with extra ws options, e.g. autoPong) and resolves once it is open. */
export async function connectRaw(wsUrl: string, options: ClientOptions = {}): Promise<RawClient> {
  const ws = new WebSocket(wsUrl, { maxPayload: 64 * 1024 * 1024, ...options });
  const frames: Frame[] = [];
  const events: EventFrame[] = [];
  const waiters = new Set<{ pred: (f: Frame) => boolean; resolve: (f: Frame) => void }>();

  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }));
  });
  const channel = new RequestChannel({ send: (text) => ws.send(text), timeoutMs: DEFAULT_TIMEOUT_MS });
  ws.on('message', (data, isBinary) => {
    if (isBinary) throw new Error('server sent a binary frame');
    const frame = channel.receive(String(data)) as Frame | null;
    if (frame === null) throw new Error(`server sent text that is not JSON: ${String(data).slice(0, 200)}`);
    frames.push(frame);
    if (frame.event === true) events.push(frame as EventFrame);
    for (const w of waiters) {
      if (w.pred(frame)) {
        waiters.delete(w);
        w.resolve(frame);
      }
    }
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  void closed.then(() => channel.failAll('connection closed', true));
  ws.on('error', () => {
    // Surfaced through `closed`; an unhandled 'error' event would crash the test process.
  });

  /** Waits for a matching frame among those received from index `from` on. */
  const waitFrom = (from: number, pred: (f: Frame) => boolean, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<Frame> => {
    const seen = frames.slice(from).find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const waiter = {
        pred,
        resolve: (f: Frame) => {
          clearTimeout(timer);
          resolve(f);
        },
      };
      const timer = setTimeout(() => {
        waiters.delete(waiter);
        reject(
          new Error(
            `waitFor: no matching frame within ${timeoutMs} ms; got ${frames.length} frames: ${JSON.stringify(frames.slice(-5)).slice(0, 2000)}`,
          ),
        );
      }, timeoutMs);
      waiters.add(waiter);
    });
  };

  const request: RawClient['request'] = async (op, payload = {}, opts = {}) =>
    (await channel.request(op, payload as object, opts)) as never;

  const close = async () => {
    if (ws.readyState === WebSocket.CLOSED) return;
    ws.close();
    await closed;
  };

  return {
    request,
    call: async <P>(op: string, payload?: unknown) =>
      (await channel.call(op, payload as object).catch((err: { code?: string; message: string }) => {
        throw new Error(`${op} failed: ${err.code ?? ''} ${err.message}`);
      })) as P,
    sendText: (text) => ws.send(text),
    sendBinary: (bytes) => ws.send(bytes, { binary: true }),
    frames,
    events,
    waitFor: (pred, timeoutMs) => waitFrom(0, pred, timeoutMs),
    closed,
    get isOpen() {
      return ws.readyState === WebSocket.OPEN;
    },
    socket: ws,
    close,
    [Symbol.asyncDispose]: close,
  };
}
