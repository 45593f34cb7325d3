/**
 * Browser tests of the web client: Debian's Chromium driven by playwright-core (never a browser
 * downloaded by Playwright), the client built into dist/web when its sources changed, and screenshots
 * of each step under .tmp/screens (git-ignored).
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe } from 'node:test';
import type { Browser, BrowserContext, BrowserContextOptions, Locator, Page } from 'playwright-core';
import { chromium } from 'playwright-core';
import type { ShineClient } from '../../src/client/index.js';
import { createIdentity as createKeys } from '../../src/client/index.js';
import { connectIdentity } from './federated-processes.js';
import type { NetworkServerSpec, TestNetwork } from './network.js';
import { startNetwork } from './network.js';
import { ensureWebBuilt } from './web-build.js';

const CANDIDATES = [process.env.SHINE_CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser'];

/**
 * The Chromium to drive, or the reason there is none. In CI a missing browser is an error (the set-up,
 * scripts/ensure-chromium.sh, should have installed it); elsewhere the browser tests are skipped.
 */
export function findChromium(): { path: string } | { skip: string } {
  const path = CANDIDATES.find((p): p is string => !!p && existsSync(p));
  if (path) return { path };
  const why =
    'no Chromium found (looked at $SHINE_CHROMIUM, /usr/bin/chromium, /usr/bin/chromium-browser); ' +
    'install it with scripts/ensure-chromium.sh (apt-get install chromium)';
  if (process.env.CI === 'true') throw new Error(`browser tests cannot run: ${why}`);
  console.log(`# web client browser tests skipped: ${why}`);
  return { skip: why };
}

const ROOT = process.cwd();

/**
 * A suite of browser tests sharing one Chromium (skipped, or failing in CI, without one); the client is
 * built first when its sources changed. args go to Chromium (e.g. fake media devices).
 */
export function browserSuite(title: string, body: (browser: () => Browser) => void, args: string[] = []): void {
  const found = findChromium();
  describe(title, { skip: 'skip' in found ? found.skip : false }, () => {
    let browser: Browser | undefined;
    before(async () => {
      ensureWebBuilt();
      browser = await chromium.launch({ executablePath: (found as { path: string }).path, headless: true, args });
    });
    after(() => browser?.close());
    body(() => {
      if (!browser) throw new Error('the browser is not running');
      return browser;
    });
  });
}

/** Chromium's fake microphone (and camera), granted without asking: calls between two contexts. */
export const FAKE_MEDIA_ARGS = ['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'];

/**
 * alpha and beta, federated, on loopback; extra goes to both (compressed retry schedules), or is a function
 * giving each server's own settings by its login (chain partners name the other one).
 */
export async function twoServers(
  extra: NetworkServerSpec | ((serverLogin: string) => NetworkServerSpec) = {},
): Promise<{ net: TestNetwork; urlA: string; urlB: string }> {
  const spec = (serverLogin: string) => ({
    serverLogin,
    ...(typeof extra === 'function' ? extra(serverLogin) : extra),
  });
  const net = await startNetwork({ federate: true, servers: [spec('alpha'), spec('beta')] });
  const url = (i: number) => `http://127.0.0.1:${net.servers[i]!.port}/`;
  return { net, urlA: url(0), urlB: url(1) };
}

/** Saves numbered screenshots of one test under .tmp/screens/<name>/. */
export function screenshotter(name: string): (page: Page, step: string) => Promise<void> {
  const dir = join(ROOT, '.tmp', 'screens', name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  let n = 0;
  return async (page, step) => {
    n++;
    await page.screenshot({ path: join(dir, `${String(n).padStart(2, '0')}-${step}.png`) });
  };
}

/**
 * A browser page of the client at url that fails the test on any request to another origin (docs/web-client.md:
 * nothing is fetched from elsewhere) and on uncaught page errors.
 */
export async function openClient(context: BrowserContext, url: string): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage();
  const problems: string[] = [];
  const origin = new URL(url).origin;
  page.on('request', (req) => {
    const u = new URL(req.url());
    const sameOrigin = u.origin === origin || `http://${u.host}` === origin;
    if (!sameOrigin && u.protocol !== 'data:' && u.protocol !== 'blob:') problems.push(`request to ${req.url()}`);
  });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  await page.goto(url);
  return { page, problems };
}

/** The list "Messages" of the open chat. */
export const messagesOf = (page: Page): Locator => page.getByRole('list', { name: 'Messages', exact: true });

/** One message of the open chat by its text. */
export const messageWith = (page: Page, text: string): Locator =>
  messagesOf(page).getByRole('listitem').filter({ hasText: text });

/** Resolves once the own message with text shows the delivery state (the attribute of docs/web-client.md). */
export async function waitForTick(page: Page, text: string, state: string, timeout = 15_000): Promise<void> {
  await messagesOf(page).locator(`li[data-delivery-state="${state}"]`, { hasText: text }).waitFor({ timeout });
}

