/** Admin and debug HTTP routes (SPEC §8), all behind the admin token. */
import { ShineError } from '../../protocol/errors.js';
import type { DeliveryState } from '../../protocol/ops.js';
import type { ReplicationService } from '../replication/service.js';
import type { Store } from '../store/types.js';
import type { IncomingMessage } from 'node:http';

/** A route under /admin or /debug; only reached with the admin token. Answers JSON. */
export interface AdminRoute {
  method: 'GET' | 'POST';
  /** Exact path, e.g. `/debug/delivery`. */
  path: string;
  handle(url: URL, req: IncomingMessage): Promise<unknown>;
}

const STATES: readonly DeliveryState[] = ['accepted', 'delivered', 'failed'];

export function adminApi(deps: { store: Store; replication: ReplicationService }): AdminRoute[] {
  const { store, replication } = deps;
  return [
    {
      method: 'GET',
      path: '/debug/delivery',
      async handle(url) {
        const state = (url.searchParams.get('state') ?? 'accepted') as DeliveryState;
        if (!STATES.includes(state)) throw new ShineError('BAD_FIELDS', 'state must be accepted, delivered or failed');
        const limit = Math.min(1000, Math.max(1, Number(url.searchParams.get('limit') ?? 200) || 200));
        return { state, rows: await store.listDeliveries(state, limit) };
      },
    },
    {
      method: 'GET',
      path: '/debug/outbox',
      async handle(url) {
        const owner = url.searchParams.get('owner');
        if (!owner) throw new ShineError('EMPTY_OWNER_LOGIN', 'owner is required');
        return { owner, ...(await store.outboxCounts(owner)) };
      },
    },
    { method: 'POST', path: '/admin/sync', handle: () => replication.runCycle() },
    {
      method: 'POST',
      path: '/admin/mark-unsynced',
      handle: (url) => store.markUnsynced(url.searchParams.get('owner') || null),
    },
  ];
}
