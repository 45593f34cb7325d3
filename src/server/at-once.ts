/**
 * Runs fn for each item, at most `limit` at a time, in order; no item starts once stop() is true. For work that
 * waits for a peer's answers (a round trip each, long between distant servers) far more than it computes: a
 * replication cycle's owners (docs/protocol.md §7), a chain backfill's chains (§14.3).
 */
export async function eachAtOnce<T>(
  items: readonly T[],
  limit: number,
  stop: () => boolean,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length && !stop()) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}
