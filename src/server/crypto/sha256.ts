/**
 * SHA-256 for the server, in one call of node:crypto's `hash`. A `createHash` object is a native object
 * the garbage collector has to finalize: at a few digests a pair (outbox digests, receipts) they added
 * about a millisecond to every young-generation pause of a loaded server (docs/performance.md).
 */
import { hash } from 'node:crypto';
import type { BinaryLike, BinaryToTextEncoding } from 'node:crypto';

/** The digest of data (a string is hashed as UTF-8) as raw bytes, or as text in the given encoding. */
export function sha256(data: BinaryLike): Buffer;
export function sha256(data: BinaryLike, encoding: BinaryToTextEncoding): string;
export function sha256(data: BinaryLike, encoding?: BinaryToTextEncoding): Buffer | string {
  return encoding === undefined ? hash('sha256', data, 'buffer') : hash('sha256', data, encoding);
}
