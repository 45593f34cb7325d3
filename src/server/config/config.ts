/**
 * Typed, validated server configuration (docs/protocol.md §10). Env, config file and flags all produce a
 * ConfigInput; resolveConfig applies the defaults and every cross-field check in one place.
 */
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { fromBase64 } from '../../protocol/bytes.js';
import { isValidLogin } from '../../protocol/login.js';
import type { LogLevel } from '../log.js';
import { LOG_LEVELS } from '../log.js';
import type { SqliteWriter } from '../store/sqlite/threaded.js';

export type DbConfig = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string };

export interface PeerConfig {
  serverLogin: string;
  wsUrl: string;
}

export interface RateLimitConfig {
  /** Requests a connection may make per second, sustained. */
  perSecond: number;
  /** Requests a connection may make in one burst. */
  burst: number;
}

export interface Config {
  host: string;
  /** The listening port; 0 in the input means "any free port", filled in by bindConfigToPort. */
  port: number;
  serverLogin: string;
  /** URL other servers use to reach this one; '' only until a port-0 server has bound its port. */
  publicWsUrl: string;
  dataDir: string;
  db: DbConfig;
  /** PostgreSQL connections in this process's pool (docs/protocol.md §9.2). */
  dbPoolSize: number;
  serverKeySeedB64?: string | undefined;
  directoryFile?: string | undefined;
  peers: PeerConfig[];
  /** Servers that mirror every user chain with this one (docs/protocol.md §14.3); each a known peer. */
  chainPartners: string[];
  s2sAuth: 'required' | 'off';
  adminToken?: string | undefined;
  /** Attempt offsets from acceptance; starts with 0, strictly increasing. */
  retryScheduleMs: number[];
  /** 1-based attempt numbers preceded by GetDmDeliveryStatus on the sender's other server. */
  peerCheckAttempts: number[];
  workerTickMs: number;
  s2sTimeoutMs: number;
  firstAttemptWaitMs: number;
  syncIntervalMs: number;
  /** A replication cycle with a peer that shows life again after failures starts this soon (docs/protocol.md §7). */
  syncOnReturnMs: number;
  sqliteSync: 'full' | 'normal';
  /** Where SQLite's writes and commits run: on the event loop, on a thread of their own, or on either by load. */
  sqliteWriter: SqliteWriter;
  logLevel: LogLevel;
  rateLimit: RateLimitConfig;
  /** Requests of one login across all its sessions (docs/protocol.md §5); default twice rateLimit. */
  loginRateLimit: RateLimitConfig;
  /** A socket that has not completed AuthLogin or ServerAuth within this is closed with 1008. */
  authTimeoutMs: number;
  /** Open WebSocket connections from one source address (per process); more upgrades get HTTP 429. */
  maxConnectionsPerAddress: number;
  /** AuthChallenge requests from one source address (across processes with Redis); more get 429. */
  challengeLimit: RateLimitConfig;
  authChallengeTtlMs: number;
  maxTimeSkewMs: number;
  deviceForgetMs: number;
  /** A remote user's imported profile older than this is refreshed before delivering to it (docs/protocol.md §4). */
  profileRefreshMs: number;
  /** Delivery attempts running at once. */
  deliveryPoolSize: number;
  /** Due rows waiting for the attempt pool; the worker scans no more while it is full. */
  deliveryQueueSize: number;
  /** A socket whose unsent output grows past this is closed instead of buffering more. */
  wsMaxBufferedBytes: number;
  /** Client sockets are pinged this often; one that has not answered the previous ping is terminated. */
  wsPingIntervalMs: number;
  /** Pages one replication pull of one owner may take in a cycle; a peer that pages on past it is cut off. */
  syncMaxPages: number;
  /** WebPush (docs/protocol.md §5.5): this server's VAPID key pair, unpadded base64url; made and kept in the database when unset. */
  vapid?: { publicKey: string; privateKey: string } | undefined;
  /** VAPID subject; default `mailto:admin@<serverLogin>.invalid`. */
  vapidSubject: string;
  /** Tests only: also accept `http://127.0.0.1:*` push endpoints. */
  webPushAllowInsecure: boolean;
  /** Also push for read receipts (type 3 copies). */
  webPushReceipts: boolean;
  /** Pushes waiting for a sender; more are dropped and counted. */
  pushQueueSize: number;
  /** Push requests in flight at once. */
  pushConcurrency: number;
  /** A push request without an answer after this is a network failure. */
  pushTimeoutMs: number;
  /** Redis for event fan-out and presence between processes of this server (docs/protocol.md §9.2); unset: one process. */
  redisUrl?: string | undefined;
  /** Prefix of every Redis key and channel; default `shine:<serverLogin>:`. */
  redisPrefix: string;
  /** Each process refreshes its heartbeat row this often; a row counts as live for 3 intervals (docs/protocol.md §9.2). */
  heartbeatIntervalMs: number;
  /** Worker threads that check a replication page's signatures; 0 checks them on the event loop. */
  verifyThreads: number;
}

