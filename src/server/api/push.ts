/** WebPush operations (SPEC §5.5) and GET /debug/push: thin bindings of the registry to the push area. */
import { ShineError } from '../../protocol/errors.js';
import { opSchemas } from '../../protocol/ops.js';
import type { PushService } from '../push/service.js';
import type { AdminRoute } from '../transport/http.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function pushOps(push: PushService): OpGroup {
  return {
    GetWebPushConfig: op({
      auth: 'user',
      schema: opSchemas.GetWebPushConfig,
      handle: async () => ({ vapidPublicKey: push.vapidPublicKey }),
    }),
    UpsertPushToken: op({ auth: 'user', schema: opSchemas.UpsertPushToken, handle: (p, s) => push.upsert(p, s) }),
    DeletePushToken: op({ auth: 'user', schema: opSchemas.DeletePushToken, handle: (p, s) => push.remove(p, s) }),
    SendTestWebPush: op({ auth: 'user', schema: opSchemas.SendTestWebPush, handle: (_p, s) => push.sendTest(s) }),
  };
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
