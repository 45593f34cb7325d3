/**
 * The directory (docs/protocol.md §4): users' signed profiles and servers' descriptors, from local registration,
 * the static file and (later) import from other servers. Decides what a profile may replace.
 */
import { readFile } from 'node:fs/promises';
import { fromBase64 } from '../../protocol/bytes.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { ShineError } from '../../protocol/errors.js';
import type { ServerDescriptor, UserProfile } from '../../protocol/identity.js';
import {
  descriptorSigningText,
  profileShapeProblem,
  verifyDescriptor,
  verifyProfile,
} from '../../protocol/identity.js';
import { isValidLogin } from '../../protocol/login.js';
import type { BackgroundQueue } from '../background/queue.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import type { Config } from '../config/config.js';
import type { ServerKey } from '../keys.js';
import { KeyedMutex } from '../keyed-mutex.js';
import type { Logger } from '../log.js';
import type { ProfileSource, ServerRecord, Store } from '../store/types.js';

export interface DirectoryDeps {
  config: Config;
  store: Pick<Store, 'directory'>;
  clock: Clock;
  verifier: SignatureVerifier;
  log: Logger;
  serverKey: ServerKey;
  background: BackgroundQueue;
  /** HTTP client for peers' descriptors; the global fetch by default. */
  fetch?: typeof fetch;
}

/** A known user with the profile's keys already decoded. */
export interface DirectoryEntry {
  profile: UserProfile;
  signKey: Uint8Array;
  accessServers: readonly string[];
  source: ProfileSource;
  /** When this server stored or last refreshed the profile. */
  fetchedAtMs: number;
}

/** Anything that names a user's access servers: a profile or a DirectoryEntry. */
export interface HasAccessServers {
  readonly accessServers: readonly string[];
}

// Entries are re-read after this long so that processes sharing one database converge on updates
// made by the others; updates made by this process invalidate at once.
const CACHE_TTL_MS = 10_000;
const CACHE_LIMIT = 10_000;
// An unknown login is not asked for again this soon, so USER_NOT_FOUND cannot be turned into a flood.
const MISS_TTL_MS = 30_000;

export class Directory {
  private readonly cache = new Map<string, { entry: DirectoryEntry; cachedAtMs: number }>();
  /** Pinned descriptors (each delivery's receipt check asks for its signer's), same TTL as users. */
  private readonly servers = new Map<string, { record: ServerRecord; cachedAtMs: number }>();
  private readonly profileLock = new KeyedMutex();
  private self: ServerDescriptor | null = null;
  private readonly misses = new Map<string, number>();
  private readonly importing = new Map<string, Promise<DirectoryEntry | null>>();
  private readonly refreshing = new Map<string, Promise<DirectoryEntry | null>>();
  private readonly refreshFailedAt = new Map<string, number>();
  private peers: PeerCaller | null = null;

  constructor(private readonly deps: DirectoryDeps) {}

  /** Enables import of remote profiles through the server-to-server channel (built after the directory). */
  attachPeers(peers: PeerCaller): void {
    this.peers = peers;
  }

  /** Publishes this server's descriptor to its own table and loads the static directory file, if any. */
  async start(): Promise<void> {
    await this.pinServer(this.selfDescriptor(), 'self');
    if (this.deps.config.directoryFile) await this.loadStaticFile(this.deps.config.directoryFile);
  }

  /** This server's descriptor, signed with the server key. */
  selfDescriptor(): ServerDescriptor {
    if (!this.self) {
      const { serverLogin, publicWsUrl } = this.deps.config;
      if (!publicWsUrl) throw new Error('publicWsUrl is not known before the server listens');
      const unsigned = { serverLogin, wsUrl: publicWsUrl, signKeyB64: this.deps.serverKey.publicKeyB64 };
      this.self = Object.assign({}, unsigned, {
        signatureB64: this.deps.serverKey.sign(descriptorSigningText(unsigned)),
      });
    }
    return this.self;
  }