/**
 * What callers pass: every field optional. Scalar and list fields also accept their text form (as in
 * the environment), so env, flags and config files need no parsing of their own.
 */
export interface ConfigInput {
  host?: string | undefined;
  port?: number | string | undefined;
  serverLogin?: string | undefined;
  publicWsUrl?: string | undefined;
  dataDir?: string | undefined;
  /** `sqlite:PATH`, `postgres://…`, or the parsed form. */
  db?: string | DbConfig | undefined;
  dbPoolSize?: number | string | undefined;
  serverKeySeedB64?: string | undefined;
  directoryFile?: string | undefined;
  /** `login=wsUrl,…` or the parsed form. */
  peers?: string | PeerConfig[] | undefined;
  /** `login,login,…` or the parsed form. */
  chainPartners?: string | string[] | undefined;
  s2sAuth?: string | undefined;
  adminToken?: string | undefined;
  retryScheduleMs?: string | number[] | undefined;
  peerCheckAttempts?: string | number[] | undefined;
  workerTickMs?: number | string | undefined;
  s2sTimeoutMs?: number | string | undefined;
  firstAttemptWaitMs?: number | string | undefined;
  syncIntervalMs?: number | string | undefined;
  syncOnReturnMs?: number | string | undefined;
  sqliteSync?: string | undefined;
  sqliteWriter?: string | undefined;
  logLevel?: string | undefined;
  rateLimit?: Partial<RateLimitConfig> | undefined;
  /** `perSecond,burst` or the parsed form. */
  loginRateLimit?: string | Partial<RateLimitConfig> | undefined;
  authTimeoutMs?: number | string | undefined;
  maxConnectionsPerAddress?: number | string | undefined;
  /** `perSecond,burst` or the parsed form. */
  challengeLimit?: string | Partial<RateLimitConfig> | undefined;
  authChallengeTtlMs?: number | string | undefined;
  maxTimeSkewMs?: number | string | undefined;
  deviceForgetMs?: number | string | undefined;
  profileRefreshMs?: number | string | undefined;
  deliveryPoolSize?: number | string | undefined;
  deliveryQueueSize?: number | string | undefined;
  wsMaxBufferedBytes?: number | string | undefined;
  wsPingIntervalMs?: number | string | undefined;
  syncMaxPages?: number | string | undefined;
  vapidPublicKey?: string | undefined;
  vapidPrivateKey?: string | undefined;
  vapidSubject?: string | undefined;
  redisUrl?: string | undefined;
  redisPrefix?: string | undefined;
  heartbeatIntervalMs?: number | string | undefined;
  verifyThreads?: number | string | undefined;
  /** `1`/`true` or `0`/`false` (or a boolean). */
  webPushAllowInsecure?: string | boolean | undefined;
  webPushReceipts?: string | boolean | undefined;
  pushQueueSize?: number | string | undefined;
  pushConcurrency?: number | string | undefined;
  pushTimeoutMs?: number | string | undefined;
}

const DAY_MS = 24 * 60 * 60 * 1000;

