/** Web client test (d): the identity across reloads and, by an encrypted backup file, browsers. */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { it } from 'node:test';
import { aliceAndBob, browserSuite, messageWith, openConversation, send, startChat } from '../helpers/browser.js';

browserSuite('web client (d)', (browser) => {
  it('a reload keeps the identity; a backup imported in a fresh browser is a second device', () =>
    aliceAndBob(browser(), 'd-backup', {}, async ({ alice, bob, freshPage, urlA, shot }) => {
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

      const alice2 = await freshPage(urlA);
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
    }));
});
