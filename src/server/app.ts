/**
 * The composition root: the one place that creates infrastructure (store, keys, transport) and wires
 * every service. Everything else receives what it needs.
 */
import { mkdir } from 'node:fs/promises';
import { registerAuthOps } from './api/auth.js';
import { registerDirectoryOps } from './api/directory.js';
import { registerDmOps } from './api/dm.js';
import { OpRegistry } from './api/registry.js';
import { BackgroundQueue } from './background/queue.js';
import type { Clock } from './clock.js';
import { systemClock } from './clock.js';
import type { Config, ConfigInput } from './config/config.js';
import { UNFEDERATED_SERVER_LOGIN, bindConfigToPort, resolveConfig } from './config/config.js';
import type { AppContext } from './context.js';
import { sodiumVerifier } from './crypto/verifier.js';
import { bulkVerifier as bulkVerifierFor } from './crypto/verify-pool.js';
import { Directory } from './directory/service.js';
import { DmService } from './dm/service.js';
import { loadServerKey } from './keys.js';
import type { Logger } from './log.js';
import { createLogger } from './log.js';
import { Metrics } from './metrics.js';
import { SessionHub } from './sessions.js';
import type { Fanout } from './cluster/fanout.js';
import { LocalFanout, RedisFanout } from './cluster/fanout.js';
import { openStore } from './store/open.js';
import { Transport } from './transport/server.js';
import { adminApi } from './api/admin.js';
import { checkDatabase } from './check/service.js';
import { registerFederationOps } from './api/federation.js';
import { registerReplicationOps } from './api/replication.js';
import type { CallPush } from './calls/service.js';
import { CallService } from './calls/service.js';
import { registerCallOps } from './api/calls.js';
import { DeliveryEngine } from './delivery/engine.js';
import { DeliveryTrouble } from './delivery/trouble.js';
import { PeerPool } from './federation/peer-client.js';
import { FederationService } from './federation/service.js';
import { ReplicationService } from './replication/service.js';
import { pushAdminRoutes, registerPushOps } from './api/push.js';
import { PushService } from './push/service.js';
import { loadVapidIdentity } from './push/vapid.js';
import { ProcessRegistry } from './cluster/processes.js';
import { ClusterLimits } from './cluster/limits.js';
import { Redis } from 'ioredis';
import { ChainService } from './chains/service.js';
import { chainAdminRoutes, registerChainOps } from './api/chains.js';

/** A started server; close() (or `await using`) stops it and releases its port and database. */
export interface RunningServer extends AsyncDisposable {
  readonly config: Config;
  readonly ctx: AppContext;
  /** The bound port (the real one when the config asked for port 0). */
  readonly port: number;
  /** `http://host:port`, reachable from this machine. */
  readonly httpUrl: string;
  /** `ws://host:port/ws`, reachable from this machine (config.publicWsUrl is what other servers use). */
  readonly wsUrl: string;
  /** Resolves once no background task is running, tasks started by tasks included (tests wait on it). */
  drain(): Promise<void>;
  close(): Promise<void>;
}

export interface ServerDeps {
  clock?: Clock;
  log?: Logger;
  /** The `call` push to a callee's devices without a session (default: WebPush); tests may pass their own. */
  callPush?: CallPush;
}