export const CONFIG_DEFAULTS = {
  host: '127.0.0.1',
  port: 8080,
  serverLogin: 'local',
  dataDir: './data',
  dbPoolSize: 10,
  s2sAuth: 'required',
  retryScheduleMs: [0, 30_000, 300_000, 1_500_000, 3_600_000],
  peerCheckAttempts: [3, 4, 5],
  workerTickMs: 5_000,
  s2sTimeoutMs: 10_000,
  firstAttemptWaitMs: 3_000,
  syncIntervalMs: 21_600_000,
  syncOnReturnMs: 10_000,
  sqliteSync: 'full',
  // By load: on the event loop, and on the writer thread only while commits run large and a core idles
  // (the thread paid only where a core was idle; docs/performance.md, thirtieth session).
  sqliteWriter: 'auto',
  logLevel: 'info',
  rateLimit: { perSecond: 200, burst: 400 },
  authTimeoutMs: 30_000,
  maxConnectionsPerAddress: 100,
  challengeLimit: { perSecond: 5, burst: 20 },
  authChallengeTtlMs: 60_000,
  maxTimeSkewMs: 300_000,
  deviceForgetMs: 30 * DAY_MS,
  profileRefreshMs: 60_000,
  // Each attempt mostly waits (its claim's commit, the peer's answer and commit, its outcome's commit), so the
  // pool, not the CPU, set a backlog's pace: 32 drained 440 pairs/s over a 50 ms link, 256 drained 1 700
  // (docs/performance.md, thirty-eighth session).
  deliveryPoolSize: 256,
  deliveryQueueSize: 1024,
  wsMaxBufferedBytes: 16 * 1024 * 1024,
  wsPingIntervalMs: 30_000,
  syncMaxPages: 1_000,
  pushQueueSize: 10_000,
  pushConcurrency: 16,
  pushTimeoutMs: 10_000,
  heartbeatIntervalMs: 5_000,
} as const satisfies Partial<Config>;

