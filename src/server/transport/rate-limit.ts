/** Token buckets on the injected clock: per connection, and per key (calls per login). */
import type { Clock } from '../clock.js';
import type { RateLimitConfig } from '../config/config.js';

export class TokenBucket {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly limit: RateLimitConfig,
    private readonly clock: Clock,
  ) {
    this.tokens = limit.burst;
    this.lastMs = clock.now();
  }

  /** Takes one token; false when the bucket is empty. */
  take(): boolean {
    const now = this.clock.now();
    // max(0, …): a clock set backwards must not drain the bucket.
    this.tokens = Math.min(
      this.limit.burst,
      this.tokens + (Math.max(0, now - this.lastMs) * this.limit.perSecond) / 1000,
    );
    this.lastMs = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** How long the bucket has not been used at time now. */
  idleMs(now: number): number {
    return now - this.lastMs;
  }
}

/** One token bucket per key (a login, an address), made on first use and forgotten once full again. */
export class KeyedTokenBuckets {
  private readonly buckets = new Map<string, TokenBucket>();
  private sweepAtMs: number;

  constructor(
    private readonly limit: RateLimitConfig,
    private readonly clock: Clock,
  ) {
    this.sweepAtMs = clock.now() + this.refillMs();
  }

  /** Takes one token of key's bucket; false when it is empty. */
  take(key: string): boolean {
    this.sweep();
    let bucket = this.buckets.get(key);
    if (!bucket) this.buckets.set(key, (bucket = new TokenBucket(this.limit, this.clock)));
    return bucket.take();
  }

  get size(): number {
    return this.buckets.size;
  }

  /** A bucket untouched for a whole refill is full: dropping it changes no answer and bounds the map. */
  private sweep(): void {
    const now = this.clock.now();
    if (now < this.sweepAtMs) return;
    this.sweepAtMs = now + this.refillMs();
    for (const [key, bucket] of this.buckets) if (bucket.idleMs(now) >= this.refillMs()) this.buckets.delete(key);
  }

  private refillMs(): number {
    return (this.limit.burst / this.limit.perSecond) * 1000;
  }
}
