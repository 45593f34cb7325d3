/**
 * The signed-in client: one SDK connection kept alive (reconnect with back-off, replay of missed events
 * by the server on login), the conversations list, the open chat, and the actions the screens call.
 */
import type {
  ChainEventPayload,
  DeliveryStateChangedEvent,
  DirectMessageEvent,
  HistoryPage,
  SentPair,
  UserProfile,
} from '../../src/client/index.js';
import {
  ShineClient,
  ShineClientError,
  TEXT_POST_KIND,
  createIdentity,
  fetchServerDescriptor,
  makeProfile,
  unverified,
} from '../../src/client/index.js';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import { isValidLogin } from '../../src/protocol/login.js';
import type { CallState } from './calls.js';
import { CallController, decodeValue, encodeValue } from './calls.js';
import type { ChatMessage } from './chat.js';
import { ChatLog, deliveryEvidence, fromHistory, parseBaseKey, signedRead } from './chat.js';
import type { OpenLog } from './public-log.js';
import { emptyLog, withBlocks } from './public-log.js';
import { currentSubscription, subscribePush, subscriptionFields } from './notifications.js';
import type { Account } from './vault.js';
import { newDeviceId } from './vault.js';

export type ConnectionStatus = 'connecting' | 'online' | 'offline';

export interface Conversation {
  peerLogin: string;
  lastTimeMs: number;
  unreadCount: number;
}

export interface OpenChat {
  peer: string;
  log: ChatLog;
  hasMore: boolean;
  next: HistoryPage['next'];
  loadingOlder: boolean;
  /** Grows with every change of log, so views keyed on it re-render. */
  version: number;
}

export interface MessengerState {
  status: ConnectionStatus;
  conversations: Conversation[];
  chat: OpenChat | null;
  /** The Public log open in the right pane (instead of a chat). */
  log: OpenLog | null;
  /** The last failure a person should see; cleared by the next success. */
  notice: string | null;
  /** The current (or just ended) call. */
  call: CallState | null;
  /** Whether this browser has a push subscription the server knows (WebPush opt-in). */
  notifications: boolean;
}

/** Messages per history page (the first one and each one loaded while scrolling up). */
export const PAGE_SIZE = 30;

/** Waits between reconnect attempts: quick at first (a server restart), then every 10 s at most. */
const RECONNECT_DELAYS_MS = [250, 1_000, 2_000, 5_000, 10_000];
export const reconnectDelay = (failures: number): number =>
  RECONNECT_DELAYS_MS[Math.min(failures, RECONNECT_DELAYS_MS.length) - 1] ?? 0;

/** How long an action taken while (re)connecting waits for the connection before it reports being offline. */
export const CONNECT_WAIT_MS = 10_000;

/** The WebSocket endpoint of the server that served this page. */
export function serverWsUrl(loc: Pick<Location, 'protocol' | 'host'> = location): string {
  return `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}/ws`;
}

/** What a failed request means for a person. */
export function describeError(err: unknown): string {
  if (err instanceof ShineClientError) {
    switch (err.code) {
      case 'CLOSED':
      case 'TIMEOUT':
      case 'NOT_LOGGED_IN':
        return 'You are offline. Try again once reconnected.';
      case 'USER_NOT_FOUND':
        return 'No such user.';
      case 'PROFILE_CONFLICT':
        return 'This login is already taken.';
      case 'RATE_LIMITED':
      case 'OVERLOADED':
        return 'The server is busy. Try again in a moment.';
      default:
        return `The server refused: ${err.message}`;
    }
  }
  return err instanceof Error ? err.message : String(err);
}

/** Creates keys for login and registers them on this page's server; the account is not stored yet. */
export async function createAccount(login: string, wsUrl: string): Promise<Account> {
  if (!isValidLogin(login)) throw new Error('A login is 3–32 characters: a-z, 0-9, and _ . - after the first.');
  const identity = createIdentity(login);
  const descriptor = await fetchServerDescriptor(wsUrl);
  const profile = makeProfile(identity, [descriptor.serverLogin], 1, Date.now());
  await withClient(wsUrl, (c) => c.register(profile));
  return { identity, profile, deviceId: newDeviceId() };
}

