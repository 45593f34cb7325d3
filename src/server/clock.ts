/**
 * Injected time. Domain code never calls Date.now() or setTimeout directly, so tests can run an hour
 * of retries in seconds with a ManualClock.
 */
export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  now(): number;
  /** Runs fn once after ms of this clock's time. */
  setTimer(ms: number, fn: () => void): TimerHandle;
}

/** setTimeout's longest delay; a longer one fires after 1 ms instead (TimeoutOverflowWarning). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    // Long periods (e.g. SHINE_SYNC_INTERVAL_MS of a month) wait in steps rather than overflow into a busy loop.
    let t: ReturnType<typeof setTimeout>;
    const arm = (left: number): void => {
      t = setTimeout(left > MAX_TIMEOUT_MS ? () => arm(left - MAX_TIMEOUT_MS) : fn, Math.min(left, MAX_TIMEOUT_MS));
      t.unref?.();
    };
    arm(ms);
    return { cancel: () => clearTimeout(t) };
  },
};

/** A clock moved by hand: advance() fires due timers in time order. */
export class ManualClock implements Clock {
  private timers: { at: number; seq: number; fn: () => void; cancelled: boolean }[] = [];
  private seq = 0;

  constructor(private current = 1_774_700_000_000) {}

  now(): number {
    return this.current;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    const timer = { at: this.current + Math.max(0, ms), seq: this.seq++, fn, cancelled: false };
    this.timers.push(timer);
    return { cancel: () => void (timer.cancelled = true) };
  }

  /** Moves time forward, firing every timer that falls due on the way, in order. */
  advance(ms: number): void {
    const target = this.current + ms;
    for (;;) {
      this.timers = this.timers.filter((t) => !t.cancelled);
      this.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.timers[0];
      if (!next || next.at > target) break;
      this.timers.shift();
      this.current = Math.max(this.current, next.at);
      next.fn();
    }
    this.current = target;
  }

  set(ms: number): void {
    this.current = ms;
  }
}

/** The promise's value, or null when ms of the clock pass first (or when it rejects). */
export function raceTimer<T>(p: Promise<T>, ms: number, clock: Clock): Promise<T | null> {
  return new Promise((resolve) => {
    const timer = clock.setTimer(ms, () => resolve(null));
    p.then(
      (v) => {
        timer.cancel();
        resolve(v);
      },
      () => {
        timer.cancel();
        resolve(null);
      },
    );
  });
}
