/**
 * One push request (RFC 8030): web-push encrypts the payload (RFC 8291 aes128gcm) and signs the VAPID
 * JWT (RFC 8292); the POST is ours, so a timeout follows the injected clock and tests can reach a
 * plain-HTTP endpoint on loopback.
 */
import webpush from 'web-push';
import type { Clock } from '../clock.js';
import type { VapidIdentity } from './vapid.js';

export interface PushTarget {
  endpoint: string;
  p256dh: string;
  auth: string;
}

export interface PushOptions {
  ttlSeconds: number;
  urgency?: 'normal' | 'high';
  /** Collapses pushes at the push service (≤ 32 URL-safe characters). */
  topic?: string;
}

/**
 * What the push service answered: a status, or `network` / `timeout` when there was no answer, or
 * `invalid` when no request could be made of the subscription.
 */
export interface PushAnswer {
  status: number | 'network' | 'timeout' | 'invalid';
  /** Retry-After of the answer, in ms from now. */
  retryAfterMs: number | null;
}

export type PushTransport = (target: PushTarget, payload: string, options: PushOptions) => Promise<PushAnswer>;

/** The real transport: encrypts, signs and POSTs, giving up after timeoutMs of the clock or on abort. */
export function httpPushTransport(deps: {
  vapid: VapidIdentity;
  clock: Clock;
  timeoutMs: number;
  signal: AbortSignal;
}): PushTransport {
  const { vapid, clock, timeoutMs, signal } = deps;
  return async (target, payload, options) => {
    const request = webpush.generateRequestDetails(
      { endpoint: target.endpoint, keys: { p256dh: target.p256dh, auth: target.auth } },
      payload,
      {
        vapidDetails: { subject: vapid.subject, publicKey: vapid.publicKey, privateKey: vapid.privateKey },
        contentEncoding: 'aes128gcm',
        TTL: options.ttlSeconds,
        ...(options.urgency ? { urgency: options.urgency } : {}),
        ...(options.topic ? { topic: options.topic } : {}),
      },
    );
    const abort = new AbortController();
    const timer = clock.setTimer(timeoutMs, () => abort.abort());
    const onClose = () => abort.abort();
    signal.addEventListener('abort', onClose);
    try {
      const res = await fetch(request.endpoint, {
        method: 'POST',
        headers: request.headers,
        body: new Uint8Array(request.body),
        signal: abort.signal,
        redirect: 'manual',
      });
      // The body is not needed, but reading it lets the connection be reused.
      await res.arrayBuffer();
      return { status: res.status, retryAfterMs: retryAfterMs(res.headers.get('retry-after'), clock.now()) };
    } catch {
      return { status: abort.signal.aborted && !signal.aborted ? 'timeout' : 'network', retryAfterMs: null };
    } finally {
      timer.cancel();
      signal.removeEventListener('abort', onClose);
    }
  };
}

/** Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3); null when absent or unreadable. */
export function retryAfterMs(header: string | null, nowMs: number): number | null {
  if (header === null) return null;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}
