/**
 * `shine chain add|show` against a real server: blocks from a file and from stdin, the chain shown and verified
 * (human and --json), an empty chain, an unknown user, a bad kind, a body too large, and a block damaged in the
 * server's database reported with its reason and exit status 3.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CliHome, useAlphaBeta } from '../helpers/cli.js';
import { damageChainBlock } from '../helpers/chain-damage.js';

interface ShownChain {
  login: string;
  signKeyB64: string;
  headIndex: number;
  headHash: string | null;
  verified: boolean;
  problem: { index: number; reason: string; message: string } | null;
  blocks: { index: number; blockHash: string; timeMs: number; kind: number; bodyB64: string; text?: string }[];
}

describe('CLI: shine chain', () => {
  using home = new CliHome();
  const servers = useAlphaBeta(home);
  const add = (args: string[], input?: string) =>
    home.run(
      ['chain', 'add', '--as', 'alice', '--server', servers.alpha(), ...args],
      input === undefined ? {} : { input },
    );
  const show = (login: string, ...args: string[]) =>
    home.run(['chain', 'show', login, '--server', servers.alpha(), ...args]);

  it('adds blocks from a file and from stdin, and shows them verified', async () => {
    const file = join(home.dir, 'post.txt');
    writeFileSync(file, 'first post\n');
    const first = await add(['--kind', '1', '--file', file]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /^added block 0 to alice's chain \(kind 1, 11 bytes\), hash [0-9a-f]{64}$/m);
    const piped = await add(['--kind', '1', '--file', '-', '--json'], 'from stdin');
    assert.equal(piped.code, 0, piped.stderr);
    const answer = JSON.parse(piped.stdout) as { login: string; index: number; blockHash: string; rebased: number };
    assert.deepEqual([answer.login, answer.index, answer.rebased], ['alice', 1, 0]);
    const binary = join(home.dir, 'blob.bin');
    writeFileSync(binary, Buffer.from([0, 1, 2, 255]));
    assert.equal((await add(['--kind', '700', '--file', binary])).code, 0);

    const shown = await show('alice');
    assert.equal(shown.code, 0, shown.stderr);
    const lines = shown.stdout.trim().split('\n');
    assert.match(lines[0]!, /^✓ 0 \d{4}-\d\d-\d\dT[\d:.]+Z kind 1 [0-9a-f]{16}…: "first post\\n"$/);
    assert.match(lines[1]!, /^✓ 1 .* kind 1 .*: "from stdin"$/);
    assert.match(lines[2]!, /^✓ 2 .* kind 700 .*: 4 bytes$/);
    assert.match(
      lines[3]!,
      /^verified: all 3 block\(s\) are signed with alice's key \S+ and each links to the one before; head 2 [0-9a-f]{64}$/,
    );

    const json = await show('alice', '--json');
    assert.equal(json.code, 0, json.stderr);
    const chain = JSON.parse(json.stdout) as ShownChain;
    assert.deepEqual([chain.verified, chain.problem, chain.headIndex], [true, null, 2]);
    assert.equal(chain.blocks[1]!.blockHash, answer.blockHash);
    assert.equal(chain.blocks[1]!.text, 'from stdin');
    assert.equal(chain.blocks[2]!.text, undefined);
    assert.equal(chain.blocks[2]!.bodyB64, 'AAEC/w==');
    assert.equal(chain.headHash, chain.blocks[2]!.blockHash);
  });

  it('an empty chain, an unknown user, a bad kind and a body too large each say so', async () => {
    const empty = await show('bob');
    assert.equal(empty.code, 0, empty.stderr);
    assert.equal(empty.stdout, `bob has no chain on ${servers.alpha()}\n`);
    const unknown = await show('nobody');
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /USER_NOT_FOUND 404: no such user is known to the server/);
    const kind = await add(['--kind', '0', '--file', '-'], 'x');
    assert.equal(kind.code, 2);
    assert.match(kind.stderr, /a kind is a whole number 1\.\.65535/);
    const big = join(home.dir, 'big.bin');
    writeFileSync(big, Buffer.alloc(70_000));
    const tooLarge = await add(['--kind', '1', '--file', big]);
    assert.equal(tooLarge.code, 1);
    assert.match(tooLarge.stderr, /big\.bin holds 70000 bytes; a block body holds at most 65536/);
    const badLogin = await show('Not A Login');
    assert.equal(badLogin.code, 2);
  });

  it('a block damaged in the server database: show names it and exits 3', async () => {
    const restore = await damageChainBlock(servers.net().servers[0]!, 'alice', 1);
    try {
      const broken = await show('alice');
      assert.equal(broken.code, 3, broken.stderr);
      assert.match(broken.stdout, /^✓ 0 /m);
      assert.match(broken.stdout, /^✗ block 1 is not signed by the owner's key$/m);
      assert.doesNotMatch(broken.stdout, /^✓ 2 /m);
      assert.match(broken.stderr, /the chain of alice is broken: block 1 is not signed by the owner's key/);
      const json = await show('alice', '--json');
      assert.equal(json.code, 3);
      const chain = JSON.parse(json.stdout) as ShownChain;
      assert.equal(chain.verified, false);
      assert.deepEqual(chain.problem, {
        index: 1,
        reason: 'BAD_SIGNATURE',
        message: "block 1 is not signed by the owner's key",
      });
      assert.equal(chain.blocks.length, 1);
    } finally {
      await restore();
    }
    assert.equal((await show('alice')).code, 0);
  });
});
