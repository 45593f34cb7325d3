/** This server's VAPID identity (RFC 8292): one P-256 key pair per server, shared by all its processes. */
import { createECDH } from 'node:crypto';
import webpush from 'web-push';
import type { Config } from '../config/config.js';
import { ConfigError } from '../config/config.js';
import type { PushStore } from './store.js';

export interface VapidIdentity {
  subject: string;
  /** Unpadded base64url: the 65-byte uncompressed point, as `applicationServerKey` takes it. */
  publicKey: string;
  /** Unpadded base64url, 32 bytes. */
  privateKey: string;
}

const META_KEY = 'vapid_keys';

/**
 * The configured key pair, or the one kept in server_meta — made at first start. Whichever process of
 * a server starts first makes it; the others read the one it kept.
 */
export async function loadVapidIdentity(config: Config, store: Pick<PushStore, 'keepMeta'>): Promise<VapidIdentity> {
  if (config.vapid) {
    if (publicKeyOf(config.vapid.privateKey) !== config.vapid.publicKey)
      throw new ConfigError('vapidPublicKey', 'is not the public key of SHINE_VAPID_PRIVATE_KEY');
    return { subject: config.vapidSubject, ...config.vapid };
  }
  const made = webpush.generateVAPIDKeys();
  const kept = JSON.parse(await store.keepMeta(META_KEY, JSON.stringify(made))) as webpush.VapidKeys;
  return { subject: config.vapidSubject, publicKey: kept.publicKey, privateKey: kept.privateKey };
}

function publicKeyOf(privateKey: string): string {
  const ecdh = createECDH('prime256v1');
  ecdh.setPrivateKey(Buffer.from(privateKey, 'base64url'));
  return ecdh.getPublicKey().toString('base64url');
}