  /**
   * The user's current profile and decoded keys: known here, or else imported from the known servers
   * (docs/protocol.md §4). With refreshAfterMs, an imported profile older than that is refreshed from its access
   * servers first, so route changes are followed.
   */
  async lookup(
    login: string,
    opts: { refreshAfterMs?: number; noImport?: boolean; background?: boolean; maxWaitMs?: number } = {},
  ): Promise<DirectoryEntry | null> {
    const known = await this.lookupKnown(login);
    if (!known) {
      if (opts.noImport) return null;
      // The caller waits at most the import deadline; the search itself runs on until every server has
      // answered (or timed out), so a profile that comes late is imported for the next request.
      const { firstAttemptWaitMs, s2sTimeoutMs } = this.deps.config;
      return this.within(
        this.once(this.importing, login, () => this.importProfile(login)),
        firstAttemptWaitMs || s2sTimeoutMs,
      );
    }
    const { refreshAfterMs } = opts;
    const now = this.deps.clock.now();
    if (
      refreshAfterMs !== undefined &&
      known.source === 'imported' &&
      now - known.fetchedAtMs > refreshAfterMs &&
      now - (this.refreshFailedAt.get(login) ?? -Infinity) > refreshAfterMs
    ) {
      const refreshed = this.once(this.refreshing, login, async () => {
        const entry = await this.refresh(known);
        // Unreachable servers are asked again only after another refresh period, not on every message.
        if (!entry) remember(this.refreshFailedAt, login, this.deps.clock.now());
        return entry;
      });
      // A client's request never waits for other servers: it goes with the cached profile. Others wait
      // at most maxWaitMs; the refresh goes on in the background either way.
      if (opts.background) return known;
      if (opts.maxWaitMs === undefined) return (await refreshed) ?? known;
      return (await this.within(refreshed, opts.maxWaitMs)) ?? known;
    }
    return known;
  }

  /** What the look-up found within waitMs, or null; the look-up itself goes on. */
  private async within(lookup: Promise<DirectoryEntry | null>, waitMs: number): Promise<DirectoryEntry | null> {
    let timer: TimerHandle | undefined;
    const late = new Promise<null>((resolve) => (timer = this.deps.clock.setTimer(waitMs, () => resolve(null))));
    try {
      return await Promise.race([lookup, late]);
    } finally {
      timer?.cancel();
    }
  }

  /** Runs fn once per login at a time: concurrent callers share the running call. */
  private once(
    running: Map<string, Promise<DirectoryEntry | null>>,
    login: string,
    fn: () => Promise<DirectoryEntry | null>,
  ): Promise<DirectoryEntry | null> {
    let p = running.get(login);
    if (!p) {
      p = fn()
        .catch((err: unknown) => {
          this.deps.log.warn('directory look-up failed', { login, err: String(err) });
          return null;
        })
        .finally(() => running.delete(login));
      running.set(login, p);
      // A refresh outlives the request that started it (background look-ups): drain() must see it.
      const started = p;
      this.deps.background.run('profile look-up', { login }, () => started);
    }
    return p;
  }

  /** The user as this server knows it, without asking anyone. */
  private async lookupKnown(login: string): Promise<DirectoryEntry | null> {
    if (!isValidLogin(login)) return null;
    const now = this.deps.clock.now();
    const hit = this.cache.get(login);
    if (hit && now - hit.cachedAtMs < CACHE_TTL_MS) return hit.entry;
    const record = await this.deps.store.directory.getUser(login);
    if (!record) {
      this.cache.delete(login);
      return null;
    }
    const entry: DirectoryEntry = {
      profile: record.profile,
      signKey: fromBase64(record.profile.signKeyB64)!,
      accessServers: record.profile.accessServers,
      source: record.source,
      fetchedAtMs: record.fetchedAtMs,
    };
    this.remember(login, entry, now);
    return entry;
  }

  /** The profile by login; noImport answers only what this server already knows (server callers). */
  async getProfile(login: string, opts: { noImport?: boolean } = {}): Promise<UserProfile | null> {
    return (await this.lookup(login, opts))?.profile ?? null;
  }

  /**
   * Fetches an unknown user's profile from the operator-configured servers, accepting it only from a
   * server in the profile's own accessServers, and pins it (docs/protocol.md §4). The servers are asked all at
   * once; the caller waits at most firstAttemptWaitMs (lookup), so a SendMessagePair to an unknown login
   * answers in that time however many known servers are unreachable, while the search runs until the
   * first valid profile or until every server has answered or timed out. Only then is a login missing.
   */
  async importProfile(login: string): Promise<DirectoryEntry | null> {
    const { clock, config, store } = this.deps;
    const peers = this.peers;
    if (!peers || !isValidLogin(login)) return null;
    const now = clock.now();
    if ((this.misses.get(login) ?? 0) > now) return null;
    const servers = new Set([
      ...config.peers.map((p) => p.serverLogin),
      ...(await store.directory.listServers()).map((r) => r.descriptor.serverLogin),
    ]);
    servers.delete(config.serverLogin);
    const found = await this.firstProfile(peers, [...servers], login);
    if (!found) {
      remember(this.misses, login, now + MISS_TTL_MS);
      return null;
    }
    const { server, profile } = found;
    await this.profileLock.run(login, async () => {
      if (!(await this.deps.store.directory.getUser(login))) await this.save(profile, 'imported');
    });
    this.deps.log.info('profile imported', { login, from: server, version: profile.version });
    return this.lookupKnown(login);
  }

