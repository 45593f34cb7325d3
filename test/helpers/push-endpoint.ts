/**
 * A push service inside the test: a plain HTTP server on loopback that records every push, plus the
 * browser's side of a subscription — checking the VAPID JWT (RFC 8292) and decrypting the RFC 8291
 * aes128gcm body with node:crypto alone, as an independent check of what web-push produced.
 */
import assert from 'node:assert/strict';
import type { ECDH } from 'node:crypto';
import { createECDH, createDecipheriv, createPublicKey, hkdfSync, randomBytes, verify } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedPush {
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** How the endpoint answers one push: a status and extra headers. */
export type PushReply = { status: number; headers?: Record<string, string> };

export interface PushEndpoint extends AsyncDisposable {
  /** `http://127.0.0.1:PORT` */
  readonly origin: string;
  readonly received: ReceivedPush[];
  /** Pushes received on one path. */
  to(path: string): ReceivedPush[];
  /** Sets how pushes to a path are answered (default 201); a list is used in order, its last item repeats. */
  reply(path: string, replies: PushReply | PushReply[]): void;
  close(): Promise<void>;
}

export async function startPushEndpoint(): Promise<PushEndpoint> {
  const received: ReceivedPush[] = [];
  const replies = new Map<string, PushReply[]>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      received.push({ path, headers: req.headers, body: Buffer.concat(chunks) });
      const list = replies.get(path) ?? [];
      const reply = (list.length > 1 ? list.shift() : list[0]) ?? { status: 201 };
      res.writeHead(reply.status, reply.headers ?? {});
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    origin,
    received,
    to: (path) => received.filter((r) => r.path === path),
    reply: (path, r) => void replies.set(path, Array.isArray(r) ? [...r] : [r]),
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A browser's subscription keys: the P-256 key pair and the 16-byte auth secret. */
export interface SubscriptionKeys {
  ecdh: ECDH;
  auth: Buffer;
  /** As browsers' toJSON() gives them: unpadded base64url. */
  p256dhB64: string;
  authB64: string;
}

export function makeSubscriptionKeys(): SubscriptionKeys {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  const auth = randomBytes(16);
  return { ecdh, auth, p256dhB64: ecdh.getPublicKey().toString('base64url'), authB64: auth.toString('base64url') };
}

/**
 * Checks `Authorization: vapid t=JWT, k=KEY`: k is the server's key, the ES256 signature verifies
 * under it, aud is the endpoint's origin and exp lies within the next 24 h. Returns the claims.
 */
export function checkVapid(
  authorization: string | undefined,
  serverPublicKey: string,
  origin: string,
): { aud: string; exp: number; sub: string } {
  const m = /^vapid t=([\w-]+\.[\w-]+\.[\w-]+), k=([\w-]+)$/.exec(authorization ?? '');
  assert.ok(m, `Authorization is "vapid t=…, k=…": ${authorization}`);
  const [jwt, k] = [m[1]!, m[2]!];
  assert.equal(k, serverPublicKey, 'k is the server VAPID key');
  const [head, claims, sig] = jwt.split('.') as [string, string, string];
  assert.deepEqual(JSON.parse(Buffer.from(head, 'base64url').toString()), { typ: 'JWT', alg: 'ES256' });
  const point = Buffer.from(k, 'base64url');
  const key = createPublicKey({
    key: {
      kty: 'EC',
      crv: 'P-256',
      x: point.subarray(1, 33).toString('base64url'),
      y: point.subarray(33, 65).toString('base64url'),
    },
    format: 'jwk',
  });
  const signature = Buffer.from(sig, 'base64url');
  assert.equal(signature.length, 64, 'ES256 signature is r||s');
  assert.ok(
    verify('sha256', Buffer.from(`${head}.${claims}`), { key, dsaEncoding: 'ieee-p1363' }, signature),
    'the JWT signature verifies with the server VAPID key',
  );
  const body = JSON.parse(Buffer.from(claims, 'base64url').toString()) as { aud: string; exp: number; sub: string };
  assert.equal(body.aud, origin, 'aud is the endpoint origin');
  const now = Date.now() / 1000;
  assert.ok(body.exp > now && body.exp <= now + 24 * 3600, `exp ${body.exp} within 24 h of ${now}`);
  assert.match(body.sub, /^(mailto:|https:)/);
  return body;
}

/** Decrypts an RFC 8291 aes128gcm push body (one record) with the subscription's private key and auth. */
export function decryptPush(body: Buffer, keys: SubscriptionKeys): string {
  // RFC 8188 header: salt(16) | rs(4) | idlen(1) | keyid — here the server's ephemeral public key.
  const salt = body.subarray(0, 16);
  const rs = body.readUInt32BE(16);
  const idlen = body[20]!;
  assert.equal(idlen, 65, 'keyid is an uncompressed P-256 point');
  const asPublic = body.subarray(21, 21 + idlen);
  const record = body.subarray(21 + idlen);
  assert.ok(record.length <= rs, 'a single record');
  const uaPublic = keys.ecdh.getPublicKey();
  const shared = keys.ecdh.computeSecret(asPublic);
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), uaPublic, asPublic]);
  const ikm = Buffer.from(hkdfSync('sha256', shared, keys.auth, keyInfo, 32));
  const cek = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const decipher = createDecipheriv('aes-128-gcm', cek, nonce);
  decipher.setAuthTag(record.subarray(record.length - 16));
  const padded = Buffer.concat([decipher.update(record.subarray(0, record.length - 16)), decipher.final()]);
  // The last record ends with the delimiter 0x02, then zero padding.
  let end = padded.length - 1;
  while (end >= 0 && padded[end] === 0) end--;
  assert.equal(padded[end], 0x02, 'last-record delimiter');
  return padded.subarray(0, end).toString('utf8');
}
