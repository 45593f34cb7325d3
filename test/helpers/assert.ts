/** Assertions on protocol frames. */
import assert from 'node:assert/strict';
import type { ErrorResponse } from '../../src/protocol/envelope.js';

/** Asserts an error answer with this status and code (and, when given, the echoed op and requestId). */
export function assertError(
  answer: object,
  status: number,
  code: string,
  ids: { op?: string; requestId?: string } = {},
): void {
  const err = answer as ErrorResponse;
  assert.equal(err.ok, false, `expected ${code}, got ${JSON.stringify(answer)}`);
  assert.equal(err.error.code, code, JSON.stringify(answer));
  assert.equal(err.status, status);
  assert.equal(typeof err.error.message, 'string');
  if (ids.op !== undefined) assert.equal(err.op, ids.op);
  if (ids.requestId !== undefined) assert.equal(err.requestId, ids.requestId);
}
