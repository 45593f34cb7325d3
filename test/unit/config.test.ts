import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { bindConfigToPort, ConfigError, resolveConfig } from '../../src/server/config/config.js';
import webpush from 'web-push';
import { configInputFromEnv } from '../../src/server/config/env.js';

describe('resolveConfig', () => {
  it('fills every docs/protocol.md §10 default', () => {
    const c = resolveConfig({});
    assert.equal(c.host, '127.0.0.1');
    assert.equal(c.port, 8080);
    assert.equal(c.serverLogin, 'local');
    assert.equal(c.publicWsUrl, 'ws://127.0.0.1:8080/ws');
    assert.equal(c.dataDir, './data');
    assert.deepEqual(c.db, { kind: 'sqlite', path: join('./data', 'shine.sqlite') });
    assert.equal(c.serverKeySeedB64, undefined);
    assert.equal(c.directoryFile, undefined);
    assert.deepEqual(c.peers, []);
    assert.deepEqual(c.chainPartners, []);
    assert.deepEqual(resolveConfig({ chainPartners: ' beta , gamma,' }).chainPartners, ['beta', 'gamma']);
    assert.deepEqual(configInputFromEnv({ SHINE_CHAIN_PARTNERS: 'beta' }).chainPartners, 'beta');
    assert.equal(c.s2sAuth, 'required');
    assert.equal(c.adminToken, undefined);
    assert.deepEqual(c.retryScheduleMs, [0, 30_000, 300_000, 1_500_000, 3_600_000]);
    assert.deepEqual(c.peerCheckAttempts, [3, 4, 5]);
    assert.equal(c.workerTickMs, 5_000);
    assert.equal(c.s2sTimeoutMs, 10_000);
    assert.equal(c.firstAttemptWaitMs, 3_000);
    assert.equal(c.syncIntervalMs, 21_600_000);
    assert.equal(c.sqliteSync, 'full');
    assert.equal(c.sqliteWriter, 'auto');
    assert.equal(resolveConfig(configInputFromEnv({ SHINE_SQLITE_WRITER: 'inline' })).sqliteWriter, 'inline');
    assert.equal(resolveConfig(configInputFromEnv({ SHINE_SQLITE_WRITER: 'thread' })).sqliteWriter, 'thread');
    assert.equal(resolveConfig(configInputFromEnv({ SHINE_SQLITE_WRITER: 'auto' })).sqliteWriter, 'auto');
    assert.equal(c.logLevel, 'info');
    assert.deepEqual(c.rateLimit, { perSecond: 200, burst: 400 });
    assert.equal(c.authChallengeTtlMs, 60_000);
    assert.equal(c.maxTimeSkewMs, 300_000);
    assert.equal(c.deviceForgetMs, 30 * 24 * 3600 * 1000);
  });

  it('derives the db path from dataDir and parses text forms', () => {
    const c = resolveConfig({
      dataDir: '/srv/shine',
      port: '9000',
      retryScheduleMs: '0, 10, 20',
      peerCheckAttempts: '2,3',
      peers: 'beta=ws://beta:1/ws, gamma=wss://gamma.example/ws',
      rateLimit: { burst: 10 },
    });
    assert.deepEqual(c.db, { kind: 'sqlite', path: '/srv/shine/shine.sqlite' });
    assert.equal(c.port, 9000);
    assert.deepEqual(c.retryScheduleMs, [0, 10, 20]);
    assert.deepEqual(c.peerCheckAttempts, [2, 3]);
    assert.deepEqual(c.peers, [
      { serverLogin: 'beta', wsUrl: 'ws://beta:1/ws' },
      { serverLogin: 'gamma', wsUrl: 'wss://gamma.example/ws' },
    ]);
    assert.deepEqual(c.rateLimit, { perSecond: 200, burst: 10 });
    assert.deepEqual(resolveConfig({ db: 'sqlite:/tmp/x.db' }).db, { kind: 'sqlite', path: '/tmp/x.db' });
    assert.deepEqual(resolveConfig({ db: 'postgres://u@h/db' }).db, { kind: 'postgres', url: 'postgres://u@h/db' });
  });

  it('leaves publicWsUrl to be filled after a port-0 server listens', () => {
    const c = resolveConfig({ port: 0, host: '::1' });
    assert.equal(c.publicWsUrl, '');
    const bound = bindConfigToPort(c, 4321);
    assert.equal(bound.port, 4321);
    assert.equal(bound.publicWsUrl, 'ws://[::1]:4321/ws');
    const explicit = bindConfigToPort(resolveConfig({ port: 0, publicWsUrl: 'wss://chat.example/ws' }), 4321);
    assert.equal(explicit.publicWsUrl, 'wss://chat.example/ws');
    assert.equal(bindConfigToPort(resolveConfig({ port: 8081 }), 1).port, 8081);
  });

  const bad: [string, Parameters<typeof resolveConfig>[0], RegExp][] = [
    ['unknown key', { prot: 1 } as never, /config prot: unknown setting/],
    ['bad serverLogin', { serverLogin: 'Bad Login' }, /serverLogin/],
    ['port out of range', { port: 70_000 }, /port/],
    ['port not a number', { port: '80a' }, /port/],
    ['schedule not starting at 0', { retryScheduleMs: [10, 20] }, /retryScheduleMs: must start with 0/],
    ['schedule not increasing', { retryScheduleMs: '0,20,20' }, /retryScheduleMs: must be strictly increasing/],
    ['schedule empty', { retryScheduleMs: [] }, /retryScheduleMs/],
    ['peer check past the schedule', { retryScheduleMs: '0,1', peerCheckAttempts: '3' }, /peerCheckAttempts/],
    ['bad db', { db: 'mysql://x' }, /config db/],
    ['bad s2sAuth', { s2sAuth: 'maybe' }, /s2sAuth/],
    ['bad sqliteSync', { sqliteSync: 'off' }, /sqliteSync/],
    ['bad sqliteWriter', { sqliteWriter: 'process' }, /sqliteWriter/],
    ['bad logLevel', { logLevel: 'loud' }, /logLevel/],
    ['bad publicWsUrl', { publicWsUrl: 'http://x/ws' }, /publicWsUrl/],
    ['bad peers', { peers: 'beta' }, /peers/],
    ['peer is this server', { serverLogin: 'alpha', peers: 'alpha=ws://a/ws' }, /peers/],
    ['bad chain partner', { chainPartners: 'beta,Bad Login' }, /chainPartners: "Bad Login"/],
    ['chain partner twice', { chainPartners: 'beta, beta' }, /chainPartners: beta is listed twice/],
    ['chain partner is this server', { serverLogin: 'alpha', chainPartners: 'alpha' }, /chainPartners/],
    ['bad seed', { serverKeySeedB64: 'AAAA' }, /serverKeySeedB64/],
    ['bad rate limit', { rateLimit: { perSecond: 0 } }, /rateLimit.perSecond/],
  ];
  for (const [name, input, message] of bad) {
    it(`rejects ${name}`, () => {
      assert.throws(
        () => resolveConfig(input),
        (err: Error) => err instanceof ConfigError && message.test(err.message),
      );
    });
  }
});

