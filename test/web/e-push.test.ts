/**
 * Test (e) of the web client (docs/web-client.md, docs/protocol.md §5.5): WebPush.
 *
 * What can run here and what cannot: headless Chromium has no push service to talk to (it would be
 * Google's, and nothing but loopback is reachable), so PushManager.subscribe fails ("Registration
 * failed"); the client then says so and changes nothing — it never invents a subscription. The chain
 * is therefore checked in the two halves that are real here:
 *  1. the server side — an SDK device of carol subscribes (UpsertPushToken) to a push endpoint in
 *     this test; while carol has no session, alice's browser writes to her and calls her; the endpoint
 *     receives VAPID-signed pushes whose decrypted payloads name alice and nothing else;
 *  2. the browser side — bob's page enables notifications (registers /sw.js, asks for the server's
 *     VAPID key, subscribes), its page is closed with the context kept, and exactly those decrypted
 *     payloads are delivered to its service worker (CDP ServiceWorker.deliverPushMessage, what the
 *     browser does with a push from its push service); the worker shows "New message from alice" /
 *     "Incoming call from alice" with no content.
 * Where Chromium can subscribe after all, the test also checks that the browser's subscription reached
 * the server (GET /debug/push).
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { BrowserContext } from 'playwright-core';
import type { PushSubscriptionHealth } from '../../src/server/push/service.js';
import { FAKE_MEDIA_ARGS, aliceAndBob, browserSuite, send, startChat } from '../helpers/browser.js';
import { decryptPush, makeSubscriptionKeys, startPushEndpoint } from '../helpers/push-endpoint.js';
import { waitUntil } from '../helpers/wait.js';

const ADMIN = 'web-push-admin';

interface Shown {
  title: string;
  body: string;
  tag: string;
}

/** Delivers payload to the service worker of origin in context, as its push service would. */
async function deliverPush(context: BrowserContext, origin: string, payload: string): Promise<void> {
  const page = await context.newPage(); // about:blank: outside the worker's scope, no session
  try {
    const cdp = await context.newCDPSession(page);
    const registrations: { registrationId: string; scopeURL: string; isDeleted: boolean }[] = [];
    cdp.on('ServiceWorker.workerRegistrationUpdated', (e) => registrations.push(...e.registrations));
    await cdp.send('ServiceWorker.enable');
    await waitUntil(
      () => registrations.some((r) => r.scopeURL === `${origin}/` && !r.isDeleted),
      15_000,
      'the service worker registration',
    );
    const reg = registrations.find((r) => r.scopeURL === `${origin}/` && !r.isDeleted)!;
    await cdp.send('ServiceWorker.deliverPushMessage', { origin, registrationId: reg.registrationId, data: payload });
  } finally {
    await page.close();
  }
}

/**
 * A page of origin outside the client (the server answers 404 there, so no app and no session runs)
 * that reads the notifications its service worker registration shows now. Read through the
 * registration rather than through a worker handle: a worker stopped while idle leaves a closed handle,
 * and the one a push wakes is not always listed by the context.
 */
async function notificationProbe(context: BrowserContext, origin: string) {
  const page = await context.newPage();
  await page.goto(`${origin}/notification-probe`);
  return {
    shown: (): Promise<Shown[]> =>
      page.evaluate(async () => {
        const reg = await navigator.serviceWorker.getRegistration();
        return reg ? (await reg.getNotifications()).map((n) => ({ title: n.title, body: n.body, tag: n.tag })) : [];
      }),
    close: () => page.close(),
  };
}

/** Waits until the worker of origin in context shows a notification titled title; returns it. */
async function waitForNotification(context: BrowserContext, origin: string, title: string): Promise<Shown> {
  const probe = await notificationProbe(context, origin);
  try {
    let found: Shown | undefined;
    await waitUntil(
      async () => {
        found = (await probe.shown()).find((n) => n.title === title);
        return found !== undefined;
      },
      15_000,
      `notification "${title}"`,
    );
    return found!;
  } finally {
    await probe.close();
  }
}

