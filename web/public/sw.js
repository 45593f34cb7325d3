// SHiNE service worker. For now it only takes control; WebPush (docs/protocol.md §5.5, §12) adds its push and
// notificationclick handlers here. It has no fetch handler on purpose: the client is never served stale.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