/** One thread per core beside the event loop's, at least one and at most four. */
function defaultVerifyThreads(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

/** The serverLogin of a server that is not federated (server ops answer LOCAL_SERVER_NOT_CONFIGURED). */
export const UNFEDERATED_SERVER_LOGIN = 'local';

const INPUT_KEYS: ReadonlySet<string> = new Set<keyof ConfigInput>([
  'host',
  'port',
  'serverLogin',
  'publicWsUrl',
  'dataDir',
  'db',
  'dbPoolSize',
  'serverKeySeedB64',
  'directoryFile',
  'peers',
  'chainPartners',
  's2sAuth',
  'adminToken',
  'retryScheduleMs',
  'peerCheckAttempts',
  'workerTickMs',
  's2sTimeoutMs',
  'firstAttemptWaitMs',
  'syncIntervalMs',
  'syncOnReturnMs',
  'sqliteSync',
  'sqliteWriter',
  'logLevel',
  'rateLimit',
  'loginRateLimit',
  'authTimeoutMs',
  'maxConnectionsPerAddress',
  'challengeLimit',
  'authChallengeTtlMs',
  'maxTimeSkewMs',
  'deviceForgetMs',
  'profileRefreshMs',
  'deliveryPoolSize',
  'deliveryQueueSize',
  'wsMaxBufferedBytes',
  'wsPingIntervalMs',
  'syncMaxPages',
  'vapidPublicKey',
  'vapidPrivateKey',
  'vapidSubject',
  'webPushAllowInsecure',
  'webPushReceipts',
  'pushQueueSize',
  'pushConcurrency',
  'pushTimeoutMs',
  'redisUrl',
  'redisPrefix',
  'heartbeatIntervalMs',
  'verifyThreads',
]);

/** Raised for any invalid setting; the message names the field. */
export class ConfigError extends Error {
  constructor(field: string, problem: string) {
    super(`config ${field}: ${problem}`);
    this.name = 'ConfigError';
  }
}

/** Applies defaults and validates; throws ConfigError naming the first bad field. */
export function resolveConfig(input: ConfigInput = {}): Config {
  for (const key of Object.keys(input)) {
    if (!INPUT_KEYS.has(key)) throw new ConfigError(key, 'unknown setting');
  }
  const d = CONFIG_DEFAULTS;
  const host = nonEmpty('host', input.host ?? d.host);
  const port = int('port', input.port ?? d.port, 0, 65_535);
  const serverLogin = input.serverLogin ?? d.serverLogin;
  if (!isValidLogin(serverLogin)) throw new ConfigError('serverLogin', `"${serverLogin}" is not a valid login`);
  const dataDir = nonEmpty('dataDir', input.dataDir ?? d.dataDir);

  let publicWsUrl = input.publicWsUrl ?? '';
  if (publicWsUrl !== '') wsUrl('publicWsUrl', publicWsUrl);
  else if (port !== 0) publicWsUrl = defaultWsUrl(host, port);

  const retryScheduleMs = intList('retryScheduleMs', input.retryScheduleMs ?? d.retryScheduleMs, 0);
  if (retryScheduleMs[0] !== 0) throw new ConfigError('retryScheduleMs', 'must start with 0');
  if (!strictlyIncreasing(retryScheduleMs)) throw new ConfigError('retryScheduleMs', 'must be strictly increasing');
  // The default names attempts 3–5; a shorter schedule simply has fewer of them. A list given
  // explicitly must fit the schedule.
  const peerCheckAttempts =
    input.peerCheckAttempts === undefined
      ? d.peerCheckAttempts.filter((n) => n <= retryScheduleMs.length)
      : intList('peerCheckAttempts', input.peerCheckAttempts, 1, true);
  if (!strictlyIncreasing(peerCheckAttempts)) throw new ConfigError('peerCheckAttempts', 'must be strictly increasing');
  const lastAttempt = peerCheckAttempts.at(-1);
  if (lastAttempt !== undefined && lastAttempt > retryScheduleMs.length) {
    throw new ConfigError(
      'peerCheckAttempts',
      `attempt ${lastAttempt} is past the ${retryScheduleMs.length} attempts of retryScheduleMs`,
    );
  }

  const rateLimit = rate('rateLimit', input.rateLimit);
  const config: Config = {
    host,
    port,
    serverLogin,
    publicWsUrl,
    dataDir,
    db: parseDb(input.db ?? { kind: 'sqlite', path: join(dataDir, 'shine.sqlite') }),
    dbPoolSize: int('dbPoolSize', input.dbPoolSize ?? d.dbPoolSize, 1),
    serverKeySeedB64: seed(input.serverKeySeedB64),
    directoryFile: optionalNonEmpty('directoryFile', input.directoryFile),
    peers: parsePeers(input.peers ?? []),
    chainPartners: parseChainPartners(input.chainPartners ?? []),
    s2sAuth: oneOf('s2sAuth', input.s2sAuth ?? d.s2sAuth, ['required', 'off'] as const),
    adminToken: optionalNonEmpty('adminToken', input.adminToken),
    retryScheduleMs,
    peerCheckAttempts,
    workerTickMs: int('workerTickMs', input.workerTickMs ?? d.workerTickMs, 1),
    s2sTimeoutMs: int('s2sTimeoutMs', input.s2sTimeoutMs ?? d.s2sTimeoutMs, 1),
    firstAttemptWaitMs: int('firstAttemptWaitMs', input.firstAttemptWaitMs ?? d.firstAttemptWaitMs, 0),
    syncIntervalMs: int('syncIntervalMs', input.syncIntervalMs ?? d.syncIntervalMs, 1),
    syncOnReturnMs: int('syncOnReturnMs', input.syncOnReturnMs ?? d.syncOnReturnMs, 0),
    sqliteSync: oneOf('sqliteSync', input.sqliteSync ?? d.sqliteSync, ['full', 'normal'] as const),
    sqliteWriter: oneOf('sqliteWriter', input.sqliteWriter ?? d.sqliteWriter, ['thread', 'inline', 'auto'] as const),
    logLevel: oneOf('logLevel', input.logLevel ?? d.logLevel, LOG_LEVELS),
    rateLimit,
    // A user's two devices may each use their connection's whole limit.
    loginRateLimit: rate('loginRateLimit', input.loginRateLimit, {
      perSecond: 2 * rateLimit.perSecond,
      burst: 2 * rateLimit.burst,
    }),
    authTimeoutMs: int('authTimeoutMs', input.authTimeoutMs ?? d.authTimeoutMs, 1),
    maxConnectionsPerAddress: int(
      'maxConnectionsPerAddress',
      input.maxConnectionsPerAddress ?? d.maxConnectionsPerAddress,
      1,
    ),
    challengeLimit: rate('challengeLimit', input.challengeLimit, d.challengeLimit),
    authChallengeTtlMs: int('authChallengeTtlMs', input.authChallengeTtlMs ?? d.authChallengeTtlMs, 1),
    maxTimeSkewMs: int('maxTimeSkewMs', input.maxTimeSkewMs ?? d.maxTimeSkewMs, 0),
    deviceForgetMs: int('deviceForgetMs', input.deviceForgetMs ?? d.deviceForgetMs, 1),
    profileRefreshMs: int('profileRefreshMs', input.profileRefreshMs ?? d.profileRefreshMs, 0),
    deliveryPoolSize: int('deliveryPoolSize', input.deliveryPoolSize ?? d.deliveryPoolSize, 1),
    deliveryQueueSize: int('deliveryQueueSize', input.deliveryQueueSize ?? d.deliveryQueueSize, 1),
    wsMaxBufferedBytes: int('wsMaxBufferedBytes', input.wsMaxBufferedBytes ?? d.wsMaxBufferedBytes, 1),
    wsPingIntervalMs: int('wsPingIntervalMs', input.wsPingIntervalMs ?? d.wsPingIntervalMs, 1),
    syncMaxPages: int('syncMaxPages', input.syncMaxPages ?? d.syncMaxPages, 1),
    vapid: vapidKeys(input.vapidPublicKey, input.vapidPrivateKey),
    vapidSubject: vapidSubject(input.vapidSubject ?? `mailto:admin@${serverLogin}.invalid`),
    webPushAllowInsecure: bool('webPushAllowInsecure', input.webPushAllowInsecure ?? false),
    webPushReceipts: bool('webPushReceipts', input.webPushReceipts ?? false),
    pushQueueSize: int('pushQueueSize', input.pushQueueSize ?? d.pushQueueSize, 1),
    pushConcurrency: int('pushConcurrency', input.pushConcurrency ?? d.pushConcurrency, 1),
    pushTimeoutMs: int('pushTimeoutMs', input.pushTimeoutMs ?? d.pushTimeoutMs, 1),
    redisUrl: redisUrl(input.redisUrl),
    redisPrefix: nonEmpty('redisPrefix', input.redisPrefix ?? `shine:${serverLogin}:`),
    heartbeatIntervalMs: int('heartbeatIntervalMs', input.heartbeatIntervalMs ?? d.heartbeatIntervalMs, 1),
    verifyThreads: int('verifyThreads', input.verifyThreads ?? defaultVerifyThreads(), 0),
  };
  if (config.peers.some((p) => p.serverLogin === serverLogin)) {
    throw new ConfigError('peers', `lists this server (${serverLogin}) itself`);
  }
  if (config.chainPartners.includes(serverLogin)) {
    throw new ConfigError('chainPartners', `lists this server (${serverLogin}) itself`);
  }
  return config;
}

/** The config once the port is bound: a port-0 config gets its real port and, if derived, its URL. */
export function bindConfigToPort(config: Config, port: number): Config {
  if (config.port !== 0) return config;
  return Object.assign({}, config, { port, publicWsUrl: config.publicWsUrl || defaultWsUrl(config.host, port) });
}

/** `ws://HOST:PORT/ws`, with IPv6 literals bracketed. */
export function defaultWsUrl(host: string, port: number): string {
  return `ws://${host.includes(':') ? `[${host}]` : host}:${port}/ws`;
}

/** Parses `sqlite:PATH` or `postgres://…` (or checks the parsed form). */
export function parseDb(value: string | DbConfig): DbConfig {
  if (typeof value !== 'string') {
    if (value.kind === 'sqlite') return { kind: 'sqlite', path: nonEmpty('db.path', value.path) };
    if (value.kind === 'postgres') return { kind: 'postgres', url: nonEmpty('db.url', value.url) };
    throw new ConfigError('db', 'kind must be "sqlite" or "postgres"');
  }
  if (value.startsWith('sqlite:')) return { kind: 'sqlite', path: nonEmpty('db', value.slice('sqlite:'.length)) };
  if (/^postgres(ql)?:\/\//.test(value)) return { kind: 'postgres', url: value };
  throw new ConfigError('db', `"${value}" must be sqlite:PATH or postgres://…`);
}

/** Parses `login=wsUrl,…` (or checks the parsed form). */
export function parsePeers(value: string | readonly PeerConfig[]): PeerConfig[] {
  const list =
    typeof value !== 'string'
      ? value
      : commaList(value).map((item) => {
          const eq = item.indexOf('=');
          if (eq < 0) throw new ConfigError('peers', `"${item}" must be login=wsUrl`);
          return { serverLogin: item.slice(0, eq), wsUrl: item.slice(eq + 1) };
        });
  checkServerLogins(
    'peers',
    list.map((p) => p.serverLogin),
  );
  return list.map((p) => ({ serverLogin: p.serverLogin, wsUrl: wsUrl('peers', p.wsUrl) }));
}

/** The non-empty items of a comma-separated list, trimmed. */
const commaList = (value: string): string[] =>
  value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');

/** Every entry a valid server login, none twice. */
function checkServerLogins(field: string, logins: readonly string[]): void {
  const seen = new Set<string>();
  for (const login of logins) {
    if (!isValidLogin(login)) throw new ConfigError(field, `"${login}" is not a valid server login`);
    if (seen.has(login)) throw new ConfigError(field, `${login} is listed twice`);
    seen.add(login);
  }
}

/**
 * Parses `login,login,…` (or checks the parsed form): valid server logins, none twice. That each is a known
 * peer is checked at start-up, once the directory is loaded (docs/protocol.md §14.3).
 */
export function parseChainPartners(value: string | readonly string[]): string[] {
  const list = typeof value !== 'string' ? [...value] : commaList(value);
  checkServerLogins('chainPartners', list);
  return list;
}

/** A rate limit from `perSecond,burst` or its object form (missing fields from fallback). */
function rate(
  field: string,
  value: string | Partial<RateLimitConfig> | undefined,
  fallback: RateLimitConfig = CONFIG_DEFAULTS.rateLimit,
): RateLimitConfig {
  let given: Partial<RateLimitConfig> = {};
  if (typeof value === 'string') {
    const parts = value.split(',').map((p) => p.trim());
    if (parts.length !== 2) throw new ConfigError(field, `"${value}" must be perSecond,burst (e.g. 5,20)`);
    given = { perSecond: Number(parts[0]), burst: Number(parts[1]) };
  } else if (value) given = value;
  const merged = { ...fallback, ...given };
  return {
    perSecond: positiveNumber(`${field}.perSecond`, merged.perSecond),
    burst: int(`${field}.burst`, merged.burst, 1),
  };
}

function nonEmpty(field: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') throw new ConfigError(field, 'must be a non-empty string');
  return value;
}

function optionalNonEmpty(field: string, value: unknown): string | undefined {
  return value === undefined ? undefined : nonEmpty(field, value);
}

function int(field: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = typeof value === 'string' && /^-?\d+$/.test(value.trim()) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min || n > max) {
    throw new ConfigError(field, `must be an integer in ${min}..${max}, got ${JSON.stringify(value)}`);
  }
  return n;
}

function positiveNumber(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new ConfigError(field, `must be a positive number, got ${JSON.stringify(value)}`);
  }
  return value;
}

