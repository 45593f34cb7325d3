/**
 * Runs fn for each item, at most `limit` at a time, in order; no item starts once stop() is true. For work that
 * waits for a peer's answers (a round trip each, long between distant servers) far more than it computes: a
 * replication cycle's owners and an anti-entropy repair's ranges (docs/protocol.md §7), a chain backfill's chains
 * (§14.3). The first item that fails starts no more; once those under way have ended, its error is thrown.
 */
export async function eachAtOnce<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
  stop: () => boolean = () => false,
): Promise<void> {
  let next = 0;
  const failure: { err?: unknown } = {};
  const lane = async (): Promise<void> => {
    while (next < items.length && !stop() && !('err' in failure)) {
      try {
        await fn(items[next++]!);
      } catch (err) {
        if (!('err' in failure)) failure.err = err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  if ('err' in failure) throw failure.err;
}
