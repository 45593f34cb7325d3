/**
 * Fault test (docs/protocol.md §14.3, start-up recovery): beta, a real `shine serve` process, is killed with SIGKILL
 * in the middle of a resync of alice's chain from alpha (her first access server). A relay in front of alpha holds
 * beta's GetChain for the second page, so the kill lands while the resync is half downloaded. Checked: the
 * resync_pending marker is in beta's database after the kill; while the resync ran, GetChain on beta answered its
 * last complete chain; after the restart the marker is resumed, the resync finishes, and beta's chain is alpha's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BuiltBlock } from '../../src/client/chain.js';
import type { ChainDebug } from '../../src/server/chains/service.js';
import { blockInput } from '../../src/server/chains/service.js';
import { makeBlocks, readChain, verifies } from '../helpers/chains.js';
import { adminGet, startFederatedProcesses } from '../helpers/federated-processes.js';
import type { ServerProcess } from '../helpers/server-process.js';
import { freePort } from '../helpers/server-process.js';
import { openTestStore } from '../helpers/test-db.js';
import type { TestUser } from '../helpers/users.js';
import { makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { startWsProxy } from '../helpers/ws-proxy.js';

/**
 * Writes blocks (and profiles, as RegisterUser stores them) into a server's database before it starts, as a store
 * that got them some other way.
 */
async function writeChain(
  dbUrl: string,
  blocks: readonly BuiltBlock[],
  users: readonly TestUser[] = [],
): Promise<void> {
  const store = await openTestStore(dbUrl);
  try {
    await store.migrate();
    for (const u of users) await store.directory.putUser(u.profile, 'local', Date.now());
    for (const { block } of blocks) {
      const r = await store.chains.append(blockInput(block));
      assert.equal(r.link, 'stored');
    }
  } finally {
    await store.close();
  }
}

describe('SIGKILL of a server in the middle of a chain resync', () => {
  it('e) the marker survives, reads answer the last complete chain, and the resync finishes after the restart', async () => {
    const alice = makeUser('alice', ['alpha']);
    const X = makeBlocks(alice, 1100);
    const Y = [...X.slice(0, 5), ...makeBlocks(alice, 5, X[4]!.block, 'beta')];
    const alphaPort = await freePort();
    await using relay = await startWsProxy(`ws://127.0.0.1:${alphaPort}/ws`);
    let held = 0;
    let holding = true;
    relay.filter = (frame) => {
      if (holding && frame?.op === 'GetChain' && frame.payload?.fromIndex === 500) {
        held++;
        return 'hold';
      }
      return 'pass';
    };
    const env = {
      SHINE_RETRY_SCHEDULE_MS: '0,500,1000,1500,2000',
      SHINE_S2S_TIMEOUT_MS: '60000',
      SHINE_SYNC_INTERVAL_MS: '3600000',
    };
    // alpha holds X (1 100 blocks) and alice's profile, beta a chain Y whose block 5 differs; both written before
    // they start. beta starts once alpha answers, so its start-up cycle meets the divergence and starts the resync.
    const [a, b] = (await startFederatedProcesses(
      [
        {
          serverLogin: 'alpha',
          port: alphaPort,
          publicWsUrl: relay.wsUrl,
          env: { SHINE_CHAIN_PARTNERS: 'beta' },
          beforeStart: (dbUrl) => writeChain(dbUrl, X, [alice]),
        },
        {
          serverLogin: 'beta',
          env: { SHINE_CHAIN_PARTNERS: 'alpha' },
          beforeStart: async (dbUrl) => {
            await writeChain(dbUrl, Y);
            await waitUntil(
              () =>
                fetch(`http://127.0.0.1:${alphaPort}/healthz`).then(
                  (r) => r.ok,
                  () => false,
                ),
              60_000,
              'alpha answers',
            );
          },
        },
      ],
      env,
    )) as [ServerProcess, ServerProcess];
    await using _servers = { [Symbol.asyncDispose]: () => Promise.all([a.close(), b.close()]).then(() => undefined) };
    // The second page is held.
    await waitUntil(() => held > 0, 60_000, 'the resync asks for its second page');
    const during = await adminGet<ChainDebug>(b, '/debug/chains?login=alice');
    assert.equal(during.resync?.source, 'alpha');
    const read = await readChain(b.wsUrl, 'alice');
    assert.equal(read.headIndex, 9, 'a read during the resync answers the last complete chain');
    assert.equal(read.headHash, Y[9]!.blockHash);
    assert.ok(verifies(alice, read.items));

    await b.kill('SIGKILL');
    const store = await openTestStore(b.dbUrl);
    const markers = await store.chains.resyncMarkers().finally(() => store.close());
    assert.deepEqual(
      markers.map((m) => [m.login, m.source, m.startedAtMs]),
      [['alice', 'alpha', during.resync!.startedAtMs]],
    );
    holding = false;
    await b.restart();
    await waitUntil(
      async () => (await adminGet<ChainDebug>(b, '/debug/chains?login=alice')).head?.hash === X[1099]!.blockHash,
      60_000,
      'beta holds alpha’s chain',
    );
    const after = await adminGet<ChainDebug>(b, '/debug/chains?login=alice');
    assert.equal(after.resync, null);
    const chain = await readChain(b.wsUrl, 'alice');
    assert.equal(chain.items.length, 1100);
    assert.ok(verifies(alice, chain.items));
    assert.deepEqual(chain, await readChain(a.wsUrl, 'alice'));
  });
});
