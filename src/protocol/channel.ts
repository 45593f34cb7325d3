/**
 * The request/answer side of the envelope (docs/protocol.md §5), socket-free: requestIds, the pending calls, one
 * timeout per call, frame parsing, error answers turned into errors and events handed to a callback.
 * The SDK, the server's peer connections and the test client all speak through it; each gives it a
 * `send(text)` and feeds it the texts it receives. No Node built-ins: the SDK runs in browsers.
 */
import type { ErrorResponse, IncomingFrame } from './envelope.js';
import type { ErrorDetails } from './errors.js';
import { ShineError, isErrorCode } from './errors.js';

/** Timers of an injected clock (the server's Clock fits); the default uses the global setTimeout. */
export interface TimerSource {
  setTimer(ms: number, fn: () => void): { cancel(): void };
}

export const globalTimers: TimerSource = {
  setTimer(ms, fn) {
    const t = setTimeout(fn, ms);
    return { cancel: () => clearTimeout(t) };
  },
};

/** Why a call ended without an answer. */
export type NoAnswer = 'TIMEOUT' | 'CLOSED';

export interface ChannelErrors {
  /** The error a call rejects with when the other side answered with an error. */
  answered(frame: ErrorResponse, op: string): Error;
  /** The error a call rejects with when no answer came (timeout, closed socket, failed send). */
  unanswered(why: NoAnswer, op: string, message: string): Error;
}

/** An error answer as ShineError with its code (INTERNAL for a code outside the table); prefix names the sender. */
export function errorOfAnswer(frame: ErrorResponse, prefix = ''): ShineError {
  const error: Partial<ErrorResponse['error']> =
    typeof frame.error === 'object' && frame.error !== null ? frame.error : {};
  const code = typeof error.code === 'string' && isErrorCode(error.code) ? error.code : 'INTERNAL';
  const details: ErrorDetails = {};
  if (typeof error.headIndex === 'number') details.headIndex = error.headIndex;
  if (typeof error.headHash === 'string' || error.headHash === null) details.headHash = error.headHash;
  return new ShineError(code, prefix + (typeof error.message === 'string' ? error.message : 'error'), {
    ...('headIndex' in details ? { details } : {}),
  });
}

export const shineErrors: ChannelErrors = {
  answered: (frame) => errorOfAnswer(frame),
  unanswered: (_why, _op, message) => new Error(message),
};

export interface ChannelOptions {
  /** Writes one text frame; may throw when the socket is gone. */
  send(text: string): void;
  /** Default per-call timeout. */
  timeoutMs: number;
  timers?: TimerSource;
  errors?: ChannelErrors;
  /** Every event frame (`event: true`), in order. */
  onEvent?(op: string, payload: unknown): void;
}

export interface RequestOptions {
  /** A chosen requestId (tests); by default the channel numbers its requests. */
  requestId?: string;
  timeoutMs?: number;
}

interface Pending {
  op: string;
  resolve(frame: IncomingFrame): void;
  reject(err: Error): void;
  timer: { cancel(): void };
}

export class RequestChannel {
  private readonly pending = new Map<string, Pending>();
  private readonly timers: TimerSource;
  private readonly errors: ChannelErrors;
  private seq = 0;
  private closedWith: string | null = null;

  constructor(private readonly opts: ChannelOptions) {
    this.timers = opts.timers ?? globalTimers;
    this.errors = opts.errors ?? shineErrors;
  }

  /** Sends a request and resolves with its answer frame, error answers included. */
  request(op: string, payload: object = {}, options: RequestOptions = {}): Promise<IncomingFrame> {
    if (this.closedWith !== null)
      return Promise.reject(this.errors.unanswered('CLOSED', op, `${op}: ${this.closedWith}`));
    const requestId = options.requestId ?? String(++this.seq);
    const timeoutMs = options.timeoutMs ?? this.opts.timeoutMs;
    return new Promise((resolve, reject) => {
      const timer = this.timers.setTimer(timeoutMs, () =>
        this.settle(requestId, this.errors.unanswered('TIMEOUT', op, `${op} got no answer in ${timeoutMs} ms`)),
      );
      this.pending.set(requestId, { op, resolve, reject, timer });
      try {
        this.opts.send(JSON.stringify({ op, requestId, payload }));
      } catch (err) {
        this.settle(requestId, this.errors.unanswered('CLOSED', op, `could not send ${op}: ${String(err)}`));
      }
    });
  }

  /** Sends a request and resolves with the payload of a success answer; rejects with the mapped error otherwise. */
  async call(op: string, payload: object = {}, options: RequestOptions = {}): Promise<unknown> {
    const frame = await this.request(op, payload, options);
    if ('ok' in frame && frame.ok === false) throw this.errors.answered(frame, op);
    return frame.payload;
  }

  /**
   * Feeds one received text. Answers settle their call, events go to onEvent; anything else (not JSON,
   * not an object, an unknown requestId) is ignored. Returns the parsed frame, or null for non-JSON.
   */
  receive(text: string): unknown {
    let frame: unknown;
    try {
      frame = JSON.parse(text);
    } catch {
      return null;
    }
    if (typeof frame !== 'object' || frame === null || Array.isArray(frame)) return frame;
    const f = frame as Record<string, unknown>;
    if (f.event === true) {
      if (typeof f.op === 'string') this.opts.onEvent?.(f.op, f.payload);
      return frame;
    }
    if (typeof f.requestId === 'string') this.settle(f.requestId, frame as IncomingFrame);
    return frame;
  }

  /** Fails every pending call (the socket closed); with `final`, later requests fail at once too. */
  failAll(message: string, final = false): void {
    if (final) this.closedWith = message;
    for (const [id, p] of [...this.pending]) this.settle(id, this.errors.unanswered('CLOSED', p.op, message));
  }

  /** Requests sent and not answered yet. */
  get size(): number {
    return this.pending.size;
  }

  private settle(requestId: string, outcome: IncomingFrame | Error): void {
    const p = this.pending.get(requestId);
    if (!p) return;
    this.pending.delete(requestId);
    p.timer.cancel();
    if (outcome instanceof Error) p.reject(outcome);
    else p.resolve(outcome);
  }
}
