/** Web client test (c): edit and delete reach the other side; the conversation delete empties both. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  aliceAndBob,
  browserSuite,
  messageWith,
  messagesOf,
  onlineHome,
  openConversation,
  send,
  startChat,
} from '../helpers/browser.js';

browserSuite('web client (c)', (browser) => {
  it('edit and delete reach the other side; deleting the conversation empties both', () =>
    aliceAndBob(browser(), 'c-edit-delete', {}, async ({ alice, bob, shot }) => {
      await startChat(alice, 'bob');
      await send(alice, 'Lunch at noon?');
      await send(alice, 'Wrong chat, ignore');
      await openConversation(bob, 'alice');
      await messageWith(bob, 'Wrong chat, ignore').waitFor();

      await messageWith(alice, 'Lunch at noon?').getByRole('button', { name: 'Edit', exact: true }).click();
      const box = alice.getByRole('textbox', { name: 'Message', exact: true });
      await box.fill('Lunch at one?');
      await box.press('Enter');
      await messageWith(alice, 'Lunch at one?').waitFor();
      await messageWith(bob, 'Lunch at one?').waitFor();
      assert.equal(await messageWith(bob, 'Lunch at noon?').count(), 0);

      await messageWith(alice, 'Wrong chat, ignore').getByRole('button', { name: 'Delete', exact: true }).click();
      await messageWith(bob, 'Wrong chat, ignore').waitFor({ state: 'detached' });
      assert.equal(await messageWith(alice, 'Wrong chat, ignore').count(), 0);
      await shot(bob, 'bob-after-edit-and-delete');

      await send(bob, 'See you');
      await messageWith(alice, 'See you').waitFor();
      await bob.getByRole('button', { name: 'Delete conversation', exact: true }).click();
      await bob.getByRole('button', { name: 'Delete for both', exact: true }).click();
      await messagesOf(bob).getByRole('listitem').first().waitFor({ state: 'detached' });
      await messagesOf(alice).getByRole('listitem').first().waitFor({ state: 'detached' });
      await shot(alice, 'alice-after-conversation-delete');
      // Nothing comes back with the history either.
      await alice.reload();
      await onlineHome(alice);
      await startChat(alice, 'bob');
      await alice.getByText('No messages yet').waitFor();
      assert.equal(await messagesOf(alice).getByRole('listitem').count(), 0);
    }));
});
