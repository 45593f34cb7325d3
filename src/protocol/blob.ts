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

/** Base64 → container, with the protocol's error codes for each failure. */
export function decodeBlob(b64: string): Container {
  checkBlobSize(b64);
  const bytes = fromBase64(b64);
  if (!bytes) throw new ShineError('BAD_BLOB', 'blob is not base64');
  try {
    return decodeContainer(bytes);
  } catch (err) {
    if (err instanceof ContainerError) {
      throw new ShineError(err.reason === 'TOO_LARGE' ? 'TOO_LARGE' : 'BAD_BLOB', `container rejected: ${err.reason}`);
    }
    throw err;
  }
}
