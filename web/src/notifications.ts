/**
 * WebPush opt-in (docs/protocol.md §5.5, docs/web-client.md): the service worker /sw.js, a PushManager subscription under the
 * server's VAPID key, and the subscription as UpsertPushToken takes it. The worker shows who wrote,
 * never what: the push payload carries no content.
 */
import { fromBase64 } from '../../src/protocol/bytes.js';

export interface PushSubscriptionFields {
  endpoint: string;
  p256dhB64: string;
  authB64: string;
}

/** Unpadded base64url (the VAPID key as GetWebPushConfig gives it) → bytes; null when it is not. */
export function fromBase64Url(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) return null;
  const standard = text.replace(/-/g, '+').replace(/_/g, '/');
  return fromBase64(standard + '='.repeat((4 - (standard.length % 4)) % 4));
}

/** Whether this browser can receive pushes at all (service workers, PushManager, notifications). */
export function pushSupported(): boolean {
  return 'serviceWorker' in navigator && 'PushManager' in globalThis && 'Notification' in globalThis;
}

/** The fields UpsertPushToken takes, from a subscription's toJSON() (keys already base64url). */
export function subscriptionFields(sub: PushSubscription): PushSubscriptionFields {
  const json = sub.toJSON();
  const p256dhB64 = json.keys?.p256dh;
  const authB64 = json.keys?.auth;
  if (!json.endpoint || !p256dhB64 || !authB64) throw new Error('The browser gave a push subscription without keys.');
  return { endpoint: json.endpoint, p256dhB64, authB64 };
}

/** This page's current subscription, if notifications were enabled before (no prompt, no registration). */
export async function currentSubscription(): Promise<PushSubscription | null> {
  if (!pushSupported()) return null;
  const reg = await navigator.serviceWorker.getRegistration('/');
  return (await reg?.pushManager.getSubscription()) ?? null;
}

/**
 * Asks for permission, registers /sw.js and subscribes with vapidKey. A browser that cannot reach
 * its push service (or refuses) fails here with its own reason, which the caller shows.
 */
export async function subscribePush(vapidKey: string): Promise<PushSubscription> {
  if (!pushSupported()) throw new Error('This browser cannot show notifications.');
  const key = fromBase64Url(vapidKey);
  if (!key || key.length !== 65) throw new Error('The server sent an unusable notification key.');
  if ((await Notification.requestPermission()) !== 'granted') throw new Error('Notifications are blocked.');
  await navigator.serviceWorker.register('/sw.js');
  const reg = await navigator.serviceWorker.ready;
  const existing = await reg.pushManager.getSubscription();
  if (existing && sameKey(existing, key)) return existing;
  // A subscription under another key (the server's changed) would never get a push through.
  await existing?.unsubscribe();
  try {
    return await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key as BufferSource });
  } catch (err) {
    throw new Error(`The browser's push service refused: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function sameKey(sub: PushSubscription, key: Uint8Array): boolean {
  const had = sub.options.applicationServerKey;
  if (!had) return false;
  const bytes = new Uint8Array(had);
  return bytes.length === key.length && bytes.every((b, i) => b === key[i]);
}