/** Creates an identity in a fresh browser page (keyboard only: type the login, Enter submits). */
export async function createIdentity(page: Page, login: string): Promise<void> {
  await page.getByRole('textbox', { name: 'Login', exact: true }).fill(login);
  await page.getByRole('textbox', { name: 'Login', exact: true }).press('Enter');
  await shownOrAlert(page, page.getByRole('list', { name: 'Conversations', exact: true }));
}

/**
 * Holds back the frames the page sends to its server from now on (its login after a reload, say) until
 * release(); the server's frames pass. The page stays "Connecting…" meanwhile.
 */
export async function holdFrames(page: Page): Promise<{ release: () => void }> {
  let held: (() => void)[] | null = [];
  await page.routeWebSocket(/\/ws$/, (ws) => {
    const server = ws.connectToServer();
    ws.onMessage((frame) => (held ? held.push(() => server.send(frame)) : server.send(frame)));
  });
  return {
    release: () => {
      const queued = held ?? [];
      held = null;
      for (const send of queued) send();
    },
  };
}

/** Starts a chat with login from the home screen. */
export async function startChat(page: Page, login: string): Promise<void> {
  await page.getByRole('textbox', { name: 'New chat with', exact: true }).fill(login);
  await page.getByRole('button', { name: 'Start chat', exact: true }).click();
  await shownOrAlert(page, page.getByRole('heading', { name: login, exact: true }));
}

/** Waits for target; an alert (the client's error notice) instead fails at once with its text. */
async function shownOrAlert(page: Page, target: Locator): Promise<void> {
  const alert = page.getByRole('alert');
  await target.or(alert).first().waitFor();
  if (await alert.isVisible()) throw new Error(`the client says: ${await alert.innerText()}`);
}

/** Types and sends a message in the open chat. */
export async function send(page: Page, text: string): Promise<void> {
  await page.getByRole('textbox', { name: 'Message', exact: true }).fill(text);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await messageWith(page, text).waitFor();
}

/** Opens the conversation with peer from the list "Conversations". */
export async function openConversation(page: Page, peer: string): Promise<void> {
  await page
    .getByRole('list', { name: 'Conversations', exact: true })
    .getByRole('listitem', { name: peer, exact: true })
    .getByRole('button')
    .click();
  await page.getByRole('heading', { name: peer, exact: true }).waitFor();
}

/** What a two-user browser test works with; see aliceAndBob. */
export interface AliceAndBob {
  net: TestNetwork;
  /** alice's page on alpha and bob's on beta, both with an identity already created. */
  alice: Page;
  bob: Page;
  /** Another fresh browser (context) on a server: a second device. */
  freshPage(url: string): Promise<Page>;
  urlA: string;
  shot: (page: Page, step: string) => Promise<void>;
  /** An SDK user in Node (fresh keys), registered and logged in on server 0 (alpha) or 1 (beta). */
  sdkUser(login: string, server: 0 | 1, deviceId: string): Promise<ShineClient>;
}

/**
 * Starts alpha and beta (with `servers` settings), opens alice's page on alpha and bob's on beta,
 * creates both identities (keyboard only), runs the test, and then checks that no page requested
 * anything from another origin or threw; everything is closed whatever happens.
 */
export async function aliceAndBob(
  browser: Browser,
  name: string,
  options: { servers?: Parameters<typeof twoServers>[0]; context?: BrowserContextOptions },
  test: (u: AliceAndBob) => Promise<void>,
): Promise<void> {
  const { net, urlA, urlB } = await twoServers(options.servers);
  const contexts: BrowserContext[] = [];
  const problems: string[][] = [];
  const shot = screenshotter(name);
  const freshPage = async (url: string): Promise<Page> => {
    const context = await browser.newContext({ acceptDownloads: true, ...options.context });
    contexts.push(context);
    const opened = await openClient(context, url);
    problems.push(opened.problems);
    return opened.page;
  };
  try {
    const alice = await freshPage(urlA);
    const bob = await freshPage(urlB);
    await shot(alice, 'alice-welcome');
    await createIdentity(alice, 'alice');
    await createIdentity(bob, 'bob');
    const sdkUser = (login: string, server: 0 | 1, deviceId: string): Promise<ShineClient> =>
      connectIdentity(
        `ws://127.0.0.1:${net.servers[server]!.port}/ws`,
        createKeys(login),
        [net.servers[server]!.config.serverLogin],
        deviceId,
      );
    await test({ net, alice, bob, freshPage, urlA, shot, sdkUser });
    const seen = problems.flat();
    if (seen.length > 0) throw new Error(`the client misbehaved:\n${seen.join('\n')}`);
  } finally {
    for (const c of contexts) await c.close();
    await net.close();
  }
}