describe('configInputFromEnv', () => {
  it('maps the docs/protocol.md §10 variables and ignores empty ones', () => {
    const input = configInputFromEnv({
      SHINE_HOST: '0.0.0.0',
      SHINE_PORT: '9999',
      SHINE_SERVER_LOGIN: 'alpha',
      SHINE_PUBLIC_WS_URL: 'wss://alpha.example/ws',
      SHINE_DATA_DIR: '/var/shine',
      SHINE_DB: 'sqlite:/var/shine/db.sqlite',
      SHINE_SERVER_KEY_SEED_B64: Buffer.alloc(32, 1).toString('base64'),
      SHINE_DIRECTORY_FILE: '/etc/shine/dir.json',
      SHINE_PEERS: 'beta=ws://beta/ws',
      SHINE_S2S_AUTH: 'off',
      SHINE_ADMIN_TOKEN: 'tok',
      SHINE_RETRY_SCHEDULE_MS: '0,100',
      SHINE_PEER_CHECK_ATTEMPTS: '2',
      SHINE_WORKER_TICK_MS: '50',
      SHINE_S2S_TIMEOUT_MS: '60',
      SHINE_FIRST_ATTEMPT_WAIT_MS: '70',
      SHINE_SYNC_INTERVAL_MS: '80',
      SHINE_SQLITE_SYNC: 'normal',
      SHINE_LOG_LEVEL: 'debug',
      SHINE_UNRELATED: 'x',
      PATH: '/bin',
    });
    const c = resolveConfig(input);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.port, 9999);
    assert.equal(c.serverLogin, 'alpha');
    assert.equal(c.publicWsUrl, 'wss://alpha.example/ws');
    assert.equal(c.dataDir, '/var/shine');
    assert.deepEqual(c.db, { kind: 'sqlite', path: '/var/shine/db.sqlite' });
    assert.equal(c.serverKeySeedB64, Buffer.alloc(32, 1).toString('base64'));
    assert.equal(c.directoryFile, '/etc/shine/dir.json');
    assert.deepEqual(c.peers, [{ serverLogin: 'beta', wsUrl: 'ws://beta/ws' }]);
    assert.equal(c.s2sAuth, 'off');
    assert.equal(c.adminToken, 'tok');
    assert.deepEqual(c.retryScheduleMs, [0, 100]);
    assert.deepEqual(c.peerCheckAttempts, [2]);
    assert.deepEqual([c.workerTickMs, c.s2sTimeoutMs, c.firstAttemptWaitMs, c.syncIntervalMs], [50, 60, 70, 80]);
    assert.equal(c.sqliteSync, 'normal');
    assert.equal(c.logLevel, 'debug');
    assert.deepEqual(configInputFromEnv({ SHINE_ADMIN_TOKEN: '', SHINE_PORT: '' }), {});
  });

  it('fits the default peer checks to a shorter schedule; an empty SHINE_PEER_CHECK_ATTEMPTS means none', () => {
    assert.deepEqual(resolveConfig(configInputFromEnv({ SHINE_RETRY_SCHEDULE_MS: '0,1000' })).peerCheckAttempts, []);
    assert.deepEqual(
      resolveConfig(configInputFromEnv({ SHINE_RETRY_SCHEDULE_MS: '0,1000,2000' })).peerCheckAttempts,
      [3],
    );
    assert.deepEqual(
      resolveConfig(configInputFromEnv({ SHINE_RETRY_SCHEDULE_MS: '0,1,2,3' })).peerCheckAttempts,
      [3, 4],
    );
    assert.deepEqual(resolveConfig(configInputFromEnv({ SHINE_PEER_CHECK_ATTEMPTS: '' })).peerCheckAttempts, []);
    assert.deepEqual(resolveConfig(configInputFromEnv({})).peerCheckAttempts, [3, 4, 5]);
  });

  it('merges SHINE_CONFIG_FILE under the environment', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'shine-config-'));
    try {
      const file = join(dir, 'shine.json');
      await writeFile(
        file,
        JSON.stringify({ port: 7000, serverLogin: 'fromfile', rateLimit: { perSecond: 5, burst: 5 } }),
      );
      const c = resolveConfig(configInputFromEnv({ SHINE_CONFIG_FILE: file, SHINE_SERVER_LOGIN: 'fromenv' }));
      assert.equal(c.port, 7000);
      assert.equal(c.serverLogin, 'fromenv');
      assert.deepEqual(c.rateLimit, { perSecond: 5, burst: 5 });
      await writeFile(file, '[1]');
      assert.throws(() => configInputFromEnv({ SHINE_CONFIG_FILE: file }), /SHINE_CONFIG_FILE/);
      assert.throws(() => configInputFromEnv({ SHINE_CONFIG_FILE: join(dir, 'missing.json') }), /SHINE_CONFIG_FILE/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('config-file-only settings', () => {
  it('delivery pool, queue and profile refresh have defaults, take text, and refuse nonsense', () => {
    const d = resolveConfig({});
    assert.deepEqual([d.deliveryPoolSize, d.deliveryQueueSize, d.profileRefreshMs], [256, 1024, 60_000]);
    const c = resolveConfig({ deliveryPoolSize: '8', deliveryQueueSize: 16, profileRefreshMs: '0' });
    assert.deepEqual([c.deliveryPoolSize, c.deliveryQueueSize, c.profileRefreshMs], [8, 16, 0]);
    assert.throws(() => resolveConfig({ deliveryPoolSize: 0 }), ConfigError);
    assert.throws(() => resolveConfig({ deliveryQueueSize: 'many' }), ConfigError);
  });
});

describe('abuse limits (docs/protocol.md §5)', () => {
  it('login deadline, connections and challenges per address, requests per login: defaults, text forms, checks', () => {
    const d = resolveConfig({});
    assert.deepEqual(
      [d.authTimeoutMs, d.maxConnectionsPerAddress, d.challengeLimit, d.loginRateLimit],
      [30_000, 100, { perSecond: 5, burst: 20 }, { perSecond: 400, burst: 800 }],
    );
    const c = resolveConfig(
      configInputFromEnv({
        SHINE_AUTH_TIMEOUT_MS: '5000',
        SHINE_MAX_CONNECTIONS_PER_ADDRESS: '7',
        SHINE_CHALLENGE_LIMIT: '0.5, 3',
        SHINE_LOGIN_RATE_LIMIT: '10,30',
      }),
    );
    assert.deepEqual(
      [c.authTimeoutMs, c.maxConnectionsPerAddress, c.challengeLimit, c.loginRateLimit],
      [5_000, 7, { perSecond: 0.5, burst: 3 }, { perSecond: 10, burst: 30 }],
    );
    // The per-login default follows the per-connection limit.
    assert.deepEqual(resolveConfig({ rateLimit: { perSecond: 50, burst: 60 } }).loginRateLimit, {
      perSecond: 100,
      burst: 120,
    });
    assert.throws(() => resolveConfig({ challengeLimit: '5' }), /challengeLimit: "5" must be perSecond,burst/);
    assert.throws(() => resolveConfig({ loginRateLimit: '0,10' }), /loginRateLimit.perSecond/);
    assert.throws(() => resolveConfig({ authTimeoutMs: 0 }), /authTimeoutMs/);
    assert.throws(() => resolveConfig({ maxConnectionsPerAddress: 'many' }), /maxConnectionsPerAddress/);
  });
});

describe('PostgreSQL pool (docs/protocol.md §9.2)', () => {
  it('SHINE_DB_POOL_SIZE sets the pool size, default 10, at least 1', () => {
    assert.equal(resolveConfig({}).dbPoolSize, 10);
    assert.equal(resolveConfig(configInputFromEnv({ SHINE_DB_POOL_SIZE: '25' })).dbPoolSize, 25);
    assert.throws(() => resolveConfig(configInputFromEnv({ SHINE_DB_POOL_SIZE: '0' })), /dbPoolSize/);
    assert.throws(() => resolveConfig({ dbPoolSize: 'ten' }), /dbPoolSize/);
  });
});

describe('WebPush settings (docs/protocol.md §5.5)', () => {
  const keys = webpush.generateVAPIDKeys();

  it('reads the SHINE_VAPID_* and SHINE_WEBPUSH_* variables, with defaults', () => {
    const d = resolveConfig({ serverLogin: 'alpha' });
    assert.equal(d.vapid, undefined);
    assert.equal(d.vapidSubject, 'mailto:admin@alpha.invalid');
    assert.deepEqual([d.webPushAllowInsecure, d.webPushReceipts], [false, false]);
    assert.deepEqual([d.pushQueueSize, d.pushConcurrency, d.pushTimeoutMs], [10_000, 16, 10_000]);
    const c = resolveConfig(
      configInputFromEnv({
        SHINE_VAPID_PUBLIC_KEY: keys.publicKey,
        SHINE_VAPID_PRIVATE_KEY: keys.privateKey,
        SHINE_VAPID_SUBJECT: 'https://alpha.example/contact',
        SHINE_WEBPUSH_ALLOW_INSECURE: '1',
        SHINE_WEBPUSH_RECEIPTS: 'true',
      }),
    );
    assert.deepEqual(c.vapid, keys);
    assert.equal(c.vapidSubject, 'https://alpha.example/contact');
    assert.deepEqual([c.webPushAllowInsecure, c.webPushReceipts], [true, true]);
  });

  const refused: [string, Parameters<typeof resolveConfig>[0], RegExp][] = [
    ['a public key alone', { vapidPublicKey: 'x' }, /go together/],
    ['a short public key', { vapidPublicKey: keys.publicKey.slice(2), vapidPrivateKey: keys.privateKey }, /65 bytes/],
    ['a padded private key', { vapidPublicKey: keys.publicKey, vapidPrivateKey: keys.privateKey + '=' }, /32 bytes/],
    ['a subject that is no contact', { vapidSubject: 'admin@alpha' }, /vapidSubject/],
    ['a flag that is not a boolean', { webPushReceipts: 'yes' }, /webPushReceipts/],
  ];
  for (const [name, input, message] of refused) {
    it(`rejects ${name}`, () => {
      assert.throws(
        () => resolveConfig(input),
        (err: Error) => err instanceof ConfigError && message.test(err.message),
      );
    });
  }
});