  /** The first valid profile any of the servers answers; null once all of them failed (each call times out). */
  private firstProfile(
    peers: PeerCaller,
    servers: readonly string[],
    login: string,
  ): Promise<{ server: string; profile: UserProfile } | null> {
    if (servers.length === 0) return Promise.resolve(null);
    return new Promise((resolve) => {
      let pending = servers.length;
      for (const server of servers) {
        // Never rejects; the calls still running after the first profile are left to finish unobserved.
        void this.fetchProfile(peers, server, login).then((profile) => {
          if (profile) resolve({ server, profile });
          else if (--pending === 0) resolve(null);
        });
      }
    });
  }

  /**
   * Asks the user's access servers for its current profile (same key as pinned, version not lower);
   * when none of them answers, the other known servers, so a user who moved to new servers entirely is
   * still followed (a profile is accepted only from a server it lists).
   */
  private async refresh(known: DirectoryEntry): Promise<DirectoryEntry | null> {
    const peers = this.peers;
    if (!peers) return null;
    const login = known.profile.login;
    const self = this.deps.config.serverLogin;
    const others = (await this.deps.store.directory.listServers()).map((r) => r.descriptor.serverLogin);
    const candidates = [
      ...new Set([...known.accessServers, ...this.deps.config.peers.map((p) => p.serverLogin), ...others]),
    ];
    for (const server of candidates) {
      // A server that is down (its last connection failed) is not asked: the call would wait for a redial, and the
      // delivery attempt waiting for this refresh with it (docs/protocol.md §4.4).
      if (server === self || peers.down(server)) continue;
      const profile = await this.fetchProfile(peers, server, login);
      if (!profile) continue;
      if (profile.signKeyB64 !== known.profile.signKeyB64) {
        this.deps.log.warn('refused a profile with another key than the pinned one', { login, from: server });
        continue;
      }
      await this.profileLock.run(login, async () => {
        const stored = (await this.deps.store.directory.getUser(login))?.profile;
        // The same version again still renews fetchedAtMs.
        await this.save(stored && stored.version > profile.version ? stored : profile, 'imported');
      });
      return this.lookupKnown(login);
    }
    return null;
  }

  /** One server's answer to GetUserProfile, if it is a valid profile that lists that server. */
  private async fetchProfile(peers: PeerCaller, server: string, login: string): Promise<UserProfile | null> {
    try {
      const answer = await peers.call(server, 'GetUserProfile', { login });
      const profile = this.checkedProfile(answer.profile, (problem) => new Error(problem));
      if (
        profile.login !== login ||
        !profile.accessServers.includes(server) ||
        !verifyProfile(profile, this.deps.verifier)
      )
        return null;
      return profile;
    } catch (err) {
      this.deps.log.debug('profile fetch failed', { server, login, err: String(err) });
      return null;
    }
  }

  /** True when this server is one of the access servers of the given profile or entry. */
  isAccessServerOf(target: HasAccessServers): boolean {
    return target.accessServers.includes(this.deps.config.serverLogin);
  }

  /** Every other server this one knows (configured peers, stored descriptors), with the URL calls go to. */
  async peerServers(): Promise<{ serverLogin: string; wsUrl: string }[]> {
    const byLogin = new Map(this.deps.config.peers.map((p) => [p.serverLogin, p.wsUrl]));
    for (const r of await this.deps.store.directory.listServers())
      byLogin.set(r.descriptor.serverLogin, r.descriptor.wsUrl);
    byLogin.delete(this.deps.config.serverLogin);
    return [...byLogin].sort(([a], [b]) => a.localeCompare(b)).map(([serverLogin, wsUrl]) => ({ serverLogin, wsUrl }));
  }

  /**
   * The descriptor this server has pinned for serverLogin (itself included), or null; never asks the
   * network, so any socket may ask (GetServerDescriptor, docs/protocol.md §13.1).
   */
  async pinnedServer(serverLogin: string): Promise<ServerDescriptor | null> {
    return (await this.storedServer(serverLogin))?.descriptor ?? null;
  }

