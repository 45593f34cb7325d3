/** Web client test (b): beta stopped with a compressed retry schedule; the failed tick. */
import assert from 'node:assert/strict';
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
  waitForTick,
} from '../helpers/browser.js';

browserSuite('web client (b)', (browser) => {
  it('(b) beta stopped, retries compressed: alice sees the red ! and "Message not delivered"', async () => {
    const { net, urlA, urlB } = await twoServers({ retryScheduleMs: '0,300,600', workerTickMs: 50 });
    const shot = screenshotter('b-failed');
    const ctxA = await browser().newContext();
    const ctxB = await browser().newContext();
    try {
      const { page: alice } = await openClient(ctxA, urlA);
      const { page: bob } = await openClient(ctxB, urlB);
      await createIdentity(alice, 'alice');
      await createIdentity(bob, 'bob');
      await startChat(alice, 'bob');
      await net.stop(1);
      await send(alice, 'Nobody home');
      await waitForTick(alice, 'Nobody home', 'failed');
      const failed = messageWith(alice, 'Nobody home');
      await failed.getByText('Message not delivered', { exact: true }).waitFor({ state: 'visible' });
      assert.equal(await failed.getByText('!', { exact: true }).isVisible(), true);
      await shot(alice, 'alice-failed');
      // The same after reopening: the state comes from the server, not from this page's memory.
      await alice.reload();
      await openConversation(alice, 'bob');
      await waitForTick(alice, 'Nobody home', 'failed');
    } finally {
      await ctxA.close();
      await ctxB.close();
      await net.close();
    }
  });
});
