/** The JSON envelope of docs/protocol.md §5: requests, answers and events. */
import type { ErrorCode, ErrorDetails } from './errors.js';
import { ShineError } from './errors.js';

/** Client requests may be at most 1 MiB; any frame at most 4 MiB. */
export const MAX_CLIENT_FRAME = 1024 * 1024;
export const MAX_FRAME = 4 * 1024 * 1024;

export interface Request {
  op: string;
  requestId: string;
  payload: Record<string, unknown>;
}

export interface OkResponse<P = unknown> {
  op: string;
  requestId: string;
  status: 200;
  ok: true;
  payload: P;
}

export interface ErrorResponse {
  op: string;
  requestId: string;
  status: number;
  ok: false;
  error: { code: ErrorCode; message: string } & ErrorDetails;
}

export interface EventFrame<P = unknown> {
  op: string;
  event: true;
  status: 200;
  payload: P;
}

export type Response<P = unknown> = OkResponse<P> | ErrorResponse;
export type IncomingFrame = Response | EventFrame;

/**
 * Parses a request frame. Throws ShineError BAD_JSON for text that is not JSON and BAD_FIELDS for a
 * JSON value that is not an envelope; `partial` carries op/requestId when they could be read, so the
 * error answer can still name them.
 */
export function parseRequest(text: string): Request {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EnvelopeError(new ShineError('BAD_JSON', 'frame is not JSON'), {});
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new EnvelopeError(new ShineError('BAD_FIELDS', 'frame must be a JSON object'), {});
  }
  const o = value as Record<string, unknown>;
  const partial = {
    op: typeof o.op === 'string' ? o.op.slice(0, 128) : undefined,
    requestId: typeof o.requestId === 'string' ? o.requestId.slice(0, 128) : undefined,
  };
  if (typeof o.op !== 'string' || o.op.length === 0) {
    throw new EnvelopeError(new ShineError('BAD_FIELDS', 'op must be a non-empty string'), partial);
  }
  if (typeof o.requestId !== 'string' || o.requestId.length < 1 || o.requestId.length > 128) {
    throw new EnvelopeError(new ShineError('BAD_FIELDS', 'requestId must be 1..128 characters'), partial);
  }
  // No op has a longer name; the answer echoes at most 128 characters of it.
  if (o.op.length > 64) throw new EnvelopeError(new ShineError('UNKNOWN_OP', 'unknown op'), partial);
  const payload = o.payload === undefined ? {} : o.payload;
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
    throw new EnvelopeError(new ShineError('BAD_FIELDS', 'payload must be an object'), partial);
  }
  return { op: o.op, requestId: o.requestId, payload: payload as Record<string, unknown> };
}

export class EnvelopeError extends Error {
  constructor(
    readonly error: ShineError,
    readonly partial: { op?: string | undefined; requestId?: string | undefined },
  ) {
    super(error.message);
  }
}

export function okResponse<P>(op: string, requestId: string, payload: P): OkResponse<P> {
  return { op, requestId, status: 200, ok: true, payload };
}

export function errorResponse(op: string, requestId: string, err: ShineError): ErrorResponse {
  return {
    op,
    requestId,
    status: err.status,
    ok: false,
    error: { code: err.code, message: err.message, ...err.details },
  };
}

export function eventFrame<P>(op: string, payload: P): EventFrame<P> {
  return { op, event: true, status: 200, payload };
}
