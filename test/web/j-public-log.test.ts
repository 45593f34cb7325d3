/**
 * Web client test (j): the Public log (docs/web-client.md). alice posts to her own log; her second device (a backup
 * imported in a fresh browser, phone size) sees each post appear live (ChainEvent); she opens carol's log (carol
 * posts from Node with the SDK), every block marked verified; a block damaged in the server's database makes the log
 * say which block failed and why, and hides it and the ones after it. alpha and beta are chain partners: bob, on beta,
 * reads alice's log from beta's mirror and verifies it in his browser.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { it } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import WebSocket from 'ws';
import { ShineClient } from '../../src/client/index.js';
import { utf8 } from '../../src/protocol/bytes.js';
import { aliceAndBob, browserSuite, startChat } from '../helpers/browser.js';
import { waitUntil } from '../helpers/wait.js';
import { damageChainBlock } from '../helpers/chain-damage.js';

const blocksOf = (page: Page): Locator => page.getByRole('list', { name: 'Blocks', exact: true });
const blockWith = (page: Page, text: string): Locator => blocksOf(page).getByRole('listitem').filter({ hasText: text });

/** Posts text from the own log's composer (keyboard: Enter posts). */
async function post(page: Page, text: string): Promise<void> {
  const box = page.getByRole('textbox', { name: 'Post to your public log', exact: true });
  await box.fill(text);
  await box.press('Enter');
  await blockWith(page, text).waitFor();
}

/** The texts of the blocks shown, top (newest) first. */
const shownTexts = (page: Page): Promise<string[]> => blocksOf(page).locator('li .text').allInnerTexts();

/** alpha and beta mirror each other's chains (SHINE_CHAIN_PARTNERS). */
const partners = (serverLogin: string) => ({ chainPartners: serverLogin === 'alpha' ? 'beta' : 'alpha' });

