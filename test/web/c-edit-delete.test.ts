/**
 * Web client test (c): edit and delete reach the other side; the conversation delete empties both; an action
 * taken while the page is still connecting waits for the connection.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  aliceAndBob,
  browserSuite,
  messageWith,
  messagesOf,
  holdFrames,
  openConversation,
  send,
  startChat,
} from '../helpers/browser.js';

browserSuite('web client (c)', (browser) => {
  it('edit and delete reach the other side; deleting the conversation empties both', () =>
    aliceAndBob(browser(), 'c-edit-delete', {}, async ({ net, alice, bob, shot }) => {
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

      // bob sends while beta is away: the send waits for the connection (hurrying the reconnect), then goes.
      await net.stop(1);
      await bob.getByText('Offline — reconnecting').waitFor();
      const sent = send(bob, 'See you');
      await bob.locator('button:disabled', { hasText: 'Send' }).waitFor();
      await net.start(1);
      await sent;
      await messageWith(alice, 'See you').waitFor();
      assert.equal(await bob.getByRole('alert').count(), 0);
      await bob.getByRole('button', { name: 'Delete conversation', exact: true }).click();
      await bob.getByRole('button', { name: 'Delete for both', exact: true }).click();
      await messagesOf(bob).getByRole('listitem').first().waitFor({ state: 'detached' });
      await messagesOf(alice).getByRole('listitem').first().waitFor({ state: 'detached' });
      await shot(alice, 'alice-after-conversation-delete');
      // Nothing comes back with the history either. The chat is started while the reloaded page is still
      // logging in (its frames to the server held back): the action waits for the connection.
      const held = await holdFrames(alice);
      await alice.reload();
      await alice.getByText('Connecting…').waitFor();
      const started = startChat(alice, 'bob');
      await alice.locator('button:disabled', { hasText: 'Start chat' }).waitFor();
      await shot(alice, 'alice-starts-a-chat-while-connecting');
      held.release();
      await started;
      await alice.getByText('No messages yet').waitFor();
      assert.equal(await messagesOf(alice).getByRole('listitem').count(), 0);
    }));
});