browserSuite(
  'web client (e)',
  (browser) => {
    it('pushes name the sender only; the service worker shows them; the opt-in is honest', async () => {
      await using endpoint = await startPushEndpoint();
      const servers = { webPushAllowInsecure: '1', adminToken: ADMIN };
      const context = { permissions: ['notifications', 'microphone'] };
      await aliceAndBob(browser(), 'e-push', { servers, context }, async ({ net, alice, bob, shot, sdkUser }) => {
        const betaHttp = `http://127.0.0.1:${net.servers[1]!.port}`;
        const debugPush = async (owner: string) => {
          const res = await fetch(`${betaHttp}/debug/push?owner=${owner}`, {
            headers: { authorization: `Bearer ${ADMIN}` },
          });
          assert.equal(res.status, 200);
          return ((await res.json()) as { subscriptions: PushSubscriptionHealth[] }).subscriptions;
        };

        // bob opts in: the client registers /sw.js and subscribes under beta's VAPID key.
        await bob.getByRole('button', { name: 'Enable notifications', exact: true }).click();
        const enabled = bob.getByRole('button', { name: 'Disable notifications', exact: true });
        const refused = bob.getByRole('alert').filter({ hasText: "The browser's push service refused" });
        await enabled.or(refused).first().waitFor();
        await shot(bob, 'bob-opt-in');
        if (await enabled.isVisible()) {
          // A browser with a reachable push service: its subscription is stored for bob.
          assert.equal((await debugPush('bob')).length, 1);
        } else {
          console.log(`# push opt-in refused by this Chromium: ${await refused.innerText()}`);
          assert.deepEqual(await debugPush('bob'), [], 'a refused subscription stores nothing');
        }

        // The server side: carol's device subscribes and goes away; alice writes and calls.
        const keys = makeSubscriptionKeys();
        const carol = await sdkUser('carol', 1, 'phone');
        try {
          const vapid = await carol.webPushKey();
          assert.match(vapid, /^[A-Za-z0-9_-]{87}$/);
          const stored = await carol.upsertPushToken({
            endpoint: `${endpoint.origin}/carol-phone`,
            p256dhB64: keys.p256dhB64,
            authB64: keys.authB64,
          });
          assert.deepEqual(stored, { stored: true });
        } finally {
          await carol.close();
        }
        assert.deepEqual(
          (await debugPush('carol')).map((s) => [s.deviceId, s.origin]),
          [['phone', endpoint.origin]],
        );
        await startChat(alice, 'carol');
        await send(alice, 'the secret plan');
        await waitUntil(() => endpoint.to('/carol-phone').length >= 1, 15_000, 'the dm push');
        const dm = decryptPush(endpoint.to('/carol-phone')[0]!.body, keys);
        const dmPayload = JSON.parse(dm) as Record<string, unknown>;
        assert.deepEqual(Object.keys(dmPayload).sort(), ['fromLogin', 'kind', 'messageKey', 'v']);
        assert.equal(dmPayload.kind, 'dm');
        assert.equal(dmPayload.fromLogin, 'alice');
        assert.ok(!dm.includes('secret'), 'the push carries no content');

        await alice.getByRole('button', { name: 'Call', exact: true }).click();
        await waitUntil(() => endpoint.to('/carol-phone').length >= 2, 15_000, 'the call push');
        await alice.getByRole('button', { name: 'Hang up', exact: true }).click();
        await alice.locator('[data-call-state="ended"]').waitFor();
        const call = decryptPush(endpoint.to('/carol-phone')[1]!.body, keys);
        assert.deepEqual(Object.keys(JSON.parse(call) as object).sort(), ['callId', 'fromLogin', 'kind', 'v']);

        // The browser side: bob's page closed, its context (and service worker) kept.
        const bobContext = bob.context();
        const bobOrigin = new URL(bob.url()).origin;
        await bob.close();
        await deliverPush(bobContext, bobOrigin, dm);
        const shownDm = await waitForNotification(bobContext, bobOrigin, 'New message from alice');
        assert.equal(shownDm.body, '', 'who wrote, never what');
        await deliverPush(bobContext, bobOrigin, call);
        await waitForNotification(bobContext, bobOrigin, 'Incoming call from alice');
        const probe = await notificationProbe(bobContext, bobOrigin);
        for (const n of await probe.shown()) assert.ok(!JSON.stringify(n).includes('secret'));
        await probe.close();
      });
    });
  },
  FAKE_MEDIA_ARGS,
);
