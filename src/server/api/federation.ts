/** Server operations (SPEC §5.1, §5.4). ServerAuth is what makes a socket a server session. */
import { opSchemas } from '../../protocol/ops.js';
import type { FederationService } from '../federation/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function federationOps(fed: FederationService): OpGroup {
  return {
    ServerAuth: op({ auth: 'none', schema: opSchemas.ServerAuth, handle: (p, s) => fed.serverAuth(p, s) }),
    ReceiveIncomingMessage: op({
      auth: 'server',
      schema: opSchemas.ReceiveIncomingMessage,
      handle: (p, s) => fed.receiveIncoming(p, s),
    }),
    ReceiveOutcomingMessage: op({
      auth: 'server',
      schema: opSchemas.ReceiveOutcomingMessage,
      handle: (p, s) => fed.receiveOutgoing(p, s),
    }),
    GetDmDeliveryStatus: op({
      auth: 'server',
      schema: opSchemas.GetDmDeliveryStatus,
      handle: (p, s) => fed.deliveryStatus(p, s),
    }),
  };
}
