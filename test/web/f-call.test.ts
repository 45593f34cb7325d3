/**
 * Test (f) of the web client (docs/web-client.md, docs/protocol.md §5.6): an audio call between alice on alpha and bob on beta
 * over WebRTC, Chromium's fake microphone on both sides, the servers relaying only the signalling.
 * Both reach `connected`, bob hangs up and both show `ended`; a second call bob rejects ends for alice.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { Page } from 'playwright-core';
import { FAKE_MEDIA_ARGS, aliceAndBob, browserSuite, openConversation, send, startChat } from '../helpers/browser.js';

/** Resolves once page's call state element says phase. */
const callState = (page: Page, phase: string) =>
  page.locator(`[data-call-state="${phase}"]`).waitFor({ timeout: 20_000 });

browserSuite(
  'web client (f)',
  (browser) => {
    it('rings, connects an audio call across servers, hangs up on both sides; a rejected call ends', () =>
      aliceAndBob(browser(), 'f-call', { context: { permissions: ['microphone'] } }, async ({ alice, bob, shot }) => {
        await startChat(alice, 'bob');
        await send(alice, 'Can I call you?');
        await openConversation(bob, 'alice');

        await alice.getByRole('button', { name: 'Call', exact: true }).click();
        await callState(alice, 'ringing');
        const ringing = bob.getByRole('dialog', { name: 'Incoming call', exact: true });
        await ringing.waitFor();
        await ringing.getByText('alice is calling').waitFor();
        await shot(alice, 'alice-calling');
        await shot(bob, 'bob-ringing');
        await ringing.getByRole('button', { name: 'Answer', exact: true }).click();
        await ringing.waitFor({ state: 'detached' });

        await callState(alice, 'connected');
        await callState(bob, 'connected');
        await shot(alice, 'alice-connected');
        await shot(bob, 'bob-connected');
        // Audio really flows: bob's page receives alice's fake microphone as an RTP stream.
        await bob.waitForFunction(() => {
          const audio = document.querySelector('audio');
          const stream = audio?.srcObject;
          return stream instanceof MediaStream && stream.getAudioTracks().some((t) => t.readyState === 'live');
        });

        await bob.getByRole('button', { name: 'Hang up', exact: true }).click();
        await callState(bob, 'ended');
        await callState(alice, 'ended');
        await shot(alice, 'alice-ended');
        assert.equal(await alice.getByRole('button', { name: 'Hang up', exact: true }).count(), 0);

        // A second call, declined: alice's side ends with the reason, bob's dialog goes away.
        await alice.getByRole('button', { name: 'Close', exact: true }).click();
        await alice.getByRole('button', { name: 'Call', exact: true }).click();
        await ringing.getByRole('button', { name: 'Reject', exact: true }).click();
        await callState(alice, 'ended');
        await alice.getByText('Call declined').waitFor();
        await ringing.waitFor({ state: 'detached' });
        await shot(alice, 'alice-declined');
      }));
  },
  FAKE_MEDIA_ARGS,
);
