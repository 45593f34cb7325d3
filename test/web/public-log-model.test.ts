/** The web client's Public log model (docs/web-client.md, "Public log"): entries, appending verified blocks, words. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Block } from '../../src/client/index.js';
import { blockHash, buildNextBlock, createIdentity } from '../../src/client/index.js';
import { utf8 } from '../../src/protocol/bytes.js';
import { emptyLog, entryOf, problemSentence, verifiedTitle, withBlocks } from '../../web/src/public-log.js';

const carol = createIdentity('carol');

function chainOf(bodies: [number, Uint8Array][]): Block[] {
  const blocks: Block[] = [];
  for (const [kind, body] of bodies)
    blocks.push(buildNextBlock(carol, blocks.at(-1) ?? null, { kind, body, timeMs: 1_774_700_000_000 }).block);
  return blocks;
}

describe('Public log model', () => {
  it('shows kind-1 UTF-8 bodies as text, anything else as opaque bytes', () => {
    const [text, other, badUtf8] = chainOf([
      [1, utf8('hello ✓')],
      [42, new Uint8Array([1, 2, 3])],
      [1, new Uint8Array([0xff, 0xfe])],
    ]) as [Block, Block, Block];
    assert.deepEqual(entryOf(text), {
      index: 0,
      blockHash: blockHash(text),
      timeMs: 1_774_700_000_000,
      kind: 1,
      text: 'hello ✓',
      size: 9,
    });
    assert.deepEqual([entryOf(other).text, entryOf(other).size], [null, 3]);
    assert.equal(entryOf(badUtf8).text, null);
  });

  it('appends verified blocks after the head and keeps the first problem in words', () => {
    const blocks = chainOf([
      [1, utf8('a')],
      [1, utf8('b')],
      [1, utf8('c')],
    ]);
    let log = emptyLog('carol', false);
    assert.equal(log.loading, true);
    log = withBlocks(log, blocks.slice(0, 2), null);
    assert.deepEqual(
      [log.entries.map((e) => e.text), log.head?.index, log.problem, log.loading, log.version],
      [['a', 'b'], 1, null, false, 1],
    );
    log = withBlocks(log, [], { index: 2, reason: 'BAD_SIGNATURE' });
    assert.equal(log.head?.index, 1);
    assert.deepEqual(log.problem, {
      index: 2,
      text: 'Block 2 failed verification: it is not signed by carol’s key. It and the blocks after it are not shown.',
    });
  });

  it('names each reason and what the verified mark checked', () => {
    assert.equal(
      problemSentence('carol', { index: 4, reason: 'PREV_HASH' }),
      'Block 4 failed verification: it does not link to the block before it (prevHash is not that block’s hash). It and the blocks after it are not shown.',
    );
    assert.match(
      problemSentence('carol', { index: 7, reason: 'SHORT' }),
      /^Block 7 failed verification: it is missing/,
    );
    const [first, second] = chainOf([
      [1, utf8('a')],
      [1, utf8('b')],
    ]).map(entryOf) as [ReturnType<typeof entryOf>, ReturnType<typeof entryOf>];
    assert.match(
      verifiedTitle('carol', first),
      /signed with carol’s key; the first block of the log; hash [0-9a-f]{16}…$/,
    );
    assert.match(verifiedTitle('carol', second), /; follows block 0;/);
  });
});
