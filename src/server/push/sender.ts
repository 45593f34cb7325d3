/**
 * One push request (RFC 8030): web-push encrypts the payload (RFC 8291 aes128gcm) and signs the VAPID
 * JWT (RFC 8292); the POST is ours, so a timeout follows the injected clock, connections are kept
 * alive, and tests can reach a plain-HTTP endpoint on loopback.
 */
import { setMaxListeners } from 'node:events';
import http from 'node:http';
import https from 'node:https';
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

/** A VAPID JWT is valid 12 h (the library's default); one is made per push-service origin and hour. */
const VAPID_REUSE_MS = 3_600_000;
const MAX_VAPID_ORIGINS = 1_000;

/**
 * The real transport: encrypts (a fresh key per push), signs, and POSTs over kept-alive connections,
 * giving up after timeoutMs of the clock or when signal aborts.
 */
export function httpPushTransport(deps: {
  vapid: VapidIdentity;
  clock: Clock;
  timeoutMs: number;
  signal: AbortSignal;
}): PushTransport & { close(): void } {
  const { vapid, clock, timeoutMs, signal } = deps;
  // Every request in flight listens for the service closing.
  setMaxListeners(0, signal);
  const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };
  // Signing the JWT costs more than encrypting the payload, and one per origin is all RFC 8292 needs.
  const jwts = new Map<string, { authorization: string; renewAtMs: number }>();
  const authorizationFor = (origin: string): string => {
    const now = clock.now();
    let jwt = jwts.get(origin);
    if (!jwt || now >= jwt.renewAtMs) {
      if (jwts.size >= MAX_VAPID_ORIGINS) jwts.clear();
      const { Authorization } = webpush.getVapidHeaders(
        origin,
        vapid.subject,
        vapid.publicKey,
        vapid.privateKey,
        'aes128gcm',
      );
      jwts.set(origin, (jwt = { authorization: Authorization, renewAtMs: now + VAPID_REUSE_MS }));
    }
    return jwt.authorization;
  };

  const transport = async (target: PushTarget, payload: string, options: PushOptions): Promise<PushAnswer> => {
    const url = new URL(target.endpoint);
    const request = webpush.generateRequestDetails(
      { endpoint: target.endpoint, keys: { p256dh: target.p256dh, auth: target.auth } },
      payload,
      {
        contentEncoding: 'aes128gcm',
        TTL: options.ttlSeconds,
        ...(options.urgency ? { urgency: options.urgency } : {}),
        ...(options.topic ? { topic: options.topic } : {}),
      },
    );
    const headers = Object.assign({}, request.headers, { authorization: authorizationFor(url.origin) });
    const abort = new AbortController();
    let timedOut = false;
    const timer = clock.setTimer(timeoutMs, () => {
      timedOut = true;
      abort.abort();
    });
    const onClose = () => abort.abort();
    signal.addEventListener('abort', onClose);
    try {
      return await new Promise<PushAnswer>((resolve) => {
        const agent = url.protocol === 'http:' ? agents['http:'] : agents['https:'];
        const req = (url.protocol === 'http:' ? http : https).request(
          url,
          { method: 'POST', headers, agent, signal: abort.signal },
          (res) => {
            // The body is not needed, but reading it to the end lets the connection be reused.
            res.resume();
            res.on('end', () =>
              resolve({
                status: res.statusCode ?? 0,
                retryAfterMs: retryAfterMs(res.headers['retry-after'] ?? null, clock.now()),
              }),
            );
            res.on('error', () => resolve({ status: 'network', retryAfterMs: null }));
          },
        );
        req.on('error', () => resolve({ status: timedOut ? 'timeout' : 'network', retryAfterMs: null }));
        req.end(request.body);
      });
    } finally {
      timer.cancel();
      signal.removeEventListener('abort', onClose);
    }
  };
  return Object.assign(transport, {
    close: () => {
      agents['http:'].destroy();
      agents['https:'].destroy();
    },
  });
}

/** Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3); null when absent or unreadable. */
export function retryAfterMs(header: string | null, nowMs: number): number | null {
  if (header === null) return null;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // IMF-fixdate, the one form senders must use; Date.parse alone would read '-5' as a year.
  if (!/^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/.test(text)) return null;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}
