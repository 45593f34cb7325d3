/**
 * User chains on one server of several `shine serve` processes sharing PostgreSQL (docs/protocol.md §9.2, §14.2,
 * decision 43): two blocks racing for one height on two processes — one is stored, the other gets CHAIN_CONFLICT
 * naming the winner; appends on both processes get distinct globalSeqs in commit order; a ChainEvent reaches the
 * owner's session on the other process.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChainEventPayload, OpResults } from '../../src/protocol/ops.js';
import { makeBlocks } from '../helpers/chains.js';
import { startCluster } from '../helpers/cluster.js';
import type { ErrorResponse, OkResponse } from '../../src/protocol/envelope.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { openTestStore } from '../helpers/test-db.js';

describe('user chains on several processes of one server', () => {
  it('a race for one height has one winner; globalSeqs are distinct and ordered; ChainEvent crosses processes', async () => {
    await using cluster = await startCluster({ processes: 2, serverLogin: 'alpha' });
    const [p1, p2] = cluster.processes as [(typeof cluster.processes)[0], (typeof cluster.processes)[0]];
    const alice = makeUser('alice', ['alpha']);
    await using on1 = await connectUser(p1.wsUrl, alice, 'laptop');
    await using on2 = await connectUser(p2.wsUrl, alice, 'phone');
    // Two different genesis blocks, one to each process at once.
    const [a] = makeBlocks(alice, 1, null, 'one');
    const [b] = makeBlocks(alice, 1, null, 'two');
    const answers = await Promise.all([
      on1.request<OpResults['AddBlock']>('AddBlock', { blockB64: a!.blockB64 }),
      on2.request<OpResults['AddBlock']>('AddBlock', { blockB64: b!.blockB64 }),
    ]);
    const won = answers.filter((x): x is OkResponse<OpResults['AddBlock']> => x.ok);
    const lost = answers.filter((x): x is ErrorResponse => !x.ok);
    assert.equal(won.length, 1, JSON.stringify(answers));
    assert.equal(lost[0]!.error.code, 'CHAIN_CONFLICT');
    assert.equal((lost[0]!.error as { headHash?: string }).headHash, won[0]!.payload.blockHash);
    // The winner's next blocks from both processes, and other users' chains in between: globalSeqs grow.
    const winner = won[0]!.payload.blockHash === a!.blockHash ? a! : b!;
    const next = makeBlocks(alice, 6, winner.block, 'next');
    const seqs: number[] = [];
    for (const [i, blk] of next.entries()) {
      const session = i % 2 === 0 ? on1 : on2;
      seqs.push((await session.call<OpResults['AddBlock']>('AddBlock', { blockB64: blk.blockB64 })).globalSeq);
    }
    assert.ok(
      seqs.every((s, i) => i === 0 || s > seqs[i - 1]!),
      seqs.join(','),
    );
    const others = Array.from({ length: 8 }, (_, i) => makeUser(`user${i}`, ['alpha']));
    const sessions = await Promise.all(others.map((u, i) => connectUser((i % 2 ? p1 : p2).wsUrl, u)));
    try {
      await Promise.all(
        sessions.map((s, i) => s.call('AddBlock', { blockB64: makeBlocks(others[i]!, 1)[0]!.blockB64 })),
      );
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
    const store = await openTestStore(cluster.db.url);
    try {
      const heads = await store.chains.headsAfter(0, 100);
      assert.equal(heads.length, 9);
      assert.equal(new Set(heads.map((h) => h.globalSeq)).size, 9);
    } finally {
      await store.close();
    }
    // The laptop (process 1) added block 1: the phone on process 2 got it as an event.
    const ev = await on2.waitFor((f) => f.op === 'ChainEvent' && (f.payload as ChainEventPayload).index === 1);
    assert.equal((ev.payload as ChainEventPayload).blockHash, next[0]!.blockHash);
  });
});
