/** Blobs as they arrive in payloads (base64 containers): size checks and decoding with the protocol's error codes (§5.2). */
import { base64DecodedLength, fromBase64 } from './bytes.js';
import type { Container } from './container.js';
import { ContainerError, MAX_CONTAINER, decodeContainer } from './container.js';
import { ShineError } from './errors.js';

/** TOO_LARGE when the text decodes to more than a container may hold, read off the text alone. */
export function checkBlobSize(b64: string): void {
  // The decoded size read off the text, padding included: 87 724 characters without '=' are 65 793
  // bytes, which must be TOO_LARGE before either blob is decoded (docs/protocol.md §5.2 order).
  if (base64DecodedLength(b64) > MAX_CONTAINER)
    throw new ShineError('TOO_LARGE', `a container is at most ${MAX_CONTAINER} bytes`);
}

/**
 * Base64 → what `decode` makes of the bytes (a container, a chain block), with the protocol's error codes
 * for each failure: TOO_LARGE off the text alone, BAD_BLOB for bad base64 and anything the decoder refuses.
 */
export function decodeBase64With<T>(b64: string, decode: (bytes: Uint8Array) => T, what = 'container'): T {
  checkBlobSize(b64);
  const bytes = fromBase64(b64);
  if (!bytes) throw new ShineError('BAD_BLOB', `${what === 'container' ? 'blob' : what} is not base64`);
  try {
    return decode(bytes);
  } catch (err) {
    if (err instanceof ContainerError) {
      throw new ShineError(err.reason === 'TOO_LARGE' ? 'TOO_LARGE' : 'BAD_BLOB', `${what} rejected: ${err.reason}`);
    }
    throw err;
  }
}

/** Base64 → container, with the protocol's error codes for each failure. */
export const decodeBlob = (b64: string): Container => decodeBase64With(b64, decodeContainer);
