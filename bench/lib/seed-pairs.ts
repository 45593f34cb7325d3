/**
 * One owner's text pairs written through a store as its SendMessagePair writes them, for the benches that
 * read or pull a history (catch-up, SQLite reads): each delivered with the server's own signed receipt as
 * its proof (the recipient on the same server, docs/protocol.md §13.1), or failed without one.
 */
import { messageKeyOf } from '../../src/protocol/container.js';
import { receiptFor } from '../../src/server/delivery/receipts.js';
import { keyFromSeed } from '../../src/server/keys.js';
import type { Store } from '../../src/server/store/types.js';
import { pairOf, seedFor } from '../../test/helpers/replication.js';

/** Writes issued together share commits (group commit); a bounded window keeps the queue small. */
const WINDOW = 4096;

/**
 * Stores `count` pairs owner → to, the i-th sent at baseMs + i, with outbox rows for owner (unsynced) and
 * delivery rows: `delivered` with serverLogin's receipt when proofs, else `failed`. Returns the outgoing keys.
 */
export async function seedPairs(
  store: Store,
  opts: { owner: string; to: string; serverLogin: string; count: number; baseMs: number; proofs: boolean },
): Promise<string[]> {
  const outbox = { owners: new Map([[opts.owner, false]]) };
  const serverKey = keyFromSeed(seedFor(opts.serverLogin));
  const sign = (text: string): string => serverKey.sign(text);
  const keys: string[] = [];
  for (let start = 0; start < opts.count; start += WINDOW) {
    const writes = [];
    for (let i = start; i < Math.min(opts.count, start + WINDOW); i++) {
      const t = opts.baseMs + i;
      const { incoming, outgoing } = pairOf(
        { from: opts.owner, to: opts.to, timeMs: t, nonce: i },
        { kind: 'text', bodyBytes: 96 },
      );
      const delivery = opts.proofs
        ? {
            state: 'delivered' as const,
            attempt: 1,
            acceptedAtMs: t,
            nextAttemptAtMs: null,
            proof: receiptFor(opts.serverLogin, sign, {
              ...incoming,
              messageKey: messageKeyOf(incoming),
              storedAtMs: t,
            }),
          }
        : { state: 'failed' as const, attempt: 6, acceptedAtMs: t, nextAttemptAtMs: null };
      keys.push(messageKeyOf(outgoing));
      writes.push(store.messages.storePair({ incoming, outgoing, nowMs: t, outbox, delivery }));
    }
    await Promise.all(writes);
  }
  return keys;
}
