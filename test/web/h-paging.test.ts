/**
 * Web client: unread counts and history paging. carol (an SDK user in Node) sends alice more messages
 * than one page holds; alice's list shows them unread, the chat shows the newest page, scrolling up
 * loads the older ones, and the messages shown get their receipts and leave the count.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { aliceAndBob, browserSuite, messageWith, messagesOf, openConversation } from '../helpers/browser.js';

const COUNT = 45; // one page is 30

browserSuite('web client (h)', (browser) => {
  it('shows unread counts and loads older history while scrolling up', () =>
    aliceAndBob(browser(), 'h-paging', {}, async ({ alice, shot, sdkUser }) => {
      const carol = await sdkUser('carol', 0, 'node-1');
      try {
        for (let i = 0; i < COUNT; i++) await carol.sendText('alice', `note ${i}`);
      } finally {
        await carol.close();
      }
      const item = alice
        .getByRole('list', { name: 'Conversations', exact: true })
        .getByRole('listitem', { name: 'carol', exact: true });
      await item.getByLabel(`${COUNT} unread`, { exact: true }).waitFor();
      await shot(alice, 'alice-unread');

      await openConversation(alice, 'carol');
      await messageWith(alice, `note ${COUNT - 1}`).waitFor();
      assert.equal(await messagesOf(alice).getByRole('listitem').count(), 30);
      // Scrolling to the top brings the older page in.
      await messagesOf(alice).evaluate((ul) => ul.parentElement!.scrollTo({ top: 0 }));
      await messageWith(alice, 'note 0').waitFor();
      assert.equal(await messagesOf(alice).getByRole('listitem').count(), COUNT);
      await shot(alice, 'alice-scrolled-up');
      // What the chat showed got receipts, so fewer are unread; the ones never in view still are.
      await item.getByLabel(`${COUNT} unread`, { exact: true }).waitFor({ state: 'detached' });
      await item.getByLabel(/^\d+ unread$/).waitFor();
    }));
});
