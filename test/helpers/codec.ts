/** Shared pieces of the codec tests (SHiNE_DM container and SHiNE_BCH block): failure reasons, byte edits. */
import assert from 'node:assert/strict';
import type { ContainerErrorReason } from '../../src/protocol/container.js';
import { ContainerError } from '../../src/protocol/container.js';

/** The Ed25519 seed of the docs/protocol.md test vectors: bytes 1..32. */
export const VECTOR_SEED = Uint8Array.from({ length: 32 }, (_, i) => i + 1);

/** Runs a codec step: its result, or the ContainerError it threw; any other throw fails the test. */
export function tryCodec<T>(run: () => T): T | ContainerError {
  try {
    return run();
  } catch (e) {
    if (e instanceof ContainerError) return e;
    throw e;
  }
}

/** The reason a codec step fails with, or 'OK'; anything thrown other than a ContainerError fails the test. */
export function codecReason(run: () => unknown): ContainerErrorReason | 'OK' {
  try {
    run();
    return 'OK';
  } catch (e) {
    assert.ok(e instanceof ContainerError, `expected a ContainerError, got ${String(e)}`);
    return e.reason;
  }
}

/** A copy of bytes with one byte set to value. */
export function withByte(bytes: Uint8Array, at: number, value: number): Uint8Array {
  const out = bytes.slice();
  out[at] = value;
  return out;
}
