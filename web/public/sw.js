// SHiNE service worker: shows WebPush notifications (docs/protocol.md §5.5, docs/web-client.md). A push says only who wrote or
// calls, never what: the payload has no content, and the notification shows nothing more.
// It has no fetch handler on purpose: the client is never served stale.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

/** The notification for one payload {v:1, kind, fromLogin?}; null for one this worker does not know. */
function notificationFor(payload) {
  if (!payload || payload.v !== 1) return null;
  const from = typeof payload.fromLogin === 'string' ? payload.fromLogin : 'someone';
  switch (payload.kind) {
    case 'dm':
      // One notification per sender: a burst of messages replaces it instead of stacking up.
      return { title: `New message from ${from}`, options: { tag: `dm:${from}`, renotify: true } };
    case 'call':
      return { title: `Incoming call from ${from}`, options: { tag: `call:${from}`, requireInteraction: true } };
    case 'test':
      return { title: 'SHiNE notifications work', options: { tag: 'test' } };
    default:
      return null;
  }
}

self.addEventListener('push', (event) => {
  let payload = null;
  try {
    payload = event.data ? event.data.json() : null;
  } catch {
    payload = null;
  }
  // userVisibleOnly: every push must show something, so an unreadable one still says "something arrived".
  const shown = notificationFor(payload) ?? { title: 'SHiNE: something new', options: { tag: 'other' } };
  event.waitUntil(self.registration.showNotification(shown.title, shown.options));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  event.waitUntil(
    (async () => {
      const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
      const open = windows.find((c) => new URL(c.url).origin === self.location.origin);
      if (open) return open.focus();
      return self.clients.openWindow('/');
    })(),
  );
});
