/**
 * Tests (a) and (g) of the web client (docs/web-client.md): alice on alpha and bob on beta register, chat across
 * the two servers, and alice's ticks go accepted → delivered → read; beta restarts in between, so bob's
 * page shows its offline state and reconnects by itself.
 */
import assert from 'node:assert/strict';
import type { Browser, BrowserContextOptions } from 'playwright-core';
import { aliceAndBob, messageWith, openConversation, send, startChat, waitForTick } from '../helpers/browser.js';

/** (a) and (g): register, chat across servers, ticks accepted → delivered → read, reconnect with replay. */
export function conversationAcrossServers(
  browser: Browser,
  name: string,
  context: BrowserContextOptions,
): Promise<void> {
  // A retry one second after acceptance makes `accepted` last until beta is back, so every tick is seen;
  // then one a second, so the message is delivered soon after beta's restart, however long it takes.
  const servers = { retryScheduleMs: '0,1000,2000,3000,4000,5000,6000,8000,10000,600000', workerTickMs: 50 };
  return aliceAndBob(browser, name, { servers, context }, async ({ net, alice, bob, shot }) => {
    await shot(alice, 'alice-home');
    await startChat(alice, 'bob');
    await send(alice, 'Hello bob, this is alice');
    // Both servers up: the first attempt delivers before the answer.
    await waitForTick(alice, 'Hello bob', 'delivered');
    await bob
      .getByRole('list', { name: 'Conversations', exact: true })
      .getByRole('listitem', { name: 'alice', exact: true })
      .waitFor();
    await shot(bob, 'bob-sees-conversation');

    // beta goes away: bob's page says so, and alice's next message stays `accepted`.
    await net.stop(1);
    await bob.getByText('Offline — reconnecting').waitFor();
    await shot(bob, 'bob-offline');
    await send(alice, 'Are you there?');
    await waitForTick(alice, 'Are you there?', 'accepted');
    assert.equal(await messageWith(alice, 'Are you there?').getByText('Sent', { exact: true }).count(), 1);
    await shot(alice, 'alice-accepted');

    // beta is back: alpha's retry delivers (a live DmDeliveryStateChanged), bob reconnects by himself.
    await net.start(1);
    await waitForTick(alice, 'Are you there?', 'delivered');
    await shot(alice, 'alice-delivered');
    await bob.getByText('Offline — reconnecting').waitFor({ state: 'detached' });

    // bob opens the chat: both messages are there, shown, so both get read receipts.
    const tool = bob.getByRole('button', { name: 'Back up identity', exact: true });
    assert.equal(await tool.isVisible(), true, 'the top bar shows its tools beside the list');
    await openConversation(bob, 'alice');
    await messageWith(bob, 'Hello bob').waitFor();
    await messageWith(bob, 'Are you there?').waitFor();
    // On a phone the open chat takes the screen: the top bar's tools wait in the list.
    const phone = (context.viewport?.width ?? 1280) < 760;
    assert.equal(await tool.isVisible(), !phone, phone ? 'no top-bar tools over a chat on a phone' : 'tools stay');
    await shot(bob, 'bob-chat');
    await waitForTick(alice, 'Hello bob', 'read');
    await waitForTick(alice, 'Are you there?', 'read');
    assert.equal(await messageWith(alice, 'Are you there?').getByText('Read', { exact: true }).count(), 1);
    await shot(alice, 'alice-read');

    // bob answers in real time.
    await send(bob, 'Yes, here');
    await messageWith(alice, 'Yes, here').waitFor();
    await shot(alice, 'alice-reply');

    // Reopening the chat shows the same states from GetDirectMessages.
    await alice.reload();
    await openConversation(alice, 'bob');
    await waitForTick(alice, 'Hello bob', 'read');
    await waitForTick(alice, 'Are you there?', 'read');
  });
}
