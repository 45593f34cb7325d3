/**
 * Reads the docs/protocol.md §10 environment variables (and the optional SHINE_CONFIG_FILE under them) into a
 * ConfigInput. The only module of the server that touches process.env; callers pass it in.
 */
import { readFileSync } from 'node:fs';
import type { ConfigInput } from './config.js';
import { ConfigError } from './config.js';

/** Environment variable → ConfigInput field. Values stay text; resolveConfig parses and checks them. */
export const ENV_VARS = {
  SHINE_HOST: 'host',
  SHINE_PORT: 'port',
  SHINE_SERVER_LOGIN: 'serverLogin',
  SHINE_PUBLIC_WS_URL: 'publicWsUrl',
  SHINE_DATA_DIR: 'dataDir',
  SHINE_DB: 'db',
  SHINE_DB_POOL_SIZE: 'dbPoolSize',
  SHINE_SERVER_KEY_SEED_B64: 'serverKeySeedB64',
  SHINE_DIRECTORY_FILE: 'directoryFile',
  SHINE_PEERS: 'peers',
  SHINE_CHAIN_PARTNERS: 'chainPartners',
  SHINE_S2S_AUTH: 's2sAuth',
  SHINE_ADMIN_TOKEN: 'adminToken',
  SHINE_RETRY_SCHEDULE_MS: 'retryScheduleMs',
  SHINE_PEER_CHECK_ATTEMPTS: 'peerCheckAttempts',
  SHINE_WORKER_TICK_MS: 'workerTickMs',
  SHINE_S2S_TIMEOUT_MS: 's2sTimeoutMs',
  SHINE_FIRST_ATTEMPT_WAIT_MS: 'firstAttemptWaitMs',
  SHINE_SYNC_INTERVAL_MS: 'syncIntervalMs',
  SHINE_SYNC_ON_RETURN_MS: 'syncOnReturnMs',
  SHINE_WS_PING_INTERVAL_MS: 'wsPingIntervalMs',
  SHINE_SQLITE_SYNC: 'sqliteSync',
  SHINE_SQLITE_WRITER: 'sqliteWriter',
  SHINE_LOG_LEVEL: 'logLevel',
  SHINE_VAPID_PUBLIC_KEY: 'vapidPublicKey',
  SHINE_VAPID_PRIVATE_KEY: 'vapidPrivateKey',
  SHINE_VAPID_SUBJECT: 'vapidSubject',
  SHINE_WEBPUSH_ALLOW_INSECURE: 'webPushAllowInsecure',
  SHINE_WEBPUSH_RECEIPTS: 'webPushReceipts',
  SHINE_REDIS_URL: 'redisUrl',
  SHINE_REDIS_PREFIX: 'redisPrefix',
  SHINE_HEARTBEAT_INTERVAL_MS: 'heartbeatIntervalMs',
  SHINE_VERIFY_THREADS: 'verifyThreads',
  SHINE_AUTH_TIMEOUT_MS: 'authTimeoutMs',
  SHINE_MAX_CONNECTIONS_PER_ADDRESS: 'maxConnectionsPerAddress',
  SHINE_CHALLENGE_LIMIT: 'challengeLimit',
  SHINE_LOGIN_RATE_LIMIT: 'loginRateLimit',
} as const satisfies Record<string, keyof ConfigInput>;

export const CONFIG_FILE_VAR = 'SHINE_CONFIG_FILE';

const EMPTY_IS_A_VALUE: ReadonlySet<string> = new Set(['SHINE_PEER_CHECK_ATTEMPTS']);

/** ConfigInput from the environment; SHINE_CONFIG_FILE (JSON, ConfigInput keys) is merged under it. */
export function configInputFromEnv(env: NodeJS.ProcessEnv): ConfigInput {
  const file = env[CONFIG_FILE_VAR];
  const out: Record<string, unknown> = file ? { ...readConfigFile(file) } : {};
  for (const [name, field] of Object.entries(ENV_VARS)) {
    const value = env[name];
    // An empty variable means "not set", as shells make it easy to export one by accident — except
    // for a list where empty is a value of its own (SHINE_PEER_CHECK_ATTEMPTS= : no peer checks).
    if (value !== undefined && (value !== '' || EMPTY_IS_A_VALUE.has(name))) out[field] = value;
  }
  return out as ConfigInput;
}

/** Reads a JSON config file; keys are checked by resolveConfig. */
export function readConfigFile(path: string): ConfigInput {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ConfigError(CONFIG_FILE_VAR, `cannot read ${path}: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ConfigError(CONFIG_FILE_VAR, `${path} must hold a JSON object`);
  }
  return value as ConfigInput;
}
