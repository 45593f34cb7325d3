/**
 * User chains between partner servers (docs/protocol.md §14.3), on real in-process servers on loopback: push to
 * every partner, backfill in one cycle after a partner was down, CHAIN_GAP refilled by the sender, and a divergence
 * resolved by the owner's first access server's chain.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createLogger } from '../../src/server/log.js';
import type { RunningServer } from '../../src/server/app.js';
import {
  PATIENT,
  addBlocks,
  debugChains,
  makeBlocks,
  partners,
  putBehindTheBack,
  readChain,
  sameHead,
  verifies,
} from '../helpers/chains.js';
import { adminSync, metric } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { suiteConcurrency } from '../helpers/test-db.js';

describe('user chains between partners', { concurrency: suiteConcurrency() }, () => {
  it('b) gamma down while 200 blocks are added, back up: it catches up by backfill within one cycle, no gap left', async () => {
    await using net = await startNetwork({ federate: true, servers: partners(['alpha', 'beta', 'gamma']) });
    const [alpha, , gamma] = net.servers as [RunningServer, RunningServer, RunningServer];
    const alice = makeUser('alice', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const first = makeBlocks(alice, 10);
    await addBlocks(session, first);
    await waitUntil(() => sameHead(alpha, gamma, 'alice'), 20_000, 'gamma has the first blocks');
    await net.stop(2);
    const more = makeBlocks(alice, 200, first[9]!.block);
    await addBlocks(session, more);
    // alpha's pushes to gamma fail until the (compressed) hour of retries is over and it gives up.
    await alpha.drain();
    const restarted = await net.start(2);
    const summary = (await adminSync(restarted)) as unknown as { chainBlocksPulled: number; errors: number };
    assert.equal(summary.errors, 0);
    assert.ok(await sameHead(alpha, restarted, 'alice'), 'gamma’s head equals alpha’s after one cycle');
    const chain = await readChain(restarted.wsUrl, 'alice');
    assert.deepEqual(
      chain.items.map((i) => i.index),
      Array.from({ length: 210 }, (_, i) => i),
    );
    assert.ok(verifies(alice, chain.items));
    assert.ok((await metric(restarted, 'shine_chain_blocks_pulled_total')) >= 1);
    void gamma;
  });

  it('pushes to a partner run many chains at once: chains whose blocks wait there hold up no other', async () => {
    // A call waits for its answer up to a minute: a push that waits does not give its lane up within the test.
    await using net = await startNetwork({
      federate: true,
      servers: partners(['alpha', 'gamma'], () => ({ s2sTimeoutMs: 60_000 })),
    });
    const [alpha, gamma] = net.servers as [RunningServer, RunningServer];
    // gamma stores no block of the first 16 users until the test lets it go: twice the lanes pushes used to have.
    const held = new Set(Array.from({ length: 16 }, (_, i) => `held${String(i).padStart(2, '0')}`));
    const chains = gamma.ctx.store.chains;
    const append = chains.append.bind(chains);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const waiting = new Set<string>();
    chains.append = async (block) => {
      if (held.has(block.login)) {
        waiting.add(block.login);
        await gate;
      }
      return append(block);
    };
    try {
      for (const login of [...held, 'zoe']) {
        const user = makeUser(login, ['alpha']);
        await using session = await connectUser(alpha.wsUrl, user);
        await addBlocks(session, makeBlocks(user, 1));
      }
      await waitUntil(() => sameHead(alpha, gamma, 'zoe'), 10_000, "zoe's block pushed while 16 chains' blocks wait");
      assert.equal(waiting.size, held.size, 'every held chain was being pushed at once');
      release();
      for (const login of held) await waitUntil(() => sameHead(alpha, gamma, login), 10_000, `${login}'s block pushed`);
    } finally {
      release();
      chains.append = append;
    }
  });

  it('a backfill catches up several chains at once: a chain whose pages wait holds up no other', async () => {
    await using net = await startNetwork({ federate: true, servers: partners(['alpha', 'gamma']) });
    const [alpha] = net.servers as [RunningServer, RunningServer];
    await net.stop(1);
    // alice's head comes first in alpha's GetChainHeads (appended first), bob's after it.
    const users = [makeUser('alice', ['alpha']), makeUser('bob', ['alpha'])];
    for (const user of users) {
      await using session = await connectUser(alpha.wsUrl, user);
      await addBlocks(session, makeBlocks(user, 3));
    }
    // alpha's pushes to gamma fail until the (compressed) hour of retries is over and it gives up.
    await alpha.drain();
    const chains = alpha.ctx.store.chains;
    const blocks = chains.blocks.bind(chains);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let held = false;
    chains.blocks = async (login, fromIndex, limit) => {
      if (login === 'alice') {
        held = true;
        await gate;
      }
      return blocks(login, fromIndex, limit);
    };
    try {
      const gamma = await net.start(1);
      const cycle = adminSync(gamma);
      await waitUntil(() => sameHead(alpha, gamma, 'bob'), 10_000, "bob's chain pulled while alice's pages wait");
      assert.ok(held, "alice's pages were asked for and held");
      release();
      const summary = (await cycle) as unknown as { chainBlocksPulled: number; errors: number };
      assert.deepEqual({ pulled: summary.chainBlocksPulled, errors: summary.errors }, { pulled: 6, errors: 0 });
      assert.ok(await sameHead(alpha, gamma, 'alice'), 'alice’s chain pulled once let go');
    } finally {
      release();
      chains.blocks = blocks;
    }
  });

  it('c) a block pushed out of order (head + 2) is refused with CHAIN_GAP and the sender fills the gap; nothing is stored out of order', async () => {
    await using net = await startNetwork({ federate: true, servers: partners(['alpha', 'beta'], () => PATIENT) });
    const [alpha, beta] = net.servers as [RunningServer, RunningServer];
    const alice = makeUser('alice', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const first = makeBlocks(alice, 5);
    await addBlocks(session, first);
    await waitUntil(() => sameHead(alpha, beta, 'alice'), 20_000, 'beta has blocks 0..4');
    // alpha gets blocks 5..7 without pushing them (once its pushes are done), then pushes only block 7 (head + 3).
    await alpha.drain();
    const more = makeBlocks(alice, 3, first[4]!.block);
    await putBehindTheBack(alpha, more);
    alpha.ctx.chains.schedulePush('alice', 7, null);
    await waitUntil(() => sameHead(alpha, beta, 'alice'), 20_000, 'beta has blocks 5..7');
    assert.ok((await metric(alpha, 'shine_chain_gaps_total', { side: 'received' })) >= 1);
    assert.ok((await metric(beta, 'shine_chain_gaps_total', { side: 'answered' })) >= 1);
    const chain = await readChain(beta.wsUrl, 'alice');
    assert.deepEqual(
      chain.items.map((i) => i.index),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
    assert.ok(verifies(alice, chain.items));
  });

  it('d) divergence: beta’s block 5 differs from alpha’s (alice’s first access server); after one cycle beta’s chain is alpha’s and the replaced head is logged', async () => {
    const lines: Record<string, unknown>[] = [];
    const betaLog = createLogger('info', (line) => lines.push(JSON.parse(line) as Record<string, unknown>));
    await using net = await startNetwork({
      federate: true,
      servers: partners(['alpha', 'beta'], (login) => (login === 'beta' ? { log: betaLog } : {})),
    });
    const [alpha, beta] = net.servers as [RunningServer, RunningServer];
    const alice = makeUser('alice', ['alpha', 'beta']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const common = makeBlocks(alice, 5);
    const ours = [...common, ...makeBlocks(alice, 5, common[4]!.block, 'alpha')];
    const theirs = [...common, ...makeBlocks(alice, 7, common[4]!.block, 'beta')];
    // After the start-up cycles, so that only the cycle below meets the divergence.
    await alpha.drain();
    await beta.drain();
    await putBehindTheBack(alpha, ours);
    await putBehindTheBack(beta, theirs);
    const summary = (await adminSync(beta)) as unknown as { chainResyncs: number; errors: number };
    assert.equal(summary.errors, 0);
    assert.equal(summary.chainResyncs, 1);
    const a = await readChain(alpha.wsUrl, 'alice');
    const b = await readChain(beta.wsUrl, 'alice');
    assert.deepEqual(b, a);
    assert.equal(b.headHash, ours[9]!.blockHash);
    assert.ok(verifies(alice, b.items));
    const replaced = lines.find((l) => l.msg === 'chain replaced by resync');
    assert.ok(replaced, 'the resync is logged');
    assert.equal(replaced.replacedIndex, 11);
    assert.equal(replaced.replacedHash, theirs[11]!.blockHash);
    assert.equal(replaced.headHash, ours[9]!.blockHash);
    assert.equal(replaced.source, 'alpha');
    assert.equal((await debugChains(beta.httpUrl, 'alice')).resync, null);
    assert.equal(await metric(beta, 'shine_chain_resyncs_total', { result: 'done' }), 1);
    // alpha, the authoritative server, keeps its chain after its own cycle.
    await adminSync(alpha);
    assert.deepEqual(await readChain(alpha.wsUrl, 'alice'), a);
    void session;
  });
});