function intList(field: string, value: string | readonly number[], min: number, allowEmpty = false): number[] {
  const items =
    typeof value === 'string'
      ? value
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '')
      : value;
  if (!Array.isArray(items) || (!allowEmpty && items.length === 0))
    throw new ConfigError(field, 'must be a non-empty list of integers');
  return items.map((v: unknown) => int(field, v, min));
}

function strictlyIncreasing(list: readonly number[]): boolean {
  return list.every((v, i) => i === 0 || v > list[i - 1]!);
}

function oneOf<T extends string>(field: string, value: unknown, allowed: readonly T[]): T {
  if (!allowed.includes(value as T))
    throw new ConfigError(field, `must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value as T;
}

function wsUrl(field: string, value: unknown): string {
  const text = nonEmpty(field, value);
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ConfigError(field, `"${text}" is not a URL`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    throw new ConfigError(field, `"${text}" must be a ws:// or wss:// URL`);
  return text;
}

function seed(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (fromBase64(value)?.length !== 32)
    throw new ConfigError('serverKeySeedB64', 'must be 32 bytes of standard base64');
  return value;
}

function bool(field: string, value: unknown): boolean {
  if (typeof value === 'boolean') return value;
  if (value === '1' || value === 'true') return true;
  if (value === '0' || value === 'false') return false;
  throw new ConfigError(field, `must be 1, 0, true or false, got ${JSON.stringify(value)}`);
}

/** Both VAPID keys or neither, each unpadded base64url of the right length (the pair is checked at start). */
function vapidKeys(publicKey: string | undefined, privateKey: string | undefined): Config['vapid'] {
  if (publicKey === undefined && privateKey === undefined) return undefined;
  if (publicKey === undefined || privateKey === undefined)
    throw new ConfigError('vapidPublicKey', 'SHINE_VAPID_PUBLIC_KEY and SHINE_VAPID_PRIVATE_KEY go together');
  const bytes = (field: string, text: string, length: number): void => {
    if (!/^[A-Za-z0-9_-]+$/.test(text) || Buffer.from(text, 'base64url').length !== length)
      throw new ConfigError(field, `must be ${length} bytes of unpadded base64url`);
  };
  bytes('vapidPublicKey', publicKey, 65);
  bytes('vapidPrivateKey', privateKey, 32);
  return { publicKey, privateKey };
}

function vapidSubject(value: string): string {
  if (!/^(mailto:\S+@\S+|https:\/\/\S+)$/.test(value))
    throw new ConfigError('vapidSubject', `"${value}" must be a mailto: address or an https: URL`);
  return value;
}

function redisUrl(value: string | undefined): string | undefined {
  const url = optionalNonEmpty('redisUrl', value);
  if (url !== undefined && !/^rediss?:\/\//.test(url))
    throw new ConfigError('redisUrl', `"${url}" must be redis://… or rediss://…`);
  return url;
}
