/** Web client test (b): beta stopped with a compressed retry schedule; the failed tick. */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import {
  aliceAndBob,
  browserSuite,
  messageWith,
  openConversation,
  send,
  startChat,
  waitForTick,
} from '../helpers/browser.js';

browserSuite('web client (b)', (browser) => {
  it('beta stopped, retries compressed: alice sees the red ! and "Message not delivered"', () =>
    aliceAndBob(
      browser(),
      'b-failed',
      { servers: { retryScheduleMs: '0,300,600', workerTickMs: 50 } },
      async ({ net, alice, shot }) => {
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
      },
    ));
});
