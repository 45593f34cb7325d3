/**
 * Tests (a) and (g) of the web client (SPEC §12): alice on alpha and bob on beta register, chat across
 * the two servers, and alice's ticks go accepted → delivered → read; beta restarts in between, so bob's
 * page shows its offline state and reconnects by itself.
 */
import assert from 'node:assert/strict';
import type { Browser, BrowserContextOptions } from 'playwright-core';
import {
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

/** (a) and (g): register, chat across servers, ticks accepted → delivered → read, reconnect with replay. */
export async function conversationAcrossServers(
  browser: Browser,
  name: string,
  contextOptions: BrowserContextOptions,
): Promise<void> {
  // A retry one second after acceptance makes `accepted` last until beta is back, so every tick is seen.
  const { net, urlA, urlB } = await twoServers({
    retryScheduleMs: '0,1000,2000,600000',
    workerTickMs: 50,
  });
  const shot = screenshotter(name);
  const ctxA = await browser.newContext(contextOptions);
  const ctxB = await browser.newContext(contextOptions);
  try {
    const alice = await openClient(ctxA, urlA);
    const bob = await openClient(ctxB, urlB);
    await shot(alice.page, 'alice-welcome');
    await createIdentity(alice.page, 'alice');
    await createIdentity(bob.page, 'bob');
    await shot(alice.page, 'alice-home');

    await startChat(alice.page, 'bob');
    await send(alice.page, 'Hello bob, this is alice');
    // Both servers up: the first attempt delivers before the answer.
    await waitForTick(alice.page, 'Hello bob', 'delivered');
    await bob.page
      .getByRole('list', { name: 'Conversations', exact: true })
      .getByRole('listitem', { name: 'alice', exact: true })
      .waitFor();
    await shot(bob.page, 'bob-sees-conversation');

    // beta goes away: bob's page says so, and alice's next message stays `accepted`.
    await net.stop(1);
    await bob.page.getByText('Offline — reconnecting').waitFor();
    await shot(bob.page, 'bob-offline');
    await send(alice.page, 'Are you there?');
    await waitForTick(alice.page, 'Are you there?', 'accepted');
    assert.equal(await messageWith(alice.page, 'Are you there?').getByText('Sent', { exact: true }).count(), 1);
    await shot(alice.page, 'alice-accepted');

    // beta is back: alpha's retry delivers (a live DmDeliveryStateChanged), bob reconnects by himself.
    await net.start(1);
    await waitForTick(alice.page, 'Are you there?', 'delivered');
    await shot(alice.page, 'alice-delivered');
    await bob.page.getByText('Offline — reconnecting').waitFor({ state: 'detached' });

    // bob opens the chat: both messages are there, shown, so both get read receipts.
    await openConversation(bob.page, 'alice');
    await messageWith(bob.page, 'Hello bob').waitFor();
    await messageWith(bob.page, 'Are you there?').waitFor();
    await shot(bob.page, 'bob-chat');
    await waitForTick(alice.page, 'Hello bob', 'read');
    await waitForTick(alice.page, 'Are you there?', 'read');
    assert.equal(await messageWith(alice.page, 'Are you there?').getByText('Read', { exact: true }).count(), 1);
    await shot(alice.page, 'alice-read');

    // bob answers in real time.
    await send(bob.page, 'Yes, here');
    await messageWith(alice.page, 'Yes, here').waitFor();
    await shot(alice.page, 'alice-reply');

    // Reopening the chat shows the same states from GetDirectMessages.
    await alice.page.reload();
    await openConversation(alice.page, 'bob');
    await waitForTick(alice.page, 'Hello bob', 'read');
    await waitForTick(alice.page, 'Are you there?', 'read');

    assert.deepEqual([...alice.problems, ...bob.problems], []);
  } finally {
    await ctxA.close();
    await ctxB.close();
    await net.close();
  }
}
