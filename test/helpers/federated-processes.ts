/**
 * Federated `shine serve` processes on loopback, for fault tests and benchmarks: ports are chosen up
 * front so every server's SHINE_PEERS can name all the others. Also reads of what the processes hold
 * (whole dialog histories, /debug rows, /metrics counters) shared by those tests and benchmarks.
 */
import WebSocket from 'ws';
import type { HistoryItem, Identity, UserProfile } from '../../src/client/index.js';
import { ShineClient, makeProfile } from '../../src/client/index.js';
import type { ServerProcess } from './server-process.js';
import { freePort, startServerProcess } from './server-process.js';
import { waitUntil } from './wait.js';

export interface FederatedSpec {
  serverLogin: string;
  /** Extra environment of this server only. */
  env?: Record<string, string>;
  /** Its port (default: a free one). */
  port?: number;
  /**
   * Its SHINE_PUBLIC_WS_URL: the URL in its descriptor, which its peers' calls dial (they fetch the
   * descriptor from the SHINE_PEERS address, its own port), e.g. a relay (test/helpers/ws-proxy.ts) in
   * front of `port`.
   */
  publicWsUrl?: string;
  /** Runs before the process starts, on its fresh database (see ServerProcessOptions.beforeStart). */
  beforeStart?: (dbUrl: string) => Promise<void>;
}

/** The admin token every process of startFederatedProcesses gets (so /debug is reachable). */
export const ADMIN_TOKEN = 'fault-test-admin-token';

/**
 * Starts one process per spec, in parallel, each with SHINE_SERVER_LOGIN, SHINE_PEERS naming all the
 * others, SHINE_ADMIN_TOKEN, and `env` (shared) under the spec's own env.
 */
export async function startFederatedProcesses(
  specs: FederatedSpec[],
  env: Record<string, string> = {},
): Promise<ServerProcess[]> {
  const ports = await Promise.all(specs.map((s) => s.port ?? freePort()));
  const started = await Promise.allSettled(
    specs.map((spec, i) =>
      startServerProcess({
        port: ports[i]!,
        ...(spec.beforeStart ? { beforeStart: spec.beforeStart } : {}),
        env: {
          SHINE_LOG_LEVEL: process.env.SHINE_TEST_LOG_LEVEL ?? 'error',
          SHINE_SERVER_LOGIN: spec.serverLogin,
          SHINE_PEERS: specs
            .map((other, j) => (j === i ? null : `${other.serverLogin}=ws://127.0.0.1:${ports[j]}/ws`))
            .filter((p) => p !== null)
            .join(','),
          SHINE_ADMIN_TOKEN: ADMIN_TOKEN,
          ...(spec.publicWsUrl ? { SHINE_PUBLIC_WS_URL: spec.publicWsUrl } : {}),
          ...env,
          ...spec.env,
        },
      }),
    ),
  );
  const ok = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) {
    await Promise.all(ok.map((p) => p.close()));
    throw failed.reason;
  }
  return ok;
}

/** The identity's version-1 profile; a fixed updatedAtMs, so registering it again is idempotent. */
export function profileOf(identity: Identity, accessServers: string[]): UserProfile {
  return makeProfile(identity, accessServers, 1, 1_774_700_000_000);
}

/** Connects to wsUrl, registers the identity with accessServers (idempotent) and logs in as deviceId. */
export async function connectIdentity(
  wsUrl: string,
  identity: Identity,
  accessServers: string[],
  deviceId: string,
): Promise<ShineClient> {
  const client = await ShineClient.connect(wsUrl, { WebSocket: WebSocket as never });
  try {
    await client.register(profileOf(identity, accessServers));
    await client.login(identity, deviceId);
  } catch (err) {
    await client.close();
    throw err;
  }
  return client;
}

/** Every item of the session user's dialog with peer (types 1 and 2), newest first, all pages. */
export async function wholeHistory(client: ShineClient, peer: string): Promise<HistoryItem[]> {
  const items: HistoryItem[] = [];
  let before = { timeMs: 0, messageKey: '' };
  for (;;) {
    const page = await client.request('GetDirectMessages', {
      peerLogin: peer,
      beforeTimeMs: before.timeMs,
      beforeMessageKey: before.messageKey,
      limit: 200,
    });
    items.push(...page.items);
    if (!page.hasMore) return items;
    before = { timeMs: page.nextBeforeTimeMs, messageKey: page.nextBeforeMessageKey };
  }
}

/**
 * One warm-up pair from sender to `to`, once the sender's server knows `to` (an import may outlast the
 * request's deadline on a loaded machine and arrive a moment later), waited for until `delivered`.
 */
export async function warmUp(sender: ShineClient, to: string): Promise<void> {
  await waitUntil(
    () =>
      sender.getProfile(to, { refresh: true }).then(
        () => true,
        () => false,
      ),
    30_000,
    `${to} known to the sender's server`,
  );
  const sent = await sender.sendText(to, 'warm-up');
  if (sent.deliveryState === 'delivered') return;
  await waitUntil(
    async () =>
      (await wholeHistory(sender, to)).some(
        (h) => h.messageKey === sent.outgoingKey && h.deliveryState === 'delivered',
      ),
    30_000,
    'warm-up delivered',
  );
}

/** GET an admin/debug route of a process with the admin token; throws unless 200. */
export async function adminGet<T>(server: Pick<ServerProcess, 'httpUrl'>, path: string): Promise<T> {
  const res = await fetch(`${server.httpUrl}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  if (!res.ok) throw new Error(`GET ${path} answered ${res.status}`);
  return (await res.json()) as T;
}

export { metricSum } from './metrics.js';
