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
