/**
 * User chains on one server (docs/protocol.md §14.2): AddBlock, GetChain and ChainEvent end to end, and hostile
 * input refused with its code and nothing stored.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { buildNextBlock } from '../../src/client/chain.js';
import { encodeSignedBlock } from '../../src/protocol/block.js';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import type { ChainEventPayload, OpResults } from '../../src/protocol/ops.js';
import { assertError } from '../helpers/assert.js';
import { addBlocks, headOf, makeBlocks, readChain, T_CHAIN, verifies } from '../helpers/chains.js';
import { fakeServer, fastServer, metric, serverSession } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { connectRaw } from '../helpers/raw-client.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { ConfigError } from '../../src/server/config/config.js';
import { suiteConcurrency } from '../helpers/test-db.js';

describe('user chains on one server', { concurrency: suiteConcurrency() }, () => {
  it('AddBlock appends with a growing globalSeq, GetChain pages it, ChainEvent reaches the other session; the same block again is a success; CHAIN_CONFLICT names the head', async () => {
    await using net = await startNetwork({ servers: [fastServer('alpha')] });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    await using laptop = await connectUser(alpha.wsUrl, alice, 'laptop');
    await using phone = await connectUser(alpha.wsUrl, alice, 'phone');
    const blocks = makeBlocks(alice, 7);
    // Empty chain: head -1/null.
    await using anon = await connectRaw(alpha.wsUrl);
    assert.deepEqual(await anon.call('GetChain', { login: 'alice' }), {
      login: 'alice',
      headIndex: -1,
      headHash: null,
      items: [],
      hasMore: false,
    });
    const seqs: number[] = [];
    for (const b of blocks) {
      const a = await laptop.call<OpResults['AddBlock']>('AddBlock', { blockB64: b.blockB64 });
      assert.equal(a.login, 'alice');
      assert.equal(a.index, b.block.index);
      assert.equal(a.blockHash, b.blockHash);
      seqs.push(a.globalSeq);
    }
    assert.ok(
      seqs.every((s, i) => i === 0 || s > seqs[i - 1]!),
      `globalSeq grows: ${seqs.join(',')}`,
    );
    const event = await phone.waitFor((f) => f.op === 'ChainEvent' && (f.payload as ChainEventPayload).index === 6);
    assert.deepEqual(event.payload, {
      login: 'alice',
      index: 6,
      blockHash: blocks[6]!.blockHash,
      blockB64: blocks[6]!.blockB64,
    });
    assert.equal(laptop.events.filter((e) => e.op === 'ChainEvent').length, 0, 'the sending session gets no event');
    // Idempotent: the same block again answers its globalSeq and stores nothing.
    const again = await laptop.call<OpResults['AddBlock']>('AddBlock', { blockB64: blocks[3]!.blockB64 });
    assert.equal(again.globalSeq, seqs[3]);
    // Pages: fromIndex and limit; hasMore until the head.
    const page = await anon.call<OpResults['GetChain']>('GetChain', { login: 'alice', fromIndex: 2, limit: 3 });
    assert.deepEqual(
      page.items.map((i) => i.index),
      [2, 3, 4],
    );
    assert.equal(page.hasMore, true);
    assert.equal(page.headIndex, 6);
    assert.equal(page.headHash, blocks[6]!.blockHash);
    const whole = await readChain(alpha.wsUrl, 'alice');
    assert.equal(whole.items.length, 7);
    assert.ok(verifies(alice, whole.items));
    // A block at a taken height (another body): CHAIN_CONFLICT with the head, so the client can rebase.
    const other = makeBlocks(alice, 1, blocks[4]!.block, 'b')[0]!;
    const conflict = await laptop.request('AddBlock', { blockB64: other.blockB64 });
    assertError(conflict, 409, 'CHAIN_CONFLICT');
    assert.equal((conflict as { error: { headIndex: number } }).error.headIndex, 6);
    assert.equal((conflict as { error: { headHash: string } }).error.headHash, blocks[6]!.blockHash);
    // Ahead of the head: the same.
    const ahead = makeBlocks(alice, 2, blocks[6]!.block)[1]!;
    assertError(await laptop.request('AddBlock', { blockB64: ahead.blockB64 }), 409, 'CHAIN_CONFLICT');
    // An empty chain's conflict names -1/null.
    const bob = makeUser('bob', ['alpha']);
    await using bobSession = await connectUser(alpha.wsUrl, bob);
    const bobSecond = makeBlocks(bob, 2)[1]!;
    const empty = await bobSession.request('AddBlock', { blockB64: bobSecond.blockB64 });
    assertError(empty, 409, 'CHAIN_CONFLICT');
    assert.deepEqual(
      [
        (empty as { error: { headIndex: number } }).error.headIndex,
        (empty as { error: { headHash: null } }).error.headHash,
      ],
      [-1, null],
    );
    assert.equal(await metric(alpha, 'shine_chain_blocks_stored_total', { via: 'add' }), 7);
    assert.deepEqual(await headOf(alpha, 'alice'), { index: 6, hash: blocks[6]!.blockHash });
  });

  it('GetChain pages of large blocks stay under the frame limit: at most 2 000 000 block bytes, at least one block', async () => {
    await using net = await startNetwork({ servers: [fastServer('alpha')] });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const blocks: ReturnType<typeof buildNextBlock>[] = [];
    for (let i = 0; i < 40; i++) {
      blocks.push(
        buildNextBlock({ login: 'alice', signSeed: alice.seed }, blocks.at(-1)?.block ?? null, {
          kind: 7,
          body: new Uint8Array(64 * 1024).fill(i),
          timeMs: T_CHAIN + i,
        }),
      );
    }
    await addBlocks(session, blocks);
    await using anon = await connectRaw(alpha.wsUrl);
    const page = await anon.call<OpResults['GetChain']>('GetChain', { login: 'alice', limit: 500 });
    const bytes = page.items.reduce((n, i) => n + Buffer.from(i.blockB64, 'base64').length, 0);
    assert.ok(page.items.length >= 1 && bytes <= 2_000_000, `${page.items.length} blocks, ${bytes} bytes`);
    assert.equal(page.hasMore, true);
    const whole = await readChain(alpha.wsUrl, 'alice');
    assert.equal(whole.items.length, 40);
    assert.ok(verifies(alice, whole.items));
  });

  it('f) hostile input: another key, a wrong prevHash, a time before the previous block, trailing bytes, a 70 KB body, a future time, another login, a non-partner ReceiveBlock: each refused with its code and nothing stored', async () => {
    // gamma (alpha's chain partner) and delta (a known server, no partner) are servers whose keys the test holds.
    const gamma = fakeServer('gamma');
    const delta = fakeServer('delta');
    const dir = await mkdtemp(join(tmpdir(), 'shine-chains-'));
    const directoryFile = join(dir, 'directory.json');
    await writeFile(directoryFile, JSON.stringify({ servers: [gamma.descriptor, delta.descriptor], users: [] }));
    await using _dir = { [Symbol.asyncDispose]: () => rm(dir, { recursive: true, force: true }) };
    await using net = await startNetwork({
      servers: [fastServer('alpha', { directoryFile, chainPartners: 'gamma' })],
    });
    const alpha = net.servers[0]!;
    const alice = makeUser('alice', ['alpha']);
    const mallory = makeUser('mallory', ['alpha']);
    await using session = await connectUser(alpha.wsUrl, alice);
    const good = makeBlocks(alice, 3);
    await addBlocks(session, good);
    const head = good[2]!.block;
    const before = await headOf(alpha, 'alice');
    const next = (
      over: Partial<{ prevHash: Uint8Array; timeMs: number; body: Uint8Array; login: string }>,
      seed = alice.seed,
    ) =>
      toBase64(
        encodeSignedBlock(
          {
            login: over.login ?? 'alice',
            index: 3,
            prevHash:
              over.prevHash ??
              buildNextBlock({ login: 'alice', signSeed: alice.seed }, head, { kind: 1, body: new Uint8Array() }).block
                .prevHash,
            timeMs: over.timeMs ?? T_CHAIN + 3,
            kind: 1,
            body: over.body ?? utf8('x'),
          },
          seed,
        ).bytes,
      );
    const cases: [string, string, number, string][] = [
      ['another key', next({}, mallory.seed), 400, 'BAD_SIGNATURE'],
      ['wrong prevHash', next({ prevHash: new Uint8Array(32).fill(9) }), 409, 'CHAIN_CONFLICT'],
      ['time before the previous block', next({ timeMs: T_CHAIN + 1 }), 400, 'BAD_TIME'],
      ['time far ahead', next({ timeMs: Date.now() + 3_600_000 }), 400, 'BAD_TIME'],
      ['trailing bytes', toBase64(new Uint8Array([...Buffer.from(next({}), 'base64'), 0])), 400, 'BAD_BLOB'],
      ['not base64', '!!!', 400, 'BAD_BLOB'],
      ['another login', next({ login: 'mallory' }, mallory.seed), 403, 'NOT_SENDER'],
    ];
    for (const [what, blockB64, status, code] of cases) {
      const answer = await session.request('AddBlock', { blockB64 });
      assert.doesNotThrow(() => assertError(answer, status, code), what);
    }
    // A 70 KB body: the block is over the limit before it is decoded.
    const big = toBase64(new Uint8Array(70 * 1024));
    assertError(await session.request('AddBlock', { blockB64: big }), 413, 'TOO_LARGE');
    // ReceiveBlock: from a server that is not a partner (delta), NOT_PARTNER even for a good block; from the
    // partner (gamma), a block signed by another key is BAD_SIGNATURE, one beyond the head CHAIN_GAP with the head.
    const tail = makeBlocks(alice, 2, head);
    await using fromDelta = await serverSession(alpha, delta);
    assertError(await fromDelta.request('ReceiveBlock', { blockB64: tail[0]!.blockB64 }), 403, 'NOT_PARTNER');
    assertError(await fromDelta.request('GetChainHeads', { afterGlobalSeq: 0 }), 403, 'NOT_PARTNER');
    await using fromGamma = await serverSession(alpha, gamma);
    assertError(await fromGamma.request('ReceiveBlock', { blockB64: next({}, mallory.seed) }), 400, 'BAD_SIGNATURE');
    const gap = await fromGamma.request('ReceiveBlock', { blockB64: tail[1]!.blockB64 });
    assertError(gap, 409, 'CHAIN_GAP');
    assert.equal((gap as { error: { headIndex: number } }).error.headIndex, 2);
    assertError(await fromGamma.request('ReceiveBlock', { blockB64: big }), 413, 'TOO_LARGE');
    const diverged = await fromGamma.request('ReceiveBlock', {
      blockB64: next({ prevHash: new Uint8Array(32).fill(9) }),
    });
    assertError(diverged, 409, 'CHAIN_DIVERGED');
    assert.equal((diverged as { error: { headIndex: number } }).error.headIndex, 2);
    assertError(await fromGamma.request('ReceiveBlock', { blockB64: next({ timeMs: T_CHAIN + 1 }) }), 400, 'BAD_TIME');
    assertError(
      await fromGamma.request('ReceiveBlock', {
        blockB64: toBase64(new Uint8Array([...Buffer.from(next({}), 'base64'), 0])),
      }),
      400,
      'BAD_BLOB',
    );
    // The same block again from the partner is an ACK, not a change.
    assert.deepEqual(await fromGamma.call('ReceiveBlock', { blockB64: good[1]!.blockB64 }), {
      login: 'alice',
      index: 1,
      result: 'known',
    });
    assert.deepEqual(await headOf(alpha, 'alice'), before, 'nothing stored');
    assert.equal((await readChain(alpha.wsUrl, 'alice')).items.length, 3);
    // alpha is alice's first access server: it keeps its chain, no resync is pending.
    assert.equal((await alpha.ctx.chains.debug('alice')).resync, null);
  });
});

describe('SHINE_CHAIN_PARTNERS at start-up', () => {
  it('a partner that is not a known peer stops the start with a configuration error', async () => {
    await assert.rejects(
      startNetwork({ servers: [fastServer('alpha', { chainPartners: 'nobody' })] }),
      (err: Error) => err instanceof ConfigError && /chainPartners: nobody is not a known peer/.test(err.message),
    );
  });
});
