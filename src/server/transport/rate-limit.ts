/** Per-connection token bucket on the injected clock. */
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
}
