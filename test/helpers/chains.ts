/** Helpers for user chain tests (docs/protocol.md §14): signed blocks of a test user, reading a server's chain. */
import assert from 'node:assert/strict';
import type { BuiltBlock } from '../../src/client/chain.js';
import { blockInput } from '../../src/server/chains/service.js';
import type { NetworkServerSpec } from './network.js';
import { buildNextBlock, walkChain } from '../../src/client/chain.js';
import type { Block } from '../../src/protocol/block.js';
import { fromBase64, utf8 } from '../../src/protocol/bytes.js';
import type { OpResults } from '../../src/protocol/ops.js';
import type { RunningServer } from '../../src/server/app.js';
import type { ChainDebug } from '../../src/server/chains/service.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { ADMIN_TOKEN, fastServer } from './federation.js';
import type { RawClient } from './raw-client.js';
import { connectRaw } from './raw-client.js';
import type { TestUser } from './users.js';

export const T_CHAIN = 1_774_700_000_000;

/** `count` signed blocks of user after `after` (null: from genesis); `tag` makes another chain at the same heights. */
export function makeBlocks(user: TestUser, count: number, after: Block | null = null, tag = 'a'): BuiltBlock[] {
  const out: BuiltBlock[] = [];
  let head = after;
  for (let i = 0; i < count; i++) {
    const index = head ? head.index + 1 : 0;
    const built = buildNextBlock({ login: user.login, signSeed: user.seed }, head, {
      kind: 1,
      body: utf8(`${tag} block ${index} of ${user.login}`),
      timeMs: T_CHAIN + index,
    });
    out.push(built);
    head = built.block;
  }
  return out;
}

/** AddBlock of each block in order on a logged-in session; rejects on the first error answer. */
export async function addBlocks(client: RawClient, blocks: readonly BuiltBlock[]): Promise<void> {
  for (const b of blocks) await client.call('AddBlock', { blockB64: b.blockB64 });
}

/** The whole chain of login on a server, page by page with GetChain (no session). */
export async function readChain(
  wsUrl: string,
  login: string,
): Promise<{ headIndex: number; headHash: string | null; items: OpResults['GetChain']['items'] }> {
  await using c = await connectRaw(wsUrl);
  const items: OpResults['GetChain']['items'] = [];
  let first: OpResults['GetChain'] | null = null;
  for (let from = 0; ;) {
    const page = await c.call<OpResults['GetChain']>('GetChain', { login, fromIndex: from, limit: 500 });
    first ??= page;
    items.push(...page.items);
    if (!page.hasMore) break;
    from = page.items.at(-1)!.index + 1;
  }
  return { headIndex: first!.headIndex, headHash: first!.headHash, items };
}

/**
 * Every block of a chain read back verifies against the user's key and links to the one before: the SDK's walkChain
 * with the native (libsodium) Ed25519 verifier, which checks a thousand blocks in a fraction of the pure-JS time.
 */
export function verifies(user: TestUser, items: OpResults['GetChain']['items']): boolean {
  const key = fromBase64(user.signKeyB64)!;
  return (
    walkChain(
      items.map((i) => i.blockB64),
      key,
      { login: user.login, verifier: sodiumVerifier },
    ).problem === null
  );
}

/** The head a server's store holds for login (index -1 when none). */
export async function headOf(server: RunningServer, login: string): Promise<{ index: number; hash: string | null }> {
  const h = await server.ctx.store.chains.head(login);
  return { index: h?.index ?? -1, hash: h?.hash ?? null };
}

/** GET /debug/chains?login= with the admin token. */
export async function debugChains(httpUrl: string, login: string): Promise<ChainDebug> {
  const res = await fetch(`${httpUrl}/debug/chains?login=${encodeURIComponent(login)}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  if (!res.ok) throw new Error(`/debug/chains answered ${res.status}`);
  return (await res.json()) as ChainDebug;
}

/**
 * Retries spread over a minute, with a longer call timeout, rather than FAST's 1.6 s: on a loaded machine a push
 * must not give up mid-way where a test waits for it.
 */
export const PATIENT: NetworkServerSpec = { retryScheduleMs: '0,1000,5000,20000,60000', s2sTimeoutMs: 10_000 };

/** Servers that are each the chain partner of all the others. */
export const partners = (
  logins: string[],
  extra: (login: string) => NetworkServerSpec = () => ({}),
): NetworkServerSpec[] =>
  logins.map((login) =>
    fastServer(login, { chainPartners: logins.filter((l) => l !== login).join(','), ...extra(login) }),
  );

export async function putBehindTheBack(server: RunningServer, blocks: readonly BuiltBlock[]): Promise<void> {
  for (const b of blocks) assert.equal((await server.ctx.store.chains.append(blockInput(b.block))).link, 'stored');
}

export const sameHead = async (a: RunningServer, b: RunningServer, login: string) =>
  JSON.stringify(await headOf(a, login)) === JSON.stringify(await headOf(b, login));
