/**
 * The SDK's user chain against a real server (docs/protocol.md §14): addBlock on two devices of one user (rebase on
 * CHAIN_CONFLICT), getChain paged and verified from another, unauthenticated socket, ChainEvent to the other device,
 * and a block damaged in the server's database reported by its index and reason.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import type { AddedBlock, ChainEventPayload, ShineClientError } from '../../src/client/index.js';
import {
  ShineClient,
  TEXT_POST_KIND,
  blockHash,
  buildNextBlock,
  createIdentity,
  describeChainProblem,
} from '../../src/client/index.js';
import { fromUtf8, utf8 } from '../../src/protocol/bytes.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { damageChainBlock } from '../helpers/chain-damage.js';
import { connectIdentity, profileOf } from '../helpers/federated-processes.js';
import { queryServerDb } from '../helpers/test-db.js';
import { waitUntil } from '../helpers/wait.js';

describe('SDK user chains against a real server', () => {
  let net: TestNetwork;
  let wsUrl: string;
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');
  const carol = createIdentity('carol');
  let a1: ShineClient;
  let a2: ShineClient;
  let anon: ShineClient;

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    wsUrl = net.servers[0]!.wsUrl;
    anon = await ShineClient.connect(wsUrl, { WebSocket });
    for (const id of [bob, carol]) await anon.register(profileOf(id, ['alpha']));
    a1 = await connectIdentity(wsUrl, alice, ['alpha'], 'phone');
    a2 = await connectIdentity(wsUrl, alice, ['alpha'], 'laptop');
  });
  after(async () => {
    for (const c of [a1, a2, anon]) await c?.close();
    await net?.close();
  });

  it('an empty chain reads as head -1 with nothing to verify; an unknown user is USER_NOT_FOUND', async () => {
    const empty = await anon.getChain('bob');
    assert.deepEqual(empty, { login: 'bob', headIndex: -1, headHash: null, blocks: [], problem: null });
    await assert.rejects(anon.getChain('nobody'), (e: unknown) => (e as ShineClientError).code === 'USER_NOT_FOUND');
  });

  it('addBlock starts at genesis and links on; the other device gets each block as a ChainEvent', async () => {
    const events: ChainEventPayload[] = [];
    const off = a2.on('ChainEvent', (ev) => events.push(ev));
    const added: AddedBlock[] = [];
    for (const text of ['hello', 'second', 'third']) added.push(await a1.addBlock(TEXT_POST_KIND, utf8(text)));
    assert.deepEqual(
      added.map((a) => [a.login, a.index, a.rebased]),
      [
        ['alice', 0, 0],
        ['alice', 1, 0],
        ['alice', 2, 0],
      ],
    );
    assert.ok(
      added.every((a, i) => a.blockHash === blockHash(a.block) && (i === 0 || a.globalSeq > added[i - 1]!.globalSeq)),
    );
    // The laptop's events may come after the phone's answers: listen until all three are in.
    await waitUntil(() => events.length === 3, 5000, 'three ChainEvents on the laptop');
    off();
    assert.deepEqual(
      events.map((e) => [e.login, e.index, e.blockHash]),
      added.map((a) => ['alice', a.index, a.blockHash]),
    );
    // The laptop checks each event block against the head it has verified.
    const chain = await a2.getChain('alice', { after: added[1]!.block });
    assert.deepEqual([chain.problem, chain.blocks.map((b) => b.index)], [null, [2]]);
  });

  it('getChain pages from any socket and verifies every block with the profile key', async () => {
    const chain = await anon.getChain('alice', { pageSize: 2 });
    assert.equal(chain.problem, null);
    assert.equal(chain.headIndex, 2);
    assert.deepEqual(
      chain.blocks.map((b) => fromUtf8(b.body)),
      ['hello', 'second', 'third'],
    );
    assert.equal(chain.headHash, blockHash(chain.blocks[2]!));
  });

  it('a block built on a stale head is CHAIN_CONFLICT with the head; addBlock rebases on it', async () => {
    const stale = buildNextBlock(alice, null, { kind: 1, body: utf8('a second genesis') });
    const conflict = await a1.request('AddBlock', { blockB64: stale.blockB64 }).then(
      () => assert.fail('a second genesis was accepted'),
      (e: unknown) => e as ShineClientError,
    );
    assert.equal(conflict.code, 'CHAIN_CONFLICT');
    assert.equal(conflict.status, 409);
    const head = await anon.getChain('alice');
    assert.deepEqual(conflict.details, { headIndex: 2, headHash: head.headHash });

    // Both devices write at once: each builds on the head it knows, and a refused one rebases, so nothing is lost.
    let rebased = 0;
    let rounds = 0;
    while (rebased === 0 && rounds < 20) {
      rounds++;
      const results = await Promise.all([
        a1.addBlock(1, utf8(`phone ${rounds}`)),
        a2.addBlock(1, utf8(`laptop ${rounds}`)),
      ]);
      rebased += results.reduce((n, r) => n + r.rebased, 0);
    }
    assert.ok(rebased > 0, `no rebase in ${rounds} rounds of racing writes`);
    const after = await anon.getChain('alice');
    assert.equal(after.problem, null);
    assert.equal(after.blocks.length, 3 + 2 * rounds);
    const bodies = after.blocks.map((b) => fromUtf8(b.body));
    for (let r = 1; r <= rounds; r++) assert.ok(bodies.includes(`phone ${r}`) && bodies.includes(`laptop ${r}`));
  });

  it('a block damaged in the database is reported with its index; the blocks before it stay verified', async () => {
    const c1 = await connectIdentity(wsUrl, carol, ['alpha'], 'cli');
    try {
      for (const text of ['one', 'two', 'three', 'four']) await c1.addBlock(1, utf8(text));
    } finally {
      await c1.close();
    }
    const restore = await damageChainBlock(net.servers[0]!, 'carol', 2);
    try {
      const chain = await anon.getChain('carol');
      assert.deepEqual(chain.problem, { index: 2, reason: 'BAD_SIGNATURE' });
      assert.deepEqual(
        chain.blocks.map((b) => fromUtf8(b.body)),
        ['one', 'two'],
      );
      assert.equal(chain.headIndex, 3);
    } finally {
      await restore();
    }
    assert.equal((await anon.getChain('carol')).problem, null);
  });

  it('a server naming a head it does not send is reported as a short chain, not taken as a shorter one', async () => {
    const server = net.servers[0]!;
    const where = 'WHERE login = ? AND idx = ?';
    const [row] = await queryServerDb(server, `SELECT * FROM chain_blocks ${where}`, ['carol', 3]);
    await queryServerDb(server, `DELETE FROM chain_blocks ${where}`, ['carol', 3]);
    try {
      const chain = await anon.getChain('carol');
      assert.deepEqual([chain.headIndex, chain.blocks.length, chain.problem], [3, 3, { index: 3, reason: 'SHORT' }]);
      assert.match(describeChainProblem(chain.problem!), /^block 3 is missing: the server named a head further on/);
    } finally {
      const columns = Object.keys(row!);
      await queryServerDb(
        server,
        `INSERT INTO chain_blocks (${columns.join(', ')}) VALUES (${columns.map(() => '?').join(', ')})`,
        Object.values(row!),
      );
    }
    assert.equal((await anon.getChain('carol')).problem, null);
  });
});
