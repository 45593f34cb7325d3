/**
 * Serialises async sections per key inside one process (e.g. check-then-write of one login's profile).
 * Cross-process exclusion is the database's job.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  /** Runs fn after every earlier fn of the same key has settled. */
  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const tail = new Promise<void>((resolve) => (release = resolve));
    this.tails.set(key, tail);
    await previous;
    try {
      return await fn();
    } finally {
      release();
      // Only the last waiter removes the entry, so the map never grows with idle keys.
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