/** Resolves the config, opens and migrates the store, loads the key, listens and serves. */
export async function startServer(input: ConfigInput, deps: ServerDeps = {}): Promise<RunningServer> {
  const resolved = resolveConfig(input);
  const clock = deps.clock ?? systemClock;
  const log = deps.log ?? createLogger(resolved.logLevel, undefined, { self: resolved.serverLogin });

  const background = new BackgroundQueue(log);
  await mkdir(resolved.dataDir, { recursive: true });
  const store = await openStore(resolved);
  // Stopped in reverse order of start: requests drain before the services they use stop, and those
  // before the store closes.
  const stoppers: [string, () => Promise<void> | void][] = [['store', () => store.close()]];
  const shutdown = async () => {
    // Background work is told to stop first, so no long task (a replication cycle) holds up the drain.
    background.abort();
    const steps = stoppers.splice(0).reverse();
    // The listener opened early, but its requests must drain before anything else stops.
    steps.sort((a, b) => Number(b[0] === 'transport') - Number(a[0] === 'transport'));
    for (const [name, step] of steps) {
      try {
        await step();
      } catch (err) {
        log.error('shutdown step failed', { step: name, err });
      }
    }
  };

  try {
    await store.migrate();
    const serverKey = await loadServerKey({ dataDir: resolved.dataDir, seedB64: resolved.serverKeySeedB64 });
    const transport = new Transport();
    const port = await transport.listen(resolved.host, resolved.port);
    stoppers.push(['transport', () => transport.close()]);
    const config = bindConfigToPort(resolved, port);

    const verifier = sodiumVerifier;
    const hub = new SessionHub();
    const metrics = new Metrics();
    // Before anything runs: a process that may not run beside the live ones stops here (docs/protocol.md §9.2).
    const processes = new ProcessRegistry({
      store,
      clock,
      log,
      metrics,
      intervalMs: config.heartbeatIntervalMs,
      redis: config.redisUrl !== undefined,
      port,
    });
    await processes.start();
    stoppers.push(['processes', () => processes.close()]);
    const limits = new ClusterLimits({
      clock,
      log,
      metrics,
      redis: config.redisUrl ? limitsRedis(config.redisUrl, log, stoppers) : null,
      prefix: config.redisPrefix,
    });
    const fanout: Fanout = config.redisUrl
      ? new RedisFanout({ hub, clock, log, metrics, redisUrl: config.redisUrl, prefix: config.redisPrefix })
      : new LocalFanout(hub);
    await fanout.start();
    // After the transport: sessions close before presence is taken out of Redis.
    stoppers.push(['fanout', () => fanout.close()]);
    metrics.gauge('background_tasks_running', 'Background tasks running now', () => background.size);
    metrics.gauge(
      'db_commits_total',
      'Database transactions committed by this process',
      () => store.commitStats().commits,
    );
    metrics.gauge(
      'db_writes_total',
      'Writes committed by this process (SQLite groups the writes of one turn of the event loop into one commit)',
      () => store.commitStats().writes,
    );
    metrics.gauge(
      'db_checkpoints_total',
      "WAL checkpoints run by this process's checkpoint threads (SQLite; 0 on PostgreSQL)",
      () => store.commitStats().checkpoints,
    );
    const directory = new Directory({ config, store, clock, verifier, log, serverKey, background });
    let delivery: DeliveryEngine | null = null;
    const peers = new PeerPool({
      serverLogin: config.serverLogin,
      sign: (text) => serverKey.sign(text),
      clock,
      log,
      timeoutMs: config.s2sTimeoutMs,
      // A call waits out the backoff, so it stays within a call timeout and half the shortest retry gap.
      reconnectMaxMs: Math.min(config.s2sTimeoutMs, Math.max(100, (config.retryScheduleMs[1] ?? 60_000) / 2)),
      resolveUrl: async (server) => (await directory.lookupServer(server))?.descriptor.wsUrl ?? null,
      onPeerAlive: (server) => {
        delivery?.peerAlive(server);
        replication.peerReturned(server);
      },
    });
    stoppers.push(['peers', () => peers.close()]);
    // After the services stop scheduling and before the peers and the store they use close.
    stoppers.push(['background', () => background.close()]);
    // Before the drain: a call to a peer that is down would hold it until the redial, up to a call timeout.
    stoppers.push(['calls to down peers', () => peers.closeDown()]);
    metrics.gauge(
      's2s_calls_open',
      'Server-to-server calls not finished yet, by peer (waiting for a connection included)',
      () => peers.openCalls(),
    );
    directory.attachPeers(peers);
    const trouble = new DeliveryTrouble({
      clock,
      log,
      urlOf: async (server) => (await directory.lookupServer(server))?.descriptor.wsUrl ?? null,
    });
    delivery = new DeliveryEngine(
      { config, clock, store, fanout, directory, peers, log, metrics, background, trouble, verifier, serverKey },
      { poolSize: config.deliveryPoolSize, queueSize: config.deliveryQueueSize },
    );
    const pushStore = store.push;
    const vapid = await loadVapidIdentity(config, pushStore);
    const push = new PushService({ config, clock, store: pushStore, fanout, log, metrics, vapid });
    stoppers.push(['push', () => push.close()]);
    const dm = new DmService({
      config,
      clock,
      store,
      fanout,
      directory,
      verifier,
      log,
      delivery,
      background,
      push,
      serverKey,
    });
    // Stopped after the replication that uses it.
    const bulkVerifier = bulkVerifierFor(config.verifyThreads);
    stoppers.push(['verify threads', () => bulkVerifier.close()]);
    // A peer that authenticates here is up: calls to it stop backing off; and when it had been here
    // before (its earlier session ended: a restart, a partition), a cycle with it starts soon.
    const authenticatedBefore = new Set<string>();
    const peerUp = {
      reachable: (server: string) => {
        peers.reachable(server);
        if (authenticatedBefore.has(server)) replication.peerReturned(server);
        else authenticatedBefore.add(server);
      },
    };
    const federation = new FederationService({
      config,
      clock,
      store,
      directory,
      dm,
      delivery,
      verifier,
      log,
      peers: peerUp,
      serverKey,
    });
    const chains = new ChainService({
      config,
      clock,
      store,
      directory,
      fanout,
      verifier,
      bulkVerifier,
      peers,
      sourceOf: (session, source) => federation.sourceOf(session, source),
      log,
      metrics,
      background,
    });
    const replication = new ReplicationService({
      chains,
      bulkVerifier,
      config,
      clock,
      store,
      directory,
      dm,
      federation,
      peers,
      log,
      metrics,
      background,
    });
    const calls = new CallService({
      config,
      clock,
      fanout,
      directory,
      peers,
      push: deps.callPush ?? push,
      log,
      sourceOf: (session, source) => federation.sourceOf(session, source),
      limits: limits.limiter,
    });
    const registry = new OpRegistry();
    registerAuthOps(registry, {
      config,
      challenges: limits.limiter('challenge', config.challengeLimit),
      clock,
      directory,
      hub,
      verifier,
      log,
      onLogin: async (session) =>
        background.run('replay after login', { login: session.login, deviceId: session.deviceId }, (signal) =>
          dm.onLogin(session, signal),
        ),
    });
    // One task replays to every open session; it settles when all are done, so resync requests that
    // arrive meanwhile make one more pass rather than one each.
    fanout.onResync(
      (sessions) =>
        new Promise<void>((resolve) => {
          if (background.signal.aborted) return resolve();
          background.run('replay after Redis came back', { sessions: sessions.length }, async (signal) => {
            try {
              await Promise.all(
                sessions.map((s) =>
                  dm.replayPending(s, signal).catch((err: unknown) => {
                    log.warn('replay after Redis came back failed', { login: s.login, deviceId: s.deviceId, err });
                  }),
                ),
              );
            } finally {
              resolve();
            }
          });
        }),
    );
    registerDirectoryOps(registry, directory);
    registerDmOps(registry, dm);
    registerFederationOps(registry, federation);
    registerReplicationOps(registry, replication);
    registerPushOps(registry, push);
    registerCallOps(registry, calls);
    registerChainOps(registry, chains);
    const adminRoutes = [
      ...adminApi({
        store,
        replication,
        peers: {
          directory,
          trouble,
          connected: (server) => peers.connected(server),
          down: (server) => peers.down(server),
        },
        processes,
        check: (opts) => checkDatabase({ store, verifier: bulkVerifier, nowMs: () => clock.now() }, opts),
      }),
      ...pushAdminRoutes(push),
      ...chainAdminRoutes(chains),
    ];
    const ctx: AppContext = {
      config,
      clock,
      log,
      metrics,
      store,
      hub,
      fanout,
      verifier,
      serverKey,
      directory,
      dm,
      push,
      chains,
      registry,
      limiter: limits.limiter,
      adminRoutes,
    };

    await directory.start();
    await chains.checkPartners();
    dm.start();
    stoppers.push(['dm', () => dm.close()]);
    const federated = config.serverLogin !== UNFEDERATED_SERVER_LOGIN;
    if (federated) {
      delivery.start();
      trouble.start();
      stoppers.push(['delivery', () => (trouble.close(), delivery.close())]);
    }
    transport.serve(ctx);
    if (federated) {
      chains.start();
      replication.start();
      stoppers.push(['replication', () => replication.close()]);
    }

    const httpUrl = `http://${urlHost(config.host)}:${port}`;
    const wsUrl = `ws://${urlHost(config.host)}:${port}/ws`;
    log.info('server started', {
      serverLogin: config.serverLogin,
      httpUrl,
      publicWsUrl: config.publicWsUrl,
      db: config.db.kind,
    });

    let closing: Promise<void> | null = null;
    const close = () =>
      (closing ??= shutdown().then(() => {
        log.info('server stopped', { serverLogin: config.serverLogin });
      }));
    const drain = () => background.drain();
    return { config, ctx, port, httpUrl, wsUrl, drain, close, [Symbol.asyncDispose]: close };
  } catch (err) {
    await shutdown();
    throw err;
  }
}

/**
 * The Redis connection of the per-login limits: a command fails at once while Redis is away (no
 * offline queue, a short timeout), so a request falls back to this process's buckets instead of waiting.
 */
function limitsRedis(url: string, log: Logger, stoppers: [string, () => Promise<void> | void][]): Redis {
  const redis = new Redis(url, { enableOfflineQueue: false, commandTimeout: 1_000, maxRetriesPerRequest: 0 });
  redis.on('error', (err: Error) => log.debug('limits Redis connection', { err: err.message }));
  stoppers.push(['limits redis', () => redis.disconnect()]);
  return redis;
}

/** A host this machine can connect to: wildcard addresses become loopback, IPv6 gets brackets. */
function urlHost(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}
