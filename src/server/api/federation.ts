/**
 * Server operations (SPEC §5.1, §5.4). They are open to any socket at the registry level: whether a
 * caller must have done ServerAuth depends on SHINE_S2S_AUTH, which FederationService.sourceOf decides.
 */
import { opSchemas } from '../../protocol/ops.js';
import type { FederationService } from '../federation/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function federationOps(fed: FederationService): OpGroup {
  return {
    ServerAuth: op({ auth: 'none', schema: opSchemas.ServerAuth, handle: (p, s) => fed.serverAuth(p, s) }),
    ReceiveIncomingMessage: op({ auth: 'none', schema: opSchemas.ReceiveIncomingMessage, handle: (p, s) => fed.receiveIncoming(p, s) }),
    ReceiveOutcomingMessage: op({ auth: 'none', schema: opSchemas.ReceiveOutcomingMessage, handle: (p, s) => fed.receiveOutgoing(p, s) }),
    GetDmDeliveryStatus: op({ auth: 'none', schema: opSchemas.GetDmDeliveryStatus, handle: (p, s) => fed.deliveryStatus(p, s) }),
  };
}
