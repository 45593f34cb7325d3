/** WebPush operations (docs/protocol.md §5.5) and GET /debug/push: thin bindings of the registry to the push area. */
import { ShineError } from '../../protocol/errors.js';
import type { PushService } from '../push/service.js';
import type { AdminRoute } from './admin.js';
import type { OpRegistry } from './registry.js';

export function registerPushOps(r: OpRegistry, push: PushService): void {
  r.add('GetWebPushConfig', { auth: 'user', handle: async () => ({ vapidPublicKey: push.vapidPublicKey }) })
    .add('UpsertPushToken', { auth: 'user', handle: (p, s) => push.upsert(p, s) })
    .add('DeletePushToken', { auth: 'user', handle: (p, s) => push.remove(p, s) })
    .add('SendTestWebPush', { auth: 'user', handle: (_p, s) => push.sendTest(s) });
}

export function pushAdminRoutes(push: PushService): AdminRoute[] {
  return [
    {
      method: 'GET',
      path: '/debug/push',
      handle(url) {
        const owner = url.searchParams.get('owner');
        if (!owner) throw new ShineError('EMPTY_OWNER_LOGIN', 'owner is required');
        return push.health(owner);
      },
    },
  ];
}
