/** The checks of UpsertPushToken (docs/protocol.md §5.5): which endpoints and keys a subscription may have. */
import { ECDH } from 'node:crypto';
import { isIP } from 'node:net';
import { ShineError } from '../../protocol/errors.js';

export interface CheckedSubscription {
  endpoint: string;
  /** Unpadded base64url, as web-push takes them. */
  p256dh: string;
  auth: string;
}

const MAX_ENDPOINT_LENGTH = 2048;

/**
 * Accepts `https://` with a host name only — no IP literal, no `localhost`, no single-label name — so a
 * client cannot make this server post to its own network. `allowInsecure` (tests) adds `http://127.0.0.1:*`.
 */
export function checkEndpoint(text: string, allowInsecure: boolean): string {
  const bad = (why: string): never => {
    throw new ShineError('BAD_FIELDS', `endpoint ${why}`);
  };
  if (text.length > MAX_ENDPOINT_LENGTH) bad(`is longer than ${MAX_ENDPOINT_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return bad('is not a URL');
  }
  if (allowInsecure && url.protocol === 'http:' && url.hostname === '127.0.0.1') return url.href;
  if (url.protocol !== 'https:') bad('must be an https:// URL');
  if (url.username || url.password) bad('must not carry credentials');
  // The URL parser has already turned every IPv4 spelling (0x7f.1, 2130706433) into dotted form.
  const host = url.hostname.replace(/\.$/, '').toLowerCase();
  if (host.startsWith('[') || isIP(host) !== 0) bad('host must be a name, not an IP address');
  if (host === 'localhost' || host.endsWith('.localhost')) bad('host must not be localhost');
  const labels = host.split('.');
  if (labels.length < 2 || !/^[a-z][a-z0-9-]*$/.test(labels.at(-1)!)) bad('host must be a public DNS name');
  return url.href;
}

/**
 * Base64 in either alphabet, padded or not (browsers' toJSON() gives unpadded base64url); null unless
 * it decodes canonically, so one key has one spelling.
 */
export function decodeAnyBase64(text: string): Buffer | null {
  if (!/^(?:[A-Za-z0-9+/]*|[A-Za-z0-9_-]*)={0,2}$/.test(text)) return null;
  const bare = text.replace(/=+$/, '');
  if (bare.length % 4 === 1 || (bare.length !== text.length && text.length % 4 !== 0)) return null;
  const bytes = Buffer.from(bare.replace(/\+/g, '-').replace(/\//g, '_'), 'base64url');
  return bytes.toString('base64url') === bare.replace(/\+/g, '-').replace(/\//g, '_') ? bytes : null;
}

/** p256dh: a 65-byte uncompressed point on P-256; auth: exactly 16 bytes. */
export function checkKeys(p256dhB64: string, authB64: string): { p256dh: string; auth: string } {
  const p256dh = decodeAnyBase64(p256dhB64);
  if (!p256dh) throw new ShineError('BAD_FIELDS', 'p256dhB64 is not base64');
  if (p256dh.length !== 65 || p256dh[0] !== 0x04 || !onP256(p256dh))
    throw new ShineError('BAD_FIELDS', 'p256dhB64 must be a 65-byte uncompressed P-256 point');
  const auth = decodeAnyBase64(authB64);
  if (!auth) throw new ShineError('BAD_FIELDS', 'authB64 is not base64');
  if (auth.length !== 16) throw new ShineError('BAD_FIELDS', 'authB64 must be 16 bytes');
  return { p256dh: p256dh.toString('base64url'), auth: auth.toString('base64url') };
}

function onP256(point: Buffer): boolean {
  try {
    ECDH.convertKey(point, 'prime256v1');
    return true;
  } catch {
    return false;
  }
}
