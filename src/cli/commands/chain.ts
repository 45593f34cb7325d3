/**
 * `shine chain add|show`: a user's public chain (docs/protocol.md §14) — append a signed block, or read a chain
 * and verify every block with the user's key.
 */
import { readFile } from 'node:fs/promises';
import { buffer as readStream } from 'node:stream/consumers';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { Block, VerifiedChain } from '../../client/index.js';
import { TEXT_POST_KIND, blockHash, describeChainProblem } from '../../client/index.js';
import { MAX_BLOCK_BODY } from '../../protocol/block.js';
import { strictUtf8, toBase64 } from '../../protocol/bytes.js';
import type { ClientFlags } from '../connection.js';
import { DEFAULT_WS_URL, openClient, withClient, wsServerUrl } from '../connection.js';
import { CliError, ProblemsFoundError, checkLogin } from '../errors.js';
import { clientOptions, examples, iso, out } from '../shared.js';

/** A commander parser for a block kind, 1..65 535. */
function blockKind(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 0xffff) throw new InvalidArgumentError('a kind is a whole number 1..65535');
  return n;
}

export function registerChain(program: Command): void {
  const chain = program
    .command('chain')
    .summary("add to your public chain, or show and verify a user's chain")
    .description(
      'Every user may keep one public, append-only chain of blocks signed with their own key (posts, profile ' +
        'history); servers store and mirror it but cannot change it. `add` appends a block to your chain, ' +
        '`show` reads anyone’s chain and verifies every block.',
    );
  clientOptions(chain.command('add'))
    .summary('append a signed block to your chain')
    .description(
      'Reads the body from --file (- for stdin; at most 65 536 bytes, any bytes), signs a block of --kind on ' +
        'the head of your chain and stores it. When another device added a block meanwhile the block is ' +
        `rebased on the new head and sent again. Kind ${TEXT_POST_KIND} is a UTF-8 text post (what the web ` +
        "client's Public log writes and shows); other kinds are yours to define.",
    )
    .requiredOption('--kind <n>', 'the block kind, 1..65535 (opaque to servers)', blockKind)
    .requiredOption('--file <file>', 'the body: this file, or - for stdin')
    .option('--json', 'print the answer as JSON', false)
    .addHelpText(
      'after',
      examples(
        'shine chain add --as alice --kind 1 --file post.txt',
        'echo "hello, world" | shine chain add --as alice --kind 1 --file -',
      ),
    )
    .action(async (flags: ClientFlags & { kind: number; file: string; json: boolean }) => {
      const body = await readBody(flags.file);
      await withClient(flags, async (client, identity) => {
        const added = await client.addBlock(flags.kind, body);
        if (flags.json) {
          const { login, index, blockHash: hash, globalSeq, rebased } = added;
          out(JSON.stringify({ login, index, blockHash: hash, globalSeq, rebased, timeMs: added.block.timeMs }));
          return;
        }
        out(
          `added block ${added.index} to ${identity.login}'s chain (kind ${flags.kind}, ${body.length} bytes), ` +
            `hash ${added.blockHash}` +
            (added.rebased > 0 ? `; rebased ${added.rebased} time(s) on blocks another device added` : ''),
        );
      });
    });
  chain
    .command('show')
    .summary("show a user's chain, every block verified")
    .description(
      "Reads the whole chain of LOGIN from the server (no identity needed) and checks every block with the user's " +
        'signing key from the directory: it decodes, is signed by that key, and links to the block before it ' +
        '(index, prevHash, time); the last one must be the head the server names. Prints one line per block ' +
        `(kind ${TEXT_POST_KIND} bodies as text), then the verdict. Exit status 3 when the chain is broken: the ` +
        'blocks before the problem are printed and the problem is named.',
    )
    .argument('<login>', 'whose chain')
    .option('--server <ws-url>', "the server's WebSocket URL", DEFAULT_WS_URL)
    .option('--json', 'print the chain and the verdict as JSON (bodies in base64)', false)
    .addHelpText(
      'after',
      examples('shine chain show alice', 'shine chain show alice --server wss://beta.example/ws --json'),
    )
    .action(async (loginArg: string, flags: { server: string; json: boolean }) => {
      const login = checkLogin(loginArg);
      wsServerUrl(flags.server);
      const client = await openClient(flags.server);
      let chain: VerifiedChain;
      let signKeyB64: string;
      try {
        signKeyB64 = (await client.getProfile(login)).signKeyB64;
        chain = await client.getChain(login);
      } finally {
        await client.close();
      }
      if (flags.json) out(JSON.stringify(chainJson(chain, signKeyB64)));
      else printChain(chain, signKeyB64, flags.server);
      if (chain.problem)
        throw new ProblemsFoundError(`the chain of ${login} is broken: ${describeChainProblem(chain.problem)}`);
    });
}

async function readBody(file: string): Promise<Uint8Array> {
  const body = file === '-' ? new Uint8Array(await readStream(process.stdin)) : await readFile(file);
  if (body.length > MAX_BLOCK_BODY)
    throw new CliError(
      `${file === '-' ? 'stdin' : file} holds ${body.length} bytes; a block body holds at most ${MAX_BLOCK_BODY}`,
    );
  return body;
}

/** The body as text when it is UTF-8 without control characters (newlines and tabs allowed), else null. */
function bodyText(body: Uint8Array): string | null {
  const text = strictUtf8(body);
  return text === null || /[\u0000-\u0008\u000b-\u001f\u007f]/.test(text) ? null : text;
}

function blockLine(b: Block): string {
  const text = bodyText(b.body);
  const body = text === null ? `${b.body.length} bytes` : JSON.stringify(text);
  return `${b.index} ${iso(b.timeMs)} kind ${b.kind} ${blockHash(b).slice(0, 16)}…: ${body}`;
}

function printChain(chain: VerifiedChain, signKeyB64: string, server: string): void {
  if (chain.headIndex < 0 && chain.blocks.length === 0 && !chain.problem) {
    // A server holds the chains of its users and of its chain partners' users only.
    out(`${chain.login} has no chain on ${server}`);
    return;
  }
  for (const b of chain.blocks) out(`✓ ${blockLine(b)}`);
  if (chain.problem) {
    out(`✗ ${describeChainProblem(chain.problem)}`);
    out(
      `${chain.blocks.length} block(s) verified with ${chain.login}'s key ${signKeyB64} before the problem; ` +
        `the server names head ${chain.headIndex}`,
    );
    return;
  }
  out(
    `verified: all ${chain.blocks.length} block(s) are signed with ${chain.login}'s key ${signKeyB64} and each ` +
      `links to the one before; head ${chain.headIndex} ${chain.headHash}`,
  );
}

function chainJson(chain: VerifiedChain, signKeyB64: string): object {
  return {
    login: chain.login,
    signKeyB64,
    headIndex: chain.headIndex,
    headHash: chain.headHash,
    verified: chain.problem === null,
    problem: chain.problem && { ...chain.problem, message: describeChainProblem(chain.problem) },
    blocks: chain.blocks.map((b) => {
      const text = bodyText(b.body);
      return {
        index: b.index,
        blockHash: blockHash(b),
        timeMs: b.timeMs,
        kind: b.kind,
        bodyB64: toBase64(b.body),
        ...(text === null ? {} : { text }),
      };
    }),
  };
}
