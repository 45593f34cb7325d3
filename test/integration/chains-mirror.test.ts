/**
 * User chains mirrored to partners (docs/protocol.md §14.3) on real in-process servers on loopback: 1 000 blocks
 * added on one server reach its two partners, verified. (Its own file: on a loaded machine it takes a while.)
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RunningServer } from '../../src/server/app.js';
import {
  PATIENT,
  addBlocks,
  debugChains,
  headOf,
  makeBlocks,
  partners,
  readChain,
  sameHead,
  verifies,
} from '../helpers/chains.js';
import { metric } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

describe('user chains mirrored to partners', () => {
  it('a) 1 000 blocks added by alice on alpha reach beta and gamma; every block verifies; each head equals alpha’s', async () => {
    await using net = await startNetwork({
      federate: true,
      // 1 000 AddBlocks back to back on one connection: more than the default per-connection rate allows.
      servers: partners(['alpha', 'beta', 'gamma'], () => ({
        ...PATIENT,
        rateLimit: { perSecond: 100_000, burst: 100_000 },
      })),
    });
    const [alpha, beta, gamma] = net.servers as [RunningServer, RunningServer, RunningServer];
    const alice = makeUser('alice', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const blocks = makeBlocks(alice, 1000);
    await addBlocks(session, blocks);
    const head = await headOf(alpha, 'alice');
    assert.deepEqual(head, { index: 999, hash: blocks[999]!.blockHash });
    for (const partner of [beta, gamma]) {
      await waitUntil(
        () => sameHead(alpha, partner, 'alice'),
        60_000,
        `${partner.config.serverLogin} has alice’s head`,
      );
      const chain = await readChain(partner.wsUrl, 'alice');
      assert.equal(chain.items.length, 1000);
      assert.ok(verifies(alice, chain.items), `every block on ${partner.config.serverLogin} verifies`);
      assert.equal(chain.headHash, head.hash);
    }
    // alpha saw both acknowledge the head; the partners stored by receive, none pushed back to alpha.
    await waitUntil(async () => {
      const d = await debugChains(alpha.httpUrl, 'alice');
      return d.partners.every((p) => p.ackedIndex === 999);
    }, 60_000);
    const debug = await debugChains(alpha.httpUrl, 'alice');
    assert.deepEqual(
      debug.partners.map((p) => [p.partner, p.ackedIndex, p.ackedHash]),
      [
        ['beta', 999, head.hash],
        ['gamma', 999, head.hash],
      ],
    );
    assert.equal(debug.resync, null);
    // Every block left alpha by its own push at least once. Not twice for certain: a partner that got a block
    // from the other one first pushes it back to alpha, whose push to it then starts after that acknowledgement.
    assert.ok((await metric(alpha, 'shine_chain_blocks_pushed_total')) >= 1000);
    // Each block stored once: pushed by alpha or gamma, or pulled after a CHAIN_GAP from gamma's forwarding.
    assert.equal(await metric(beta, 'shine_chain_blocks_stored_total'), 1000);
  });
});
