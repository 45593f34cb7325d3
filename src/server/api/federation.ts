/** Server operations (docs/protocol.md §5.1, §5.4). ServerAuth is what makes a socket a server session. */
import type { FederationService } from '../federation/service.js';
import type { OpRegistry } from './registry.js';

export function registerFederationOps(r: OpRegistry, fed: FederationService): void {
  r.add('ServerAuth', { auth: 'none', handle: (p, s) => fed.serverAuth(p, s) })
    .add('ReceiveIncomingMessage', { auth: 'server', handle: (p, s) => fed.receiveIncoming(p, s) })
    .add('ReceiveOutcomingMessage', { auth: 'server', handle: (p, s) => fed.receiveOutgoing(p, s) })
    .add('GetDmDeliveryStatus', { auth: 'server', handle: (p, s) => fed.deliveryStatus(p, s) });
}