async function withClient<T>(wsUrl: string, fn: (c: ShineClient) => Promise<T>): Promise<T> {
  const client = await ShineClient.connect(wsUrl);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** Logs in; a server that lost the user (or a backup brought to a fresh one) gets the profile again. */
async function logIn(client: ShineClient, account: Account): Promise<void> {
  try {
    await client.login(account.identity, account.deviceId);
  } catch (err) {
    if (!(err instanceof ShineClientError && err.code === 'AUTH_FAILED')) throw err;
    await registerQuietly(client, account.profile);
    await client.login(account.identity, account.deviceId);
  }
}

async function registerQuietly(client: ShineClient, profile: UserProfile): Promise<void> {
  try {
    await client.register(profile);
  } catch (err) {
    // A newer profile of the same key is already there: that one counts.
    if (!(err instanceof ShineClientError && err.code === 'PROFILE_CONFLICT')) throw err;
  }
}

export class Messenger {
  state: MessengerState = {
    status: 'connecting',
    conversations: [],
    chat: null,
    log: null,
    notice: null,
    call: null,
    notifications: false,
  };
  readonly calls: CallController;
  readonly login: string;
  private client: ShineClient | null = null;
  private readonly listeners = new Set<() => void>();
  private stopped = false;
  private wake: (() => void) | null = null;
  /** Actions waiting for the connection: called once the client is online again, or on stop(). */
  private readonly waitingForClient = new Set<() => void>();
  private readonly receiptsSent = new Set<string>();
  private acks: string[] = [];
  private refreshTimer: ReturnType<typeof setTimeout> | null = null;
  /** Changes of the open log, one at a time (a page, an event, a post may arrive together). */
  private logQueue: Promise<void> = Promise.resolve();

  constructor(
    readonly account: Account,
    private readonly wsUrl: string,
  ) {
    this.login = account.identity.login;
    this.calls = new CallController(
      this.login,
      () => {
        const client = this.need();
        return {
          invite: (peer, callId, payloadB64) => client.callInvite(peer, callId, payloadB64),
          signal: (peer, callId, kind, payloadB64) => client.callSignal(peer, callId, kind, payloadB64),
          seal: (peer, callId, value) => client.sealCallPayload(peer, callId, encodeValue(value)),
          open: (fromLogin, callId, payloadB64) => decodeValue(client.openCallPayload(fromLogin, callId, payloadB64)),
        };
      },
      () => this.set({ call: this.calls.state }),
    );
  }

  subscribe(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => void this.listeners.delete(fn);
  }

  /** Connects and keeps connecting until stop(). */
  start(): void {
    addEventListener('online', this.onBrowserOnline);
    void this.connectLoop();
  }

  stop(): void {
    this.stopped = true;
    removeEventListener('online', this.onBrowserOnline);
    void this.calls.hangUp().catch(() => undefined);
    this.wake?.();
    for (const done of this.waitingForClient) done();
    void this.client?.close();
  }

  private readonly onBrowserOnline = () => this.wake?.();

  private set(changes: Partial<MessengerState>): void {
    this.state = { ...this.state, ...changes };
    for (const fn of this.listeners) fn();
  }

  private chatChanged(): void {
    const chat = this.state.chat;
    if (chat) this.set({ chat: { ...chat, version: chat.version + 1 } });
  }

  private async connectLoop(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      let client: ShineClient | null = null;
      try {
        client = await ShineClient.connect(this.wsUrl);
        // Listeners first: the server replays missed events right after the AuthLogin answer.
        client.on('DirectMessage', (ev) => void this.onDirectMessage(ev));
        client.on('DmDeliveryStateChanged', (ev) => this.onDeliveryState(ev));
        client.on('CallInvite', (ev) => this.calls.onInvite(ev));
        client.on('CallSignal', (ev) => this.calls.onSignal(ev));
        client.on('ChainEvent', (ev) => this.onChainEvent(ev));
        await logIn(client, this.account);
        this.client = client;
        failures = 0;
        this.set({ status: 'online', notice: null });
        for (const done of this.waitingForClient) done();
        void this.catchUp();
        await client.closed;
      } catch (err) {
        failures++;
        if (client) await client.close();
        if (!(err instanceof ShineClientError && err.code === 'CLOSED')) this.set({ notice: describeError(err) });
      }
      this.client = null;
      if (this.stopped) return;
      this.set({ status: 'offline' });
      // An action waiting for the connection (connected()) keeps the attempts at the quickest pace.
      await this.sleep(reconnectDelay(this.waitingForClient.size > 0 ? 1 : Math.max(failures, 1)));
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  /** After every (re)connect: states may have changed while offline and are not replayed as events. */
  private async catchUp(): Promise<void> {
    void this.renewPush().catch(() => undefined);
    await this.refreshConversations();
    const chat = this.state.chat;
    if (chat) await this.loadPage(chat, undefined);
    if (this.state.log) await this.refreshLog();
  }

  private need(): ShineClient {
    if (!this.client) throw new ShineClientError('CLOSED', 0, 'offline');
    return this.client;
  }

  /**
   * The logged-in client for an action. One taken while the page is still connecting (a reload) or
   * reconnecting waits for it, up to CONNECT_WAIT_MS; a reconnect that was backing off tries at once, and
   * again every 250 ms while the action waits.
   */
  private async connected(): Promise<ShineClient> {
    if (this.client || this.stopped) return this.need();
    this.wake?.();
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waitingForClient.delete(done);
        resolve();
      };
      const timer = setTimeout(done, CONNECT_WAIT_MS);
      this.waitingForClient.add(done);
    });
    return this.need();
  }

  /** Runs an action of the UI; a failure becomes the notice and false. */
  async run(action: () => Promise<unknown>): Promise<boolean> {
    try {
      await action();
      if (this.state.notice) this.set({ notice: null });
      return true;
    } catch (err) {
      this.set({ notice: describeError(err) });
      return false;
    }
  }

  dismissNotice(): void {
    this.set({ notice: null });
  }

  async refreshConversations(): Promise<void> {
    const client = await this.connected();
    const items = await client.conversations(200);
    this.set({
      conversations: items.map(({ peerLogin, lastTimeMs, unreadCount }) => ({ peerLogin, lastTimeMs, unreadCount })),
    });
  }

  /** Coalesces the refreshes a burst of events asks for into one request. */
  private scheduleRefresh(): void {
    if (this.refreshTimer !== null) return;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = null;
      if (this.client) void this.refreshConversations().catch(() => undefined);
    }, 50);
  }

  private async onDirectMessage(ev: DirectMessageEvent): Promise<void> {
    const client = this.client;
    try {
      if (client) await this.apply(client, ev);
    } catch {
      // A copy that does not verify or decrypt is not shown; acknowledging it stops an endless replay.
    }
    this.ack(ev.messageKey);
    this.scheduleRefresh();
  }

  private async apply(client: ShineClient, ev: DirectMessageEvent): Promise<void> {
    const opened = await client.decryptEvent(ev);
    const c = opened.container;
    const peer = c.fromLogin === this.login ? c.toLogin : c.fromLogin;
    const log = this.state.chat?.peer === peer ? this.state.chat.log : null;
    if (!log) return;
    let changed: boolean;
    switch (opened.kind) {
      case 'text': {
        const mine = c.fromLogin === this.login;
        changed = log.upsert({
          ...parseBaseKey(opened.baseKey),
          baseKey: opened.baseKey,
          mine,
          text: opened.text,
          problem: null,
          revisionTimeMs: c.revisionTimeMs,
          deliveryState: mine ? 'accepted' : null,
          readAtMs: null,
          delivery: null,
          read: null,
        });
        break;
      }
      case 'receipt':
        // decryptEvent checked the receipt's signature against the reader's profile key.
        changed = log.markRead(
          opened.targetBaseKey,
          opened.readAtMs,
          opened.verified ? signedRead(opened.signedBy, opened.readAtMs) : null,
        );
        break;
      case 'deleteMessage':
        changed = log.remove(opened.targetBaseKey);
        break;
      case 'deleteConversation':
        changed = log.removeThrough(opened.deleteBeforeMs);
        break;
    }
    if (changed) this.chatChanged();
  }

  private onDeliveryState(ev: DeliveryStateChangedEvent): void {
    const log = this.state.chat?.log;
    if (!log) return;
    if (log.setDeliveryState(ev.baseKey, ev.deliveryState)) this.chatChanged();
    if (ev.deliveryState !== 'delivered' || !this.client) return;
    // The SDK checks the proof against the revision it has seen of that message.
    const revision = log.get(ev.baseKey)?.revisionTimeMs;
    void this.client.checkDeliveryEvent(ev).then((checked) => {
      if (revision !== undefined && log.setDelivery(ev.baseKey, revision, deliveryEvidence(checked)))
        this.chatChanged();
    });
  }

  private ack(messageKey: string): void {
    this.acks.push(messageKey);
    if (this.acks.length > 1) return;
    queueMicrotask(() => {
      const keys = this.acks;
      this.acks = [];
      // Unacknowledged events are replayed at the next login, and applying them twice changes nothing.
      this.client?.ack(keys).catch(() => undefined);
    });
  }

  /** Looks the login up (the server imports users of other servers) and opens the chat. */
  async startChat(login: string): Promise<void> {
    const peer = login.trim().toLowerCase();
    if (!isValidLogin(peer)) throw new Error(`“${login}” is not a login.`);
    if (peer === this.login) throw new Error('That is you. Start a chat with someone else.');
    const client = await this.connected();
    try {
      await client.getProfile(peer, { refresh: true });
    } catch (err) {
      if (err instanceof ShineClientError && err.code === 'USER_NOT_FOUND')
        throw new Error(`No user “${peer}” on this server or the servers it knows.`);
      throw err;
    }
    await this.openChat(peer);
  }

  async openChat(peer: string): Promise<void> {
    const chat: OpenChat = { peer, log: new ChatLog(), hasMore: false, next: null, loadingOlder: false, version: 0 };
    this.set({ chat, log: null });
    await this.loadPage(chat, undefined);
  }

  closeChat(): void {
    this.set({ chat: null });
  }

  /** Loads the page before `before` (undefined: the newest) into chat, if chat is still the open one. */
  private async loadPage(chat: OpenChat, before: HistoryPage['next'] | undefined): Promise<void> {
    const client = await this.connected();
    const page = await client.history(chat.peer, { ...(before ? { before } : {}), limit: PAGE_SIZE });
    const open = this.state.chat;
    if (open?.log !== chat.log) return;
    for (const item of page.items) chat.log.upsert(fromHistory(item, this.login));
    // The newest page after a reconnect must not forget how far back the chat was already loaded.
    const paging = before !== undefined || open.next === null ? { hasMore: page.hasMore, next: page.next } : {};
    this.set({ chat: { ...open, ...paging, loadingOlder: false, version: open.version + 1 } });
  }

  async loadOlder(): Promise<void> {
    const chat = this.state.chat;
    if (!chat || !chat.hasMore || chat.loadingOlder || !chat.next) return;
    this.set({ chat: { ...chat, loadingOlder: true } });
    try {
      await this.loadPage(chat, chat.next);
    } catch (err) {
      if (this.state.chat?.log === chat.log) this.set({ chat: { ...this.state.chat, loadingOlder: false } });
      throw err;
    }
  }

  /** Puts an answered own text (new or edited) into the open chat. */
  private showSent(peer: string, sent: SentPair, text: string): void {
    const log = this.state.chat?.peer === peer ? this.state.chat.log : null;
    const changed = log?.upsert({
      baseKey: sent.baseKey,
      fromLogin: sent.fromLogin,
      toLogin: sent.toLogin,
      timeMs: sent.timeMs,
      nonce: sent.nonce,
      mine: true,
      text,
      problem: null,
      revisionTimeMs: sent.revisionTimeMs,
      deliveryState: sent.deliveryState,
      readAtMs: null,
      delivery: null,
      read: null,
    });
    if (changed) this.chatChanged();
    this.scheduleRefresh();
    // The answer carries no proof: a pair delivered at once has it in its history item.
    if (log && sent.deliveryState === 'delivered' && this.client)
      void this.client.checkSent(sent).then(
        (verdict) => {
          if (log.setDelivery(sent.baseKey, sent.revisionTimeMs, deliveryEvidence(verdict))) this.chatChanged();
        },
        (err: unknown) => {
          const why = `its history item could not be read (${describeError(err)})`;
          if (log.setDelivery(sent.baseKey, sent.revisionTimeMs, deliveryEvidence(unverified(why)))) this.chatChanged();
        },
      );
  }

  async send(text: string): Promise<void> {
    const peer = this.requireChat().peer;
    const client = await this.connected();
    this.showSent(peer, await client.sendText(peer, text), text);
  }

  async edit(baseKey: string, text: string): Promise<void> {
    const { peer, log } = this.requireChat();
    const m = log.get(baseKey);
    if (!m?.mine) throw new Error('Only your own messages can be edited.');
    const client = await this.connected();
    this.showSent(peer, await client.editText(peer, m, text), text);
  }

  async deleteMessage(baseKey: string): Promise<void> {
    const { log } = this.requireChat();
    const m = log.get(baseKey);
    if (!m) return;
    const client = await this.connected();
    await client.deleteMessage(m);
    if (log.remove(baseKey)) this.chatChanged();
    this.scheduleRefresh();
  }

  /** Deletes the whole dialog for both sides: everything up to now (or a peer's clock ahead of ours). */
  async deleteConversation(): Promise<void> {
    const { peer, log } = this.requireChat();
    const newest = log.list().at(-1)?.timeMs ?? 0;
    const beforeMs = Math.max(Date.now(), newest);
    const client = await this.connected();
    await client.deleteConversation(peer, beforeMs);
    if (log.removeThrough(beforeMs)) this.chatChanged();
    await this.refreshConversations();
  }

  /** The message is on screen in the open chat: a peer's unread message gets its read receipt, once. */
  markShown(baseKey: string): void {
    const chat = this.state.chat;
    const m = chat?.log.get(baseKey);
    if (!chat || !m || m.mine || m.readAtMs !== null || this.receiptsSent.has(baseKey) || !this.client) return;
    this.receiptsSent.add(baseKey);
    const readAtMs = Date.now();
    this.client.markRead(m, readAtMs).then(
      () => {
        if (chat.log.markRead(baseKey, readAtMs)) this.chatChanged();
        this.scheduleRefresh();
      },
      () => this.receiptsSent.delete(baseKey),
    );
  }

  /** Opens login's Public log (the own one without a login) and reads it, every block verified. */
  async openLog(login: string = this.login): Promise<void> {
    const log = emptyLog(login, login === this.login);
    this.set({ log, chat: null });
    await this.changeLog(login, (client, open) => readLog(client, open, true));
  }

  closeLog(): void {
    this.set({ log: null });
  }

  /** Reads the blocks after the verified head; a log whose check had failed is read again from the start. */
  async refreshLog(): Promise<void> {
    const login = this.state.log?.login;
    if (!login) return;
    await this.changeLog(login, (client, open) => readLog(client, open, open.problem !== null));
  }

  /** Posts text (kind 1) to the own log; the block is checked like any other before it is shown. */
  async postToLog(text: string): Promise<void> {
    const client = await this.connected();
    const added = await client.addBlock(TEXT_POST_KIND, utf8(text));
    if (this.state.log?.mine) this.followLog({ ...added, blockB64: toBase64(added.block.bytes) });
  }

  /** Another device of this user added a block (the server sends ChainEvent to the owner's other sessions). */
  private onChainEvent(ev: ChainEventPayload): void {
    if (this.state.log?.login === ev.login) this.followLog(ev);
  }

  /** A new block of the open log: checked against the head when it is the next one, else the log catches up. */
  private followLog(item: { login: string; index: number; blockHash: string; blockB64: string }): void {
    void this.changeLog(item.login, async (client, open) => {
      const next = (open.head?.index ?? -1) + 1;
      if (open.problem || item.index < next) return open;
      if (item.index > next) return readLog(client, open, false);
      const checked = await client.checkChainItems(open.login, [item], open.head);
      return withBlocks(open, checked.blocks, checked.problem);
    }).catch((err: unknown) => this.set({ notice: describeError(err) }));
  }

  /** Runs one change of login's open log after the ones before it; dropped when another log opened meanwhile. */
  private changeLog(login: string, change: (client: ShineClient, open: OpenLog) => Promise<OpenLog>): Promise<void> {
    const run = async () => {
      const open = this.state.log;
      if (open?.login !== login) return;
      let changed: OpenLog;
      try {
        changed = await change(await this.connected(), open);
      } catch (err) {
        if (this.state.log === open) this.set({ log: { ...open, loading: false } });
        throw err;
      }
      if (this.state.log === open) this.set({ log: changed });
    };
    const done = this.logQueue.then(run);
    this.logQueue = done.catch(() => undefined);
    return done;
  }

  /** WebPush opt-in: subscribe under the server's key and hand the subscription to the server. */
  async enableNotifications(): Promise<void> {
    const client = await this.connected();
    const sub = await subscribePush(await client.webPushKey());
    await client.upsertPushToken(subscriptionFields(sub));
    this.set({ notifications: true });
  }

  async disableNotifications(): Promise<void> {
    const sub = await currentSubscription();
    if (sub) {
      const client = await this.connected();
      await client.deletePushToken(sub.endpoint);
      await sub.unsubscribe();
    }
    this.set({ notifications: false });
  }

  /**
   * After every login: a subscription this browser still has is upserted again, since the server drops
   * one its push service called gone, and the browser may have renewed it meanwhile.
   */
  private async renewPush(): Promise<void> {
    const sub = await currentSubscription();
    if (sub) await this.need().upsertPushToken(subscriptionFields(sub));
    this.set({ notifications: sub !== null });
  }

  /** Calls the peer of the open chat. */
  async startCall(): Promise<void> {
    await this.calls.start(this.requireChat().peer);
  }

  private requireChat(): OpenChat {
    const chat = this.state.chat;
    if (!chat) throw new Error('No chat is open.');
    return chat;
  }
}

export type { ChatMessage };

/** The open log with the blocks after its verified head read in (from the start when fromStart), each verified. */
async function readLog(client: ShineClient, open: OpenLog, fromStart: boolean): Promise<OpenLog> {
  const base = fromStart ? { ...open, entries: [], head: null } : open;
  const chain = await client.getChain(open.login, base.head ? { after: base.head } : {});
  return withBlocks(base, chain.blocks, chain.problem);
}
