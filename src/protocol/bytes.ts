/** Byte helpers that work the same in Node and in the browser. */

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_LOOKUP = new Int16Array(128).fill(-1);
for (let i = 0; i < B64.length; i++) B64_LOOKUP[B64.charCodeAt(i)] = i;

/** The part of Node's Buffer used here; this module imports nothing from Node so browsers can load it. */
interface BufferApi {
  from(data: ArrayBufferLike, byteOffset: number, length: number): { toString(encoding: 'base64'): string };
  from(text: string, encoding: 'base64'): Uint8Array & { toString(encoding: 'base64'): string };
}

/** Node's Buffer when present (much faster than the portable code); absent in browsers. */
const NodeBuffer = (globalThis as { Buffer?: BufferApi }).Buffer;

/** Standard base64 with padding. */
export function toBase64(bytes: Uint8Array): string {
  if (NodeBuffer) return NodeBuffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
  return portableToBase64(bytes);
}

/** toBase64 without Node's Buffer (what browsers run). */
export function portableToBase64(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + '==';
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + '=';
  }
  return out;
}

/**
 * Strict standard base64 (padding required, no whitespace, canonical trailing bits).
 * Returns null for anything else, so callers map it to their own error code.
 */
export function fromBase64(text: string): Uint8Array | null {
  if (NodeBuffer) {
    if (text.length % 4 !== 0) return null;
    // Buffer decoding is lenient (whitespace, bad characters, loose padding), so the result counts only
    // if it encodes back to exactly the same text.
    const buf = NodeBuffer.from(text, 'base64');
    if (buf.toString('base64') !== text) return null;
    return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  return portableFromBase64(text);
}

/** The byte length a base64 text decodes to, read off its length and padding without decoding it. */
export function base64DecodedLength(text: string): number {
  return Math.ceil(text.length / 4) * 3 - (text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0);
}

/** fromBase64 without Node's Buffer (what browsers run). */
export function portableFromBase64(text: string): Uint8Array | null {
  if (text.length % 4 !== 0) return null;
  let pad = 0;
  if (text.endsWith('==')) pad = 2;
  else if (text.endsWith('=')) pad = 1;
  const out = new Uint8Array((text.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    const last = i + 4 === text.length;
    const c0 = sym(text, i);
    const c1 = sym(text, i + 1);
    const c2 = last && pad === 2 ? 0 : sym(text, i + 2);
    const c3 = last && pad >= 1 ? 0 : sym(text, i + 3);
    if (c0 < 0 || c1 < 0 || c2 < 0 || c3 < 0) return null;
    const n = (c0 << 18) | (c1 << 12) | (c2 << 6) | c3;
    out[o++] = n >> 16;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
    if (last && pad === 2 && (c1 & 15) !== 0) return null;
    if (last && pad === 1 && (c2 & 3) !== 0) return null;
  }
  return out;
}

function sym(text: string, i: number): number {
  const c = text.charCodeAt(i);
  return c < 128 ? B64_LOOKUP[c]! : -1;
}

export function toHex(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) out += b.toString(16).padStart(2, '0');
  return out;
}

export function fromHex(hex: string): Uint8Array {
  const clean = hex.replace(/\s+/g, '');
  if (clean.length % 2 !== 0 || /[^0-9a-fA-F]/.test(clean)) throw new Error('bad hex');
  const out = new Uint8Array(clean.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(clean.slice(i * 2, i * 2 + 2), 16);
  return out;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
export const utf8 = (text: string): Uint8Array => encoder.encode(text);
export const fromUtf8 = (bytes: Uint8Array): string => decoder.decode(bytes);
const strictDecoder = new TextDecoder('utf-8', { fatal: true });
/** The bytes as text when they are valid UTF-8, else null. */
export function strictUtf8(bytes: Uint8Array): string | null {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    return null;
  }
}

export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let len = 0;
  for (const p of parts) len += p.length;
  const out = new Uint8Array(len);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Lexicographic byte order, used for last-writer-wins ties. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return a.length - b.length;
}