browserSuite('web client (j)', (browser) => {
  it('a public log: own posts, live on a second device, a contact’s log verified, a damaged block reported', () =>
    aliceAndBob(
      browser(),
      'j-public-log',
      { servers: partners },
      async ({ net, alice, bob, freshPage, urlA, shot, sdkUser }) => {
        // alice's own log: empty at first, then two posts, each verified.
        await alice.getByRole('button', { name: 'My public log', exact: true }).click();
        await alice.getByRole('region', { name: 'Public log of alice', exact: true }).waitFor();
        await alice.getByRole('status').getByText('Nothing posted yet.', { exact: false }).waitFor();
        await post(alice, 'Hello, world: my first public post');
        await post(alice, 'A second post\nwith two lines');
        assert.deepEqual(await shownTexts(alice), [
          'A second post\nwith two lines',
          'Hello, world: my first public post',
        ]);
        await alice.getByRole('status').getByText('All 2 blocks verified in this browser with alice’s key.').waitFor();
        const first = blockWith(alice, 'my first public post');
        assert.equal(await first.getAttribute('data-verified'), 'true');
        assert.equal(await first.getAttribute('data-index'), '0');
        assert.match(
          (await first.locator('.verified-mark').getAttribute('title')) ?? '',
          /^Verified in this browser: signed with alice’s key; the first block of the log; hash [0-9a-f]{16}…$/,
        );
        await shot(alice, 'alice-own-log');

        // A second device of alice (the backup imported in a fresh browser), phone size: posts appear there live.
        await alice.getByRole('button', { name: 'Back up identity', exact: true }).click();
        await alice.getByLabel('Backup passphrase', { exact: true }).fill('correct horse battery');
        const [download] = await Promise.all([
          alice.waitForEvent('download'),
          alice.getByRole('button', { name: 'Download backup', exact: true }).click(),
        ]);
        const backupPath = await download.path();
        JSON.parse(await readFile(backupPath, 'utf8'));
        const phone = await freshPage(urlA);
        await phone.setViewportSize({ width: 360, height: 740 });
        await phone.getByLabel('Backup file', { exact: true }).setInputFiles(backupPath);
        await phone.getByLabel('Passphrase', { exact: true }).fill('correct horse battery');
        await phone.getByRole('button', { name: 'Import backup', exact: true }).click();
        await phone.getByRole('button', { name: 'My public log', exact: true }).click();
        await blockWith(phone, 'A second post').waitFor();
        await post(alice, 'Third, written on the laptop');
        await blockWith(phone, 'Third, written on the laptop').waitFor();
        assert.equal(await blockWith(phone, 'Third, written on the laptop').getAttribute('data-verified'), 'true');
        await phone.getByRole('status').getByText('All 3 blocks verified', { exact: false }).waitFor();
        await shot(phone, 'phone-own-log-live');
        const box = await blocksOf(phone).boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= 360, `the blocks fit the phone: ${JSON.stringify(box)}`);

        // bob, on beta, reads alice's log as beta mirrors it (chain partners), verified in his browser with her key.
        const onBeta = await ShineClient.connect(`ws://127.0.0.1:${net.servers[1]!.port}/ws`, { WebSocket });
        try {
          const betaHead = async () =>
            (await onBeta.request('GetChain', { login: 'alice', fromIndex: 0, limit: 1 })).headIndex;
          await waitUntil(async () => (await betaHead()) === 2, 15_000, "beta to mirror alice's three blocks");
        } finally {
          await onBeta.close();
        }
        await startChat(bob, 'alice');
        await bob.getByRole('button', { name: 'Public log', exact: true }).click();
        await bob.getByRole('status').getByText('All 3 blocks verified in this browser with alice’s key.').waitFor();
        assert.deepEqual(await shownTexts(bob), [
          'Third, written on the laptop',
          'A second post\nwith two lines',
          'Hello, world: my first public post',
        ]);
        await shot(bob, 'bob-reads-alices-log-on-beta');

        // carol (an SDK user in Node, on alpha) keeps a log; alice opens it from the chat with carol.
        const carol = await sdkUser('carol', 0, 'node-1');
        try {
          await carol.addBlock(1, utf8('carol: genesis'));
          await carol.addBlock(42, new Uint8Array([1, 2, 3]));
          await carol.addBlock(1, utf8('carol: third'));
        } finally {
          await carol.close();
        }
        // On a desktop the list stays beside the log: a new chat replaces the log in the right pane.
        await startChat(alice, 'carol');
        await alice.getByRole('button', { name: 'Public log', exact: true }).click();
        const carolsLog = alice.getByRole('region', { name: 'Public log of carol', exact: true });
        await carolsLog.getByRole('heading', { name: 'carol’s public log', exact: true }).waitFor();
        await alice.getByRole('status').getByText('All 3 blocks verified in this browser with carol’s key.').waitFor();
        assert.deepEqual(await shownTexts(alice), [
          'carol: third',
          'Block of kind 42, 3 bytes (not a text post)',
          'carol: genesis',
        ]);
        assert.equal(await carolsLog.getByRole('textbox').count(), 0, 'no composer in another user’s log');
        assert.equal(await blocksOf(alice).locator('li[data-verified="true"]').count(), 3);
        await shot(alice, 'alice-sees-carols-log');

        // Block 1 of carol's chain is damaged in alpha's database: reopening the log says so and hides blocks 1 and 2.
        await damageChainBlock(net.servers[0]!, 'carol', 1);
        await startChat(alice, 'carol');
        await alice.getByRole('button', { name: 'Public log', exact: true }).click();
        const alert = alice.getByRole('alert');
        await alert.waitFor();
        assert.equal(
          await alert.innerText(),
          '✗ Block 1 failed verification: it is not signed by carol’s key. It and the blocks after it are not shown.',
        );
        assert.deepEqual(await shownTexts(alice), ['carol: genesis']);
        assert.equal(await alice.getByRole('status').count(), 0, 'no "all verified" line beside the alert');
        await shot(alice, 'alice-damaged-block');
        // On a phone the log is the one pane: Back returns to the list.
        await phone.getByRole('button', { name: 'Back', exact: true }).click();
        await startChat(phone, 'carol');
        await phone.getByRole('button', { name: 'Public log', exact: true }).click();
        await phone.getByRole('alert').getByText('Block 1 failed verification', { exact: false }).waitFor();
        await shot(phone, 'phone-damaged-block');
      },
    ));
});
