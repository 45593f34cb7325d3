/** User chain operations (docs/protocol.md §14.2): AddBlock and GetChain for users, ReceiveBlock and GetChainHeads between partners. */
import type { ChainService } from '../chains/service.js';
import type { AdminRoute } from './admin.js';
import type { OpRegistry } from './registry.js';
import { ShineError } from '../../protocol/errors.js';

export function registerChainOps(r: OpRegistry, chains: ChainService): void {
  r.add('AddBlock', { auth: 'user', handle: (p, s) => chains.addBlock(p, s) })
    .add('GetChain', { auth: 'none', handle: (p) => chains.getChain(p) })
    .add('ReceiveBlock', { auth: 'server', handle: (p, s) => chains.receiveBlock(p, s) })
    .add('GetChainHeads', { auth: 'server', handle: (p, s) => chains.getChainHeads(p, s) });
}

/** GET /debug/chains?login= (docs/protocol.md §8, §14.3). */
export function chainAdminRoutes(chains: ChainService): AdminRoute[] {
  return [
    {
      method: 'GET',
      path: '/debug/chains',
      handle(url) {
        const login = url.searchParams.get('login');
        if (!login) throw new ShineError('BAD_FIELDS', 'login is required');
        return chains.debug(login);
      },
    },
  ];
}
