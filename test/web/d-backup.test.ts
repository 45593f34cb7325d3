/** Web client test (d): the identity across reloads and, by an encrypted backup file, browsers. */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { it } from 'node:test';
import {
  browserSuite,
  createIdentity,
  messageWith,
  openClient,
  openConversation,
  screenshotter,
  send,
  startChat,
  twoServers,
} from '../helpers/browser.js';

browserSuite('web client (d)', (browser) => {
  it('(d) a reload keeps the identity; a backup imported in a fresh browser is a second device', async () => {
    const { net, urlA, urlB } = await twoServers();
    const shot = screenshotter('d-backup');
    const ctxA = await browser().newContext({ acceptDownloads: true });
    const ctxB = await browser().newContext();
    const ctxA2 = await browser().newContext();
    try {
      const { page: alice } = await openClient(ctxA, urlA);
      const { page: bob } = await openClient(ctxB, urlB);
      await createIdentity(alice, 'alice');
      await createIdentity(bob, 'bob');
      await startChat(alice, 'bob');
      await send(alice, 'Keep this one');

      await alice.reload();
      await openConversation(alice, 'bob');
      await messageWith(alice, 'Keep this one').waitFor();
      assert.equal(await alice.getByRole('textbox', { name: 'Login', exact: true }).count(), 0);

      await alice.getByRole('button', { name: 'Back up identity', exact: true }).click();
      await alice.getByLabel('Backup passphrase', { exact: true }).fill('correct horse battery');
      await shot(alice, 'alice-backup-dialog');
      const [download] = await Promise.all([
        alice.waitForEvent('download'),
        alice.getByRole('button', { name: 'Download backup', exact: true }).click(),
      ]);
      const backupPath = await download.path();
      const backup = JSON.parse(await readFile(backupPath, 'utf8')) as Record<string, unknown>;
      assert.equal(backup.format, 'shine-backup-v1');
      assert.equal(JSON.stringify(backup).includes('signSeed'), false, 'the keys are encrypted');

      const { page: alice2, problems } = await openClient(ctxA2, urlA);
      await alice2.getByLabel('Backup file', { exact: true }).setInputFiles(backupPath);
      await alice2.getByLabel('Passphrase', { exact: true }).fill('wrong passphrase');
      await alice2.getByRole('button', { name: 'Import backup', exact: true }).click();
      await alice2.getByRole('alert').getByText('wrong passphrase').waitFor();
      await alice2.getByLabel('Passphrase', { exact: true }).fill('correct horse battery');
      await alice2.getByRole('button', { name: 'Import backup', exact: true }).click();
      await openConversation(alice2, 'bob');
      await messageWith(alice2, 'Keep this one').waitFor();
      await shot(alice2, 'alice-second-browser');

      // Both browsers are sessions of alice at once (two devices): bob's answer reaches both live.
      await openConversation(bob, 'alice');
      await send(bob, 'Got it, both of you');
      await messageWith(alice, 'Got it, both of you').waitFor();
      await messageWith(alice2, 'Got it, both of you').waitFor();
      assert.deepEqual(problems, []);
    } finally {
      await ctxA.close();
      await ctxA2.close();
      await ctxB.close();
      await net.close();
    }
  });
});
