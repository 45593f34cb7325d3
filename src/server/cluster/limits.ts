/**
 * Per-key limits (calls per login) that hold across the processes of one server (docs/protocol.md §9.2,
 * decision 27): a token bucket per key in Redis, taken by one Lua script, so a user spreading requests
 * over several processes gets no more than from one. Without Redis, and while Redis cannot be reached,
 * each process keeps its own buckets (a user may then get up to one burst per process).
 */
import type { Redis } from 'ioredis';
import type { Clock } from '../clock.js';
import type { RateLimitConfig } from '../config/config.js';
import type { Logger } from '../log.js';
import type { Counter, Metrics } from '../metrics.js';
import { KeyedTokenBuckets } from '../transport/rate-limit.js';

/** One kind of limit, one bucket per key. */
export interface KeyedLimiter {
  /** Takes one token of key's bucket; false when it is empty. */
  take(key: string): Promise<boolean>;
}

/** Makes the limiters of a server: shared through Redis when it has Redis, else per process. */
export type LimiterFactory = (name: string, limit: RateLimitConfig) => KeyedLimiter;

/**
 * KEYS[1] the bucket (a hash: tokens, at); ARGV now (ms), perSecond, burst, ttl (ms). Returns 1 when a
 * token was taken. The time comes from the caller's clock; a clock behind the stored one refills nothing.
 */
const TAKE_SCRIPT = `
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local now = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local taken = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(math.max(now, at)))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return taken
`;

type RedisWithTake = Redis & {
  shineTakeToken(key: string, nowMs: number, perSecond: number, burst: number, ttlMs: number): Promise<number>;
};

export interface ClusterLimitsDeps {
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  /** A connected client (commands fail at once while disconnected: enableOfflineQueue off), or null. */
  redis: Redis | null;
  /** SHINE_REDIS_PREFIX: every bucket key starts with it. */
  prefix: string;
}

export class ClusterLimits {
  private readonly fallbacks: Counter;
  private readonly redis: RedisWithTake | null;
  private warnedAtMs = -Infinity;

  constructor(private readonly deps: ClusterLimitsDeps) {
    this.fallbacks = deps.metrics.counter(
      'limits_redis_fallbacks_total',
      'Limit checks answered from this process’s own buckets because Redis could not be reached',
      [],
    );
    if (deps.redis) deps.redis.defineCommand('shineTakeToken', { numberOfKeys: 1, lua: TAKE_SCRIPT });
    this.redis = deps.redis as RedisWithTake | null;
  }

  /** The limiter named name (a part of its Redis keys: `<prefix>limit:<name>:<key>`). */
  readonly limiter: LimiterFactory = (name, limit) => {
    const local = new KeyedTokenBuckets(limit, this.deps.clock);
    const redis = this.redis;
    if (!redis) return { take: (key) => Promise.resolve(local.take(key)) };
    // A bucket untouched for a whole refill is full again: its key may go.
    const ttlMs = Math.ceil((limit.burst / limit.perSecond) * 1000) + 1000;
    return {
      take: async (key) => {
        try {
          const taken = await redis.shineTakeToken(
            `${this.deps.prefix}limit:${name}:${key}`,
            this.deps.clock.now(),
            limit.perSecond,
            limit.burst,
            ttlMs,
          );
          return taken === 1;
        } catch (err) {
          this.fellBack(err);
          return local.take(key);
        }
      },
    };
  };

  private fellBack(err: unknown): void {
    this.fallbacks.inc();
    // One line a minute, not one per request, while Redis is away.
    const now = this.deps.clock.now();
    if (now - this.warnedAtMs < 60_000) return;
    this.warnedAtMs = now;
    this.deps.log.warn('Redis unreachable: limits are per process meanwhile', { err: String(err) });
  }
}
