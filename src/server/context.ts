/** Everything the server is made of, wired once by the composition root (app.ts). */
import type { SignatureVerifier } from '../protocol/ed25519.js';
import type { OpRegistry } from './api/registry.js';
import type { Clock } from './clock.js';
import type { Config } from './config/config.js';
import type { Directory } from './directory/service.js';
import type { DmService } from './dm/service.js';
import type { ChainService } from './chains/service.js';
import type { ServerKey } from './keys.js';
import type { Logger } from './log.js';
import type { Metrics } from './metrics.js';
import type { PushService } from './push/service.js';
import type { SessionHub } from './sessions.js';
import type { Fanout } from './cluster/fanout.js';
import type { Store } from './store/types.js';
import type { AdminRoute } from './api/admin.js';
import type { LimiterFactory } from './cluster/limits.js';

export interface AppContext {
  readonly config: Config;
  readonly clock: Clock;
  readonly log: Logger;
  readonly metrics: Metrics;
  readonly store: Store;
  /** This process's sessions. */
  readonly hub: SessionHub;
  /** Events and presence across every process of this server. */
  readonly fanout: Fanout;
  readonly verifier: SignatureVerifier;
  readonly serverKey: ServerKey;
  readonly directory: Directory;
  readonly dm: DmService;
  readonly push: PushService;
  /** User chains and their partners (docs/protocol.md §14). */
  readonly chains: ChainService;
  readonly registry: OpRegistry;
  /** Rate limits per key, shared by the processes of this server through Redis when it has Redis. */
  readonly limiter: LimiterFactory;
  /** Routes behind the admin token under /admin and /debug. */
  readonly adminRoutes: readonly AdminRoute[];
}