  /** The stored descriptor of serverLogin, from the cache while it is fresh; an absent one is not cached. */
  private async storedServer(serverLogin: string): Promise<ServerRecord | null> {
    const now = this.deps.clock.now();
    const hit = this.servers.get(serverLogin);
    if (hit && now - hit.cachedAtMs < CACHE_TTL_MS) return hit.record;
    const record = await this.deps.store.directory.getServer(serverLogin);
    if (!record) this.servers.delete(serverLogin);
    else {
      if (this.servers.size >= CACHE_LIMIT) this.servers.clear();
      this.servers.set(serverLogin, { record, cachedAtMs: now });
    }
    return record;
  }

  private async pinServer(d: ServerDescriptor, source: ServerRecord['source']): Promise<void> {
    await this.deps.store.directory.putServer(d, source);
    this.servers.delete(d.serverLogin);
  }

  /**
   * A server's descriptor as this server knows it; a configured peer (SHINE_PEERS) not seen yet is
   * fetched from its /.well-known/shine-server and pinned on first use.
   */
  async lookupServer(serverLogin: string): Promise<ServerRecord | null> {
    const known = await this.storedServer(serverLogin);
    if (known) return known;
    const peer = this.deps.config.peers.find((p) => p.serverLogin === serverLogin);
    if (!peer) return null;
    const url = new URL(peer.wsUrl);
    url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
    url.pathname = '/.well-known/shine-server';
    try {
      const res = await (this.deps.fetch ?? fetch)(url, { signal: AbortSignal.timeout(this.deps.config.s2sTimeoutMs) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const d = (await res.json()) as unknown;
      const problem = descriptorShapeProblem(d);
      if (problem) throw new Error(problem);
      const descriptor = d as ServerDescriptor;
      if (descriptor.serverLogin !== serverLogin) throw new Error(`descriptor names ${descriptor.serverLogin}`);
      if (!verifyDescriptor(descriptor, this.deps.verifier)) throw new Error('descriptor signature does not verify');
      await this.pinServer({ ...descriptor }, 'peer');
      this.deps.log.info('peer descriptor pinned', { serverLogin, wsUrl: descriptor.wsUrl });
      return { descriptor, source: 'peer' };
    } catch (err) {
      this.deps.log.debug('peer descriptor unavailable', { serverLogin, url: url.href, err: String(err) });
      return null;
    }
  }

  /**
   * RegisterUser (docs/protocol.md §5.1): a well-formed profile (else BAD_FIELDS) with a valid signature (else
   * BAD_SIGNATURE) naming this server (else LOCAL_SERVER_NOT_ACCESS_SERVER) that is new, or the same
   * key with a higher version (else PROFILE_CONFLICT). The identical stored profile again succeeds.
   */
  async register(input: unknown): Promise<UserProfile> {
    const profile = this.checkedProfile(input, (problem) => new ShineError('BAD_FIELDS', `profile: ${problem}`));
    if (!verifyProfile(profile, this.deps.verifier))
      throw new ShineError('BAD_SIGNATURE', 'profile signature does not verify');
    if (!this.isAccessServerOf(profile)) {
      throw new ShineError(
        'LOCAL_SERVER_NOT_ACCESS_SERVER',
        `${this.deps.config.serverLogin} is not in the profile's accessServers`,
      );
    }
    return this.profileLock.run(profile.login, async () => {
      const stored = (await this.deps.store.directory.getUser(profile.login))?.profile;
      if (stored && sameProfile(stored, profile)) return stored;
      const conflict = stored && replacementProblem(stored, profile);
      if (conflict) throw new ShineError('PROFILE_CONFLICT', conflict);
      await this.save(profile, 'local');
      this.deps.log.info('user registered', {
        login: profile.login,
        version: profile.version,
        accessServers: profile.accessServers,
      });
      return profile;
    });
  }

  /**
   * Loads `{servers: [descriptor], users: [profile]}` (SHINE_DIRECTORY_FILE). Every entry must be
   * well-formed and verify; a user the file contradicts (other key) stops the start, an older version
   * than the stored one is skipped.
   */
  async loadStaticFile(path: string): Promise<{ servers: number; users: number }> {
    let doc: unknown;
    try {
      doc = JSON.parse(await readFile(path, 'utf8'));
    } catch (err) {
      throw new Error(`directory file ${path}: ${(err as Error).message}`);
    }
    const fail = (what: string) => new Error(`directory file ${path}: ${what}`);
    const { servers = [], users = [] } = (typeof doc === 'object' && doc !== null ? doc : {}) as {
      servers?: unknown;
      users?: unknown;
    };
    if (!Array.isArray(servers) || !Array.isArray(users)) throw fail('must be {servers: [...], users: [...]}');

    const descriptors = servers.map((d: unknown, i) => {
      const problem = descriptorShapeProblem(d);
      if (problem) throw fail(`servers[${i}]: ${problem}`);
      if (!verifyDescriptor(d as ServerDescriptor, this.deps.verifier))
        throw fail(`servers[${i}]: signature does not verify`);
      return d as ServerDescriptor;
    });
    const profiles = users.map((p: unknown, i) => {
      const profile = this.checkedProfile(p, (problem) => fail(`users[${i}]: ${problem}`));
      if (!verifyProfile(profile, this.deps.verifier))
        throw fail(`users[${i}] (${profile.login}): signature does not verify`);
      return profile;
    });

    for (const d of descriptors) {
      if (d.serverLogin === this.deps.config.serverLogin) {
        if (d.signKeyB64 !== this.deps.serverKey.publicKeyB64)
          this.deps.log.warn('directory file lists this server with another key; ignored', { path });
        continue;
      }
      await this.pinServer(d, 'static');
    }
    let stored = 0;
    for (const profile of profiles) {
      await this.profileLock.run(profile.login, async () => {
        const current = (await this.deps.store.directory.getUser(profile.login))?.profile;
        if (current && current.signKeyB64 !== profile.signKeyB64)
          throw fail(`users: ${profile.login} is known here with another signKey`);
        if (current && current.version >= profile.version) return;
        await this.save(profile, 'static');
        stored++;
      });
    }
    this.deps.log.info('directory file loaded', {
      path,
      servers: descriptors.length,
      users: profiles.length,
      usersStored: stored,
    });
    return { servers: descriptors.length, users: stored };
  }

  /** Drops a cached entry (e.g. after another module wrote the profile). */
  invalidate(login: string): void {
    this.cache.delete(login);
  }

  private async save(profile: UserProfile, source: ProfileSource): Promise<void> {
    await this.deps.store.directory.putUser(profile, source, this.deps.clock.now());
    this.cache.delete(profile.login);
  }

  /** Shape-checks and copies exactly the profile fields, so nothing extra is stored or signed over. */
  private checkedProfile(input: unknown, error: (problem: string) => Error): UserProfile {
    const problem = profileShapeProblem(input);
    if (problem) throw error(problem);
    const p = input as UserProfile;
    return {
      login: p.login,
      signKeyB64: p.signKeyB64,
      encKeyB64: p.encKeyB64,
      accessServers: [...p.accessServers],
      version: p.version,
      updatedAtMs: p.updatedAtMs,
      signatureB64: p.signatureB64,
    };
  }

  private remember(login: string, entry: DirectoryEntry, now: number): void {
    this.cache.delete(login);
    if (this.cache.size >= CACHE_LIMIT) {
      const oldest = this.cache.keys().next().value;
      if (oldest !== undefined) this.cache.delete(oldest);
    }
    this.cache.set(login, { entry, cachedAtMs: now });
  }
}

/** Why `next` may not replace `stored` (same key, higher version), or null when it may. */
function replacementProblem(stored: UserProfile, next: UserProfile): string | null {
  if (stored.signKeyB64 !== next.signKeyB64) return `${next.login} is registered with another signKey`;
  if (next.version <= stored.version) return `version ${next.version} is not higher than the stored ${stored.version}`;
  return null;
}

function sameProfile(a: UserProfile, b: UserProfile): boolean {
  return (
    a.login === b.login &&
    a.signKeyB64 === b.signKeyB64 &&
    a.encKeyB64 === b.encKeyB64 &&
    a.accessServers.join(',') === b.accessServers.join(',') &&
    a.version === b.version &&
    a.updatedAtMs === b.updatedAtMs &&
    a.signatureB64 === b.signatureB64
  );
}

/** Shape checks of a server descriptor (not its signature); returns a reason or null. */
function descriptorShapeProblem(d: unknown): string | null {
  if (typeof d !== 'object' || d === null) return 'descriptor must be an object';
  const o = d as Record<string, unknown>;
  if (!isValidLogin(o.serverLogin)) return 'bad serverLogin';
  if (typeof o.wsUrl !== 'string' || !/^wss?:\/\//.test(o.wsUrl)) return 'wsUrl must be a ws:// or wss:// URL';
  if (typeof o.signKeyB64 !== 'string' || fromBase64(o.signKeyB64)?.length !== 32)
    return 'signKeyB64 must be 32 bytes of base64';
  if (typeof o.signatureB64 !== 'string') return 'signatureB64 must be a string';
  return null;
}

/** Sets a value in a bounded map, dropping the oldest entry when it is full. */
function remember(map: Map<string, number>, key: string, value: number): void {
  map.delete(key);
  if (map.size >= CACHE_LIMIT) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
  map.set(key, value);
}
