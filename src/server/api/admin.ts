/** Admin and debug HTTP routes (docs/protocol.md §8), all behind the admin token. */
import { ShineError } from '../../protocol/errors.js';
import type { DeliveryState } from '../../protocol/ops.js';
import type { CheckReport } from '../check/service.js';
import type { ProcessRegistry } from '../cluster/processes.js';
import type { DeliveryTrouble } from '../delivery/trouble.js';
import type { Directory } from '../directory/service.js';
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

/** What /debug/peers needs beyond the store: the servers known, which are connected or down, and call health. */
export interface PeerView {
  directory: Pick<Directory, 'peerServers'>;
  connected(serverLogin: string): boolean;
  /** The last connection failed and no dial has succeeded since (PeerCaller.down). */
  down(serverLogin: string): boolean;
  trouble: Pick<DeliveryTrouble, 'get'>;
}

export function adminApi(deps: {
  store: Pick<Store, 'delivery' | 'replication'>;
  replication: ReplicationService;
  peers: PeerView;
  processes: Pick<ProcessRegistry, 'processId' | 'list'>;
  /** `shine check` on this server's database (src/server/check/service.ts). */
  check: (opts: { repair: boolean }) => Promise<CheckReport>;
}): AdminRoute[] {
  const { store, replication, peers, processes, check } = deps;
  return [
    {
      method: 'GET',
      path: '/debug/delivery',
      async handle(url) {
        const state = (url.searchParams.get('state') ?? 'accepted') as DeliveryState;
        if (!STATES.includes(state)) throw new ShineError('BAD_FIELDS', 'state must be accepted, delivered or failed');
        const limit = Math.min(1000, Math.max(1, Number(url.searchParams.get('limit') ?? 200) || 200));
        return { state, rows: await store.delivery.listDeliveries(state, limit) };
      },
    },
    {
      method: 'GET',
      path: '/debug/outbox',
      async handle(url) {
        const owner = url.searchParams.get('owner');
        if (!owner) throw new ShineError('EMPTY_OWNER_LOGIN', 'owner is required');
        return { owner, ...(await store.replication.outboxCounts(owner)) };
      },
    },
    {
      method: 'GET',
      path: '/debug/peers',
      async handle() {
        const servers = await peers.directory.peerServers();
        return {
          peers: await Promise.all(
            servers.map(async ({ serverLogin, wsUrl }) => {
              const health = peers.trouble.get(serverLogin);
              return {
                serverLogin,
                wsUrl,
                connected: peers.connected(serverLogin),
                down: peers.down(serverLogin),
                notAnswering: health?.notAnswering ?? false,
                state: health?.state ?? 'unknown',
                lastSuccessAtMs: health?.lastSuccessAtMs ?? null,
                consecutiveFailures: health?.consecutiveFailures ?? 0,
                lastError: health?.lastError ?? null,
                failingSinceMs: health?.failingSinceMs ?? null,
                dueRows: await store.delivery.countAcceptedFor(serverLogin),
              };
            }),
          ),
        };
      },
    },
    {
      method: 'GET',
      path: '/debug/processes',
      async handle() {
        return { self: processes.processId, processes: await processes.list() };
      },
    },
    { method: 'POST', path: '/admin/sync', handle: () => replication.runCycle() },
    {
      method: 'POST',
      path: '/admin/repair',
      handle: (url) => replication.repairNow(url.searchParams.get('owner') || null),
    },
    {
      method: 'POST',
      path: '/admin/mark-unsynced',
      handle: (url) => store.replication.markUnsynced(url.searchParams.get('owner') || null),
    },
    {
      method: 'POST',
      path: '/admin/check',
      handle(url) {
        const repair = url.searchParams.get('repair') ?? '0';
        if (repair !== '0' && repair !== '1') throw new ShineError('BAD_FIELDS', 'repair must be 0 or 1');
        return check({ repair: repair === '1' });
      },
    },
  ];
}
