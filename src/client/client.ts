/** ShineClient: one WebSocket session to an access server (docs/protocol.md §5), with E2E text on top. Node and browser. */
import { fromBase64, toBase64 } from '../protocol/bytes.js';
import type { ChannelErrors } from '../protocol/channel.js';
import { RequestChannel } from '../protocol/channel.js';
import type { Container } from '../protocol/container.js';
import {
  ContainerError,
  baseKeyOf,
  decodeContainer,
  incomingKeyOf,
  messageKeyOf,
  ownerOf,
  parseMessageKey,
  verifyContainer,
} from '../protocol/container.js';
import type { Block } from '../protocol/block.js';
import { blockHash } from '../protocol/block.js';
import type { ErrorCode, ErrorDetails } from '../protocol/errors.js';
import type { ServerDescriptor, UserProfile } from '../protocol/identity.js';
import { authSigningText, signText, verifyDescriptor, verifyProfile } from '../protocol/identity.js';
import type {
  CallDelivery,
  CallInviteEvent,
  CallSignalEvent,
  CallSignalKind,
  ChainEventPayload,
  DeliveryStateChangedEvent,
  DirectMessageEvent,
  HistoryItem,
  OpName,
  OpPayload,
  OpAnswer,
  PairAnswer,
} from '../protocol/ops.js';
import { MAX_CHAIN_PAGE } from '../protocol/ops.js';
import { containerSha256B64 } from '../protocol/receipt.js';
import type { ChainItem, VerifiedChain } from './chain.js';
import { buildNextBlock, checkChainItems, describeChainProblem } from './chain.js';
import { callAad, decryptBody, encryptBody, settingAad } from './e2e.js';
import type { Identity } from './identity.js';
import type { BuiltPair, CopyContent, MessageRef } from './pairs.js';
import { contentOf, deleteConversationPair, deleteMessagePair, editTextPair, receiptPair, textPair } from './pairs.js';
import type { DeliveredCopy, DeliveryVerdict, ProofSources, Verdict } from './proofs.js';
import { checkDeliveryProof, unverified } from './proofs.js';

/** The part of the WebSocket API the client uses; the browser's WebSocket and ws's both fit. */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
  addEventListener(type: 'close', listener: (event: { code: number; reason: string }) => void): void;
  addEventListener(type: 'open' | 'error', listener: () => void): void;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface ShineClientOptions {
  /** In Node pass `WebSocket` from 'ws'; in browsers the global one is used. */
  WebSocket?: WebSocketConstructor;
  /** How long a request waits for its answer (default 15 s: SendMessagePair may wait 3 s for delivery). */
  requestTimeoutMs?: number;
  /** Wall clock for timeMs, edits and settings (default Date.now). */
  now?: () => number;
}

/** Codes the client raises itself, without an answer from the server (status 0). */
export type LocalErrorCode = 'TIMEOUT' | 'CLOSED' | 'NOT_LOGGED_IN' | 'BAD_PROFILE' | 'NOT_OWNER';

/** A failed request (protocol error code and status of the error answer) or a local failure (status 0). */
export class ShineClientError extends Error {
  constructor(
    readonly code: ErrorCode | LocalErrorCode,
    readonly status: number,
    message: string,
    readonly op?: string,
    /** Fields the error object carried besides code and message (CHAIN_CONFLICT: headIndex, headHash). */
    readonly details: ErrorDetails = {},
  ) {
    super(message);
    this.name = 'ShineClientError';
  }
}

/** Typed payloads of the events the SDK knows; any other op arrives as unknown. */
export interface KnownEvents {
  DirectMessage: DirectMessageEvent;
  DmDeliveryStateChanged: DeliveryStateChangedEvent;
  CallInvite: CallInviteEvent;
  CallSignal: CallSignalEvent;
  ChainEvent: ChainEventPayload;
}
export type EventPayload<K extends string> = K extends keyof KnownEvents ? KnownEvents[K] : unknown;

/** A pair the server accepted, with what is needed to edit or delete it later. */
export type SentPair = PairAnswer & MessageRef & { revisionTimeMs: number };

/** A verified (and, for text, decrypted) copy; signedBy is the login whose profile key verified it. */
export type OpenedMessage = {
  container: Container;
  messageKey: string;
  baseKey: string;
  signedBy: string;
} & CopyContent;

/**
 * A copy from a DirectMessage event, with what it proves (decision 37): a read receipt, a peer's message or
 * a delete is verified by its author's signature; the own text copy (type 2) proves no delivery yet.
 */
export type OpenedEvent = OpenedMessage & Verdict;

/**
 * A history item with its text; problem says why a copy could not be opened (text is then null).
 * verified (decision 37): type 2, its delivery proof checked out (proof, hashChecked: decision 36);
 * type 1, the peer's signature. readAtMs is the server's word, never verified here (decision 38).
 */
export type HistoryEntry = Omit<HistoryItem, 'deliveryProof'> & {
  text: string | null;
  problem: string | null;
} & DeliveryVerdict;

/** A DmDeliveryStateChanged event with the SDK's verdict on its proof. */
export type CheckedDeliveryEvent = DeliveryStateChangedEvent & DeliveryVerdict;

/** What this connection remembers of an own text copy, to check proofs of it (decision 36). */
interface KnownCopy {
  revisionTimeMs: number;
  reencryptedAtMs: number;
  incomingSha256B64: string | null;
}

/** Own text copies remembered per connection (the oldest is forgotten first). */
const MAX_KNOWN_COPIES = 2_000;

export interface HistoryPage {
  items: HistoryEntry[];
  hasMore: boolean;
  /** Pass as `before` for the next, older page. */
  next: { timeMs: number; messageKey: string } | null;
}

export interface Setting {
  key: string;
  value: Uint8Array;
  updatedAtMs: number;
}

type Listener = (payload: never) => void;

/** Error answers and local failures as ShineClientError. */
const clientErrors: ChannelErrors = {
  answered: (frame, op) => {
    const { code, message, ...details } = frame.error ?? {};
    return new ShineClientError(
      code ?? 'INTERNAL',
      typeof frame.status === 'number' ? frame.status : 500,
      message ?? 'request failed',
      op,
      details,
    );
  },
  unanswered: (why, op, message) => new ShineClientError(why, 0, message, op),
};

/** Fetches and verifies a server's descriptor from the HTTP side of its WebSocket URL (docs/protocol.md §4). */
export async function fetchServerDescriptor(wsUrl: string, fetchFn: typeof fetch = fetch): Promise<ServerDescriptor> {
  const url = new URL(wsUrl);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = '/.well-known/shine-server';
  url.search = '';
  const res = await fetchFn(url);
  if (!res.ok) throw new ShineClientError('BAD_PROFILE', res.status, `GET ${url.href} answered ${res.status}`);
  const descriptor = (await res.json()) as ServerDescriptor;
  if (!verifyDescriptor(descriptor))
    throw new ShineClientError('BAD_PROFILE', 0, `descriptor of ${url.host} has a bad signature`);
  return descriptor;
}

/** A block AddBlock stored: the server's answer, the block, and how often it was rebased on a moved head. */
export type AddedBlock = OpAnswer<'AddBlock'> & { block: Block; rebased: number };

/** How often addBlock rebases on a head that moved (CHAIN_CONFLICT) before it gives up. */
const MAX_REBASES = 5;

/** One connection to a SHiNE server. Create with ShineClient.connect(). */
export class ShineClient {
  /** Settles when the socket has closed, for whatever reason. */
  readonly closed: Promise<{ code: number; reason: string }>;
  private readonly channel: RequestChannel;
  private readonly listeners = new Map<string, Set<Listener>>();
  /** Profiles by login; promises so concurrent look-ups share one request. */
  private readonly profiles = new Map<string, Promise<UserProfile>>();
  /** Verified server descriptors by serverLogin, shared like profiles. */
  private readonly descriptors = new Map<string, Promise<ServerDescriptor>>();
  /** Own text copies by outgoingKey: the newest revision seen, and its incoming hash when built here. */
  private readonly knownCopies = new Map<string, KnownCopy>();
  private readonly proofSources: ProofSources = {
    accessServersOf: async (login) => (await this.getProfile(login)).accessServers,
    descriptorOf: (serverLogin) => this.getServerDescriptor(serverLogin),
  };
  private readonly now: () => number;
  private isClosed = false;
  private identity: Identity | null = null;
  private lastEditMs = 0;
  private sessionInfo: (OpAnswer<'AuthLogin'> & { serverLogin: string }) | null = null;
  /** The own chain's head as this connection last saw it; undefined: ask the server. */
  private chainHead: Block | null | undefined = undefined;

  private constructor(
    private readonly ws: WebSocketLike,
    options: ShineClientOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.channel = new RequestChannel({
      send: (text) => ws.send(text),
      timeoutMs: options.requestTimeoutMs ?? 15_000,
      errors: clientErrors,
      onEvent: (op, payload) => this.emit(op, payload),
    });
    this.closed = new Promise((resolve) => {
      ws.addEventListener('close', (ev: { code: number; reason: string }) => {
        this.isClosed = true;
        this.channel.failAll('connection closed', true);
        resolve({ code: ev.code, reason: String(ev.reason) });
      });
    });
    ws.addEventListener('message', (ev: { data: unknown }) => {
      if (typeof ev.data === 'string') this.channel.receive(ev.data);
    });
    // Every error is followed by a close, which settles everything; without a listener ws would throw.
    ws.addEventListener('error', () => undefined);
    // Another session of this user added a block: the cached head is behind.
    this.on('ChainEvent', (ev) => {
      if (ev.login === this.identity?.login && ev.index > (this.chainHead?.index ?? -1)) this.chainHead = undefined;
    });
  }

  /** Opens a WebSocket to url (e.g. ws://host:port/ws) and resolves once it is open. */
  static async connect(url: string, options: ShineClientOptions = {}): Promise<ShineClient> {
    const Ctor = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!Ctor) throw new Error('no WebSocket implementation: pass options.WebSocket (in Node: the ws package)');
    const client = new ShineClient(new Ctor(url), options);
    await new Promise<void>((resolve, reject) => {
      client.ws.addEventListener('open', () => resolve());
      void client.closed.then(({ code }) =>
        reject(new ShineClientError('CLOSED', 0, `could not connect to ${url} (close ${code})`)),
      );
    });
    return client;
  }

  /** The logged-in session, or null before login(). */
  get session(): (OpAnswer<'AuthLogin'> & { serverLogin: string }) | null {
    return this.sessionInfo;
  }

  /** Sends any op and resolves with its answer payload; rejects with ShineClientError. */
  call(op: string, payload: object = {}): Promise<unknown> {
    return this.channel.call(op, payload);
  }

  /** Typed call of an op of the protocol (docs/protocol.md). */
  request<K extends OpName>(op: K, payload: OpPayload<K>): Promise<OpAnswer<K>> {
    return this.call(op, payload) as Promise<OpAnswer<K>>;
  }

  /** Subscribes to events of one op (DirectMessage, DmDeliveryStateChanged, …); returns the unsubscribe. */
  on<K extends string>(op: K, fn: (payload: EventPayload<K>) => void): () => void {
    let set = this.listeners.get(op);
    if (!set) this.listeners.set(op, (set = new Set()));
    const listener = fn as Listener;
    set.add(listener);
    return () => void set.delete(listener);
  }

  private emit(op: string, payload: unknown): void {
    for (const fn of [...(this.listeners.get(op) ?? [])]) {
      try {
        (fn as (p: unknown) => void)(payload);
      } catch (err) {
        // A throwing listener must not starve the others or the answers behind it.
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }

  /** Registers (or updates) a signed profile on this server. */
  async register(profile: UserProfile): Promise<UserProfile> {
    const res = await this.request('RegisterUser', { profile });
    this.profiles.set(profile.login, Promise.resolve(res.profile));
    return res.profile;
  }

  /** Authenticates this socket as identity's user on device deviceId (AuthChallenge, then AuthLogin). */
  async login(identity: Identity, deviceId: string): Promise<OpAnswer<'AuthLogin'>> {
    const challenge = await this.request('AuthChallenge', {});
    const text = authSigningText({
      server: challenge.serverLogin,
      challengeB64: challenge.challengeB64,
      login: identity.login,
      deviceId,
    });
    const res = await this.request('AuthLogin', {
      login: identity.login,
      deviceId,
      signatureB64: signText(text, identity.signSeed),
    });
    this.identity = identity;
    this.sessionInfo = { ...res, serverLogin: challenge.serverLogin };
    return res;
  }

  /**
   * A user's profile, verified and cached for the connection. The server vouches for which profile is
   * current; the client checks its self-signature and refuses a later one with another signing key.
   */
  getProfile(login: string, options: { refresh?: boolean } = {}): Promise<UserProfile> {
    const cached = this.profiles.get(login);
    if (cached && !options.refresh) return cached;
    const fetched = this.request('GetUserProfile', { login }).then(async ({ profile }) => {
      if (profile.login !== login || !verifyProfile(profile))
        throw new ShineClientError('BAD_PROFILE', 0, `profile of ${login} does not verify`);
      const known = cached && (await cached.catch(() => null));
      if (known && known.signKeyB64 !== profile.signKeyB64)
        throw new ShineClientError('BAD_PROFILE', 0, `profile of ${login} changed its signing key`);
      return profile;
    });
    this.profiles.set(login, fetched);
    fetched.catch(() => this.profiles.get(login) === fetched && this.profiles.delete(login));
    return fetched;
  }

  /**
   * A server's descriptor as the connected server pinned it (GetServerDescriptor, docs/protocol.md §13.1),
   * cached for the connection; its self-signature and login are checked, a failure is not cached.
   */
  getServerDescriptor(serverLogin: string): Promise<ServerDescriptor> {
    const cached = this.descriptors.get(serverLogin);
    if (cached) return cached;
    const fetched = this.request('GetServerDescriptor', { serverLogin }).then(({ descriptor }) => {
      if (descriptor.serverLogin !== serverLogin || !verifyDescriptor(descriptor))
        throw new ShineClientError('BAD_PROFILE', 0, `descriptor of ${serverLogin} does not verify`);
      return descriptor;
    });
    this.descriptors.set(serverLogin, fetched);
    fetched.catch(() => this.descriptors.get(serverLogin) === fetched && this.descriptors.delete(serverLogin));
    return fetched;
  }

  private me(): Identity {
    if (!this.identity) throw new ShineClientError('NOT_LOGGED_IN', 0, 'login() first');
    return this.identity;
  }

  private async recipient(login: string): Promise<{ login: string; encKey: Uint8Array }> {
    const encKey = fromBase64((await this.getProfile(login)).encKeyB64);
    if (!encKey) throw new ShineClientError('BAD_PROFILE', 0, `profile of ${login} has no usable encKey`);
    return { login, encKey };
  }

  private async sendPair(
    op: 'SendMessagePair' | 'DeleteMessage' | 'DeleteConversation',
    pair: BuiltPair,
  ): Promise<SentPair> {
    const answer = await this.request(op, {
      incomingBlobB64: pair.incomingBlobB64,
      outgoingBlobB64: pair.outgoingBlobB64,
    });
    const { fromLogin, toLogin, timeMs, nonce, revisionTimeMs, reencryptedAtMs } = pair.outgoing;
    if (pair.outgoing.messageType === 2)
      this.rememberCopy(answer.outgoingKey, {
        revisionTimeMs,
        reencryptedAtMs,
        incomingSha256B64: containerSha256B64(pair.incoming.bytes),
      });
    return { ...answer, fromLogin, toLogin, timeMs, nonce, revisionTimeMs };
  }

  /** Sends an end-to-end encrypted text to a user. */
  async sendText(to: string, text: string): Promise<SentPair> {
    return this.sendPair(
      'SendMessagePair',
      textPair(this.me(), await this.recipient(to), text, { timeMs: this.now() }),
    );
  }

  /** Replaces the text of a message this user sent to `to`; the messageKey stays, the revision rises. */
  async editText(to: string, original: Pick<MessageRef, 'timeMs' | 'nonce'>, newText: string): Promise<SentPair> {
    // Two edits in one millisecond would carry the same revision and the second would change nothing.
    this.lastEditMs = Math.max(this.now(), this.lastEditMs + 1);
    return this.sendPair(
      'SendMessagePair',
      editTextPair(this.me(), await this.recipient(to), original, newText, this.lastEditMs),
    );
  }

  /** Sends a read receipt for a message the peer sent to this user. */
  markRead(message: MessageRef, readAtMs: number = this.now()): Promise<SentPair> {
    return this.sendPair('SendMessagePair', receiptPair(this.me(), message, readAtMs, { timeMs: this.now() }));
  }

  /** Deletes one message of a dialog (sent by either side) for both sides. */
  deleteMessage(target: MessageRef): Promise<SentPair> {
    return this.sendPair('DeleteMessage', deleteMessagePair(this.me(), target, { timeMs: this.now() }));
  }

  /** Deletes every message of the dialog with peer up to beforeMs (inclusive), for both sides. */
  deleteConversation(peer: string, beforeMs: number): Promise<SentPair> {
    return this.sendPair(
      'DeleteConversation',
      deleteConversationPair(this.me(), peer, beforeMs, { timeMs: this.now() }),
    );
  }

  /** Verifies a container this user owns (signature by its fromLogin) and decrypts it when it is text. */
  async open(blob: string | Uint8Array): Promise<OpenedMessage> {
    const me = this.me();
    const bytes = typeof blob === 'string' ? fromBase64(blob) : blob;
    if (!bytes) throw new ShineClientError('BAD_BLOB', 0, 'blob is not base64');
    let c: Container;
    try {
      c = decodeContainer(bytes);
    } catch (err) {
      if (err instanceof ContainerError) throw new ShineClientError('BAD_BLOB', 0, `bad container: ${err.message}`);
      throw err;
    }
    if (ownerOf(c) !== me.login)
      throw new ShineClientError('NOT_OWNER', 0, `copy ${messageKeyOf(c)} belongs to ${ownerOf(c)}`);
    const signKey =
      c.fromLogin === me.login ? me.signPublicKey : fromBase64((await this.getProfile(c.fromLogin)).signKeyB64);
    if (!signKey || !verifyContainer(c, signKey))
      throw new ShineClientError('BAD_SIGNATURE', 0, `${messageKeyOf(c)} is not signed by ${c.fromLogin}`);
    return {
      container: c,
      messageKey: messageKeyOf(c),
      baseKey: baseKeyOf(c),
      signedBy: c.fromLogin,
      ...contentOf(c, me.encSecretKey),
    };
  }

  /**
   * Opens the copy a DirectMessage event carries, checking it is the copy the event names. It throws when
   * the copy is not signed by its fromLogin's current profile key, so a read receipt it returns is signed
   * by the reader (decision 37).
   */
  async decryptEvent(event: DirectMessageEvent): Promise<OpenedEvent> {
    const opened = await this.open(event.blobB64);
    if (opened.messageKey !== event.messageKey)
      throw new ShineClientError('BAD_BLOB', 0, `event names ${event.messageKey} but carries ${opened.messageKey}`);
    const c = opened.container;
    if (c.messageType !== 2) return { ...opened, verified: true, whyUnverified: null };
    this.rememberCopy(opened.messageKey, { ...c, incomingSha256B64: null });
    return { ...opened, verified: false, whyUnverified: 'not delivered yet' };
  }

  /** Remembers the newest revision of an own text copy; the incoming hash stays known for its revision. */
  private rememberCopy(outgoingKey: string, copy: KnownCopy): void {
    const old = this.knownCopies.get(outgoingKey);
    if (old) {
      const order = old.revisionTimeMs - copy.revisionTimeMs || old.reencryptedAtMs - copy.reencryptedAtMs;
      if (order > 0) return;
      if (order === 0) copy = { ...copy, incomingSha256B64: copy.incomingSha256B64 ?? old.incomingSha256B64 };
      this.knownCopies.delete(outgoingKey);
    }
    this.knownCopies.set(outgoingKey, {
      revisionTimeMs: copy.revisionTimeMs,
      reencryptedAtMs: copy.reencryptedAtMs,
      incomingSha256B64: copy.incomingSha256B64,
    });
    if (this.knownCopies.size > MAX_KNOWN_COPIES) this.knownCopies.delete(this.knownCopies.keys().next().value!);
  }

  /** The copy a proof for outgoingKey at this revision must name; null for a key that is no own text copy. */
  private deliveredCopy(outgoingKey: string, revision: Omit<KnownCopy, 'incomingSha256B64'>): DeliveredCopy | null {
    const parsed = parseMessageKey(outgoingKey);
    if (!parsed || parsed.messageType !== 2) return null;
    const known = this.knownCopies.get(outgoingKey);
    const sameRevision =
      known?.revisionTimeMs === revision.revisionTimeMs && known.reencryptedAtMs === revision.reencryptedAtMs;
    return {
      incomingKey: incomingKeyOf(outgoingKey),
      toLogin: parsed.toLogin,
      revisionTimeMs: revision.revisionTimeMs,
      reencryptedAtMs: revision.reencryptedAtMs,
      incomingSha256B64: sameRevision ? known.incomingSha256B64 : null,
    };
  }

  /**
   * Checks the proof a DmDeliveryStateChanged event carries against the newest revision of that message
   * this connection has seen (sent, in history, or from a DirectMessage event); never throws.
   */
  async checkDeliveryEvent(event: DeliveryStateChangedEvent): Promise<CheckedDeliveryEvent> {
    const verdict = async (): Promise<DeliveryVerdict> => {
      if (event.deliveryState !== 'delivered') return unverified(`it is ${event.deliveryState}, not delivered`);
      const known = this.knownCopies.get(event.outgoingKey);
      const copy = known && this.deliveredCopy(event.outgoingKey, known);
      if (!copy) return unverified('this device has not seen that message');
      return checkDeliveryProof(event.deliveryProof, copy, this.proofSources);
    };
    return { ...event, ...(await verdict()) };
  }

  /**
   * The verdict on a pair this client sent, from its history item (the pair answer carries no proof):
   * for a `delivered` answer, whose proof is then in GetDirectMessages. Rejects only when the request fails.
   */
  async checkSent(sent: SentPair): Promise<DeliveryVerdict> {
    // The cursor just above the outgoing key (`…|2` → `…|3`) makes that copy the first item of the page.
    const cut = sent.outgoingKey.lastIndexOf('|');
    const above = `${sent.outgoingKey.slice(0, cut)}|${Number(sent.outgoingKey.slice(cut + 1)) + 1}`;
    const page = await this.request('GetDirectMessages', {
      peerLogin: sent.toLogin,
      beforeTimeMs: sent.timeMs,
      beforeMessageKey: above,
      limit: 1,
    });
    const item = page.items[0];
    if (!item || item.messageKey !== sent.outgoingKey) return unverified('the message is not in the history');
    const { verified, whyUnverified, proof, hashChecked } = await this.historyEntry(item);
    return { verified, whyUnverified, proof, hashChecked };
  }

  /** One page of the dialog with peer, newest first, texts decrypted. */
  async history(
    peer: string,
    options: { before?: { timeMs: number; messageKey: string }; limit?: number } = {},
  ): Promise<HistoryPage> {
    const page = await this.request('GetDirectMessages', {
      peerLogin: peer,
      beforeTimeMs: options.before?.timeMs ?? 0,
      beforeMessageKey: options.before?.messageKey ?? '',
      ...(options.limit === undefined ? {} : { limit: options.limit }),
    });
    const items = await Promise.all(page.items.map((item) => this.historyEntry(item)));
    return {
      items,
      hasMore: page.hasMore,
      next: page.hasMore ? { timeMs: page.nextBeforeTimeMs, messageKey: page.nextBeforeMessageKey } : null,
    };
  }

  /** Opens one history item and checks what it proves (decisions 36–38). */
  private async historyEntry(item: HistoryItem): Promise<HistoryEntry> {
    const { deliveryProof, ...rest } = item;
    let opened: OpenedMessage;
    try {
      opened = await this.open(item.blobB64);
      if (opened.messageKey !== item.messageKey) throw new Error(`the item names ${item.messageKey}`);
    } catch (err) {
      const problem = err instanceof Error ? err.message : String(err);
      return { ...rest, text: null, problem, ...unverified(problem) };
    }
    const text = opened.kind === 'text' ? opened.text : null;
    const c = opened.container;
    if (c.messageType !== 2)
      return { ...rest, text, problem: null, verified: true, whyUnverified: null, proof: null, hashChecked: false };
    this.rememberCopy(item.messageKey, { ...c, incomingSha256B64: null });
    const copy = this.deliveredCopy(item.messageKey, c);
    const verdict =
      item.deliveryState !== 'delivered'
        ? unverified(`it is ${item.deliveryState ?? 'accepted'}, not delivered`)
        : await checkDeliveryProof(deliveryProof, copy!, this.proofSources);
    return { ...rest, text, problem: null, ...verdict };
  }

  /** The user's dialogs, newest first. */
  async conversations(limit?: number): Promise<OpAnswer<'GetConversations'>['items']> {
    return (await this.request('GetConversations', limit === undefined ? {} : { limit })).items;
  }

  /** Tells the server this device has these events, so they are not replayed. */
  async ack(messageKeys: string[]): Promise<number> {
    return (await this.request('AckSessionDelivery', { messageKeys })).acked;
  }

  /** Stores a setting encrypted to the user's own key; null deletes it. */
  setSetting(
    key: string,
    value: Uint8Array | null,
    updatedAtMs: number = this.now(),
  ): Promise<OpAnswer<'SetUserSetting'>> {
    const me = this.me();
    const valueB64 = value === null ? '' : toBase64(encryptBody(value, me.encPublicKey, settingAad(me.login, key)));
    return this.request('SetUserSetting', { key, valueB64, updatedAtMs });
  }

  /** Reads and decrypts settings (all, or the given keys); deleted ones are absent. */
  async getSettings(keys?: string[]): Promise<Setting[]> {
    const me = this.me();
    // Page by page: an answer ends at about 2 MB of values (hasMore), and goes on after nextKey.
    const items: OpAnswer<'GetUserSettings'>['items'] = [];
    let afterKey: string | undefined;
    for (;;) {
      const page = await this.request(
        'GetUserSettings',
        Object.assign(keys === undefined ? {} : { keys }, afterKey === undefined ? {} : { afterKey }),
      );
      items.push(...page.items);
      if (!page.hasMore || page.items.length === 0) break;
      const next = page.nextKey ?? page.items.at(-1)!.key;
      if (next === afterKey) throw new ShineClientError('BAD_FIELDS', 0, 'GetUserSettings: nextKey did not move on');
      afterKey = next;
    }
    return items.map((item) => {
      const raw = fromBase64(item.valueB64);
      if (!raw) throw new ShineClientError('BAD_BLOB', 0, `setting ${item.key} is not base64`);
      return {
        key: item.key,
        value: decryptBody(raw, me.encSecretKey, settingAad(me.login, item.key)),
        updatedAtMs: item.updatedAtMs,
      };
    });
  }

  /** The server's VAPID public key (unpadded base64url), for PushManager.subscribe (docs/protocol.md §5.5). */
  async webPushKey(): Promise<string> {
    return (await this.request('GetWebPushConfig', {})).vapidPublicKey;
  }

  /** Stores a push subscription for this device (keys as PushSubscription.toJSON() gives them). */
  upsertPushToken(subscription: {
    endpoint: string;
    p256dhB64: string;
    authB64: string;
  }): Promise<OpAnswer<'UpsertPushToken'>> {
    return this.request('UpsertPushToken', subscription);
  }

  /** Forgets one of the caller's push subscriptions. */
  deletePushToken(endpoint: string): Promise<OpAnswer<'DeletePushToken'>> {
    return this.request('DeletePushToken', { endpoint });
  }

  /** Sends a `test` push to each of the caller's subscriptions. */
  sendTestWebPush(): Promise<OpAnswer<'SendTestWebPush'>> {
    return this.request('SendTestWebPush', {});
  }

  /**
   * Seals a call payload (SDP, ICE) for peer's devices (docs/protocol.md §5.6): the servers relay it
   * without being able to read the addresses in it.
   */
  async sealCallPayload(peer: string, callId: string, plaintext: Uint8Array): Promise<string> {
    const me = this.me();
    const to = await this.recipient(peer);
    return toBase64(encryptBody(plaintext, to.encKey, callAad(me.login, peer, callId)));
  }

  /** Opens a call payload that fromLogin sealed for this user; null when it is anything else. */
  openCallPayload(fromLogin: string, callId: string, payloadB64: string): Uint8Array | null {
    const me = this.me();
    const sealed = fromBase64(payloadB64);
    if (!sealed) return null;
    try {
      return decryptBody(sealed, me.encSecretKey, callAad(fromLogin, me.login, callId));
    } catch {
      return null;
    }
  }

  /** Rings a user's devices (docs/protocol.md §5.6); payloadB64 is opaque to the servers (encrypt the SDP offer). */
  callInvite(toLogin: string, callId: string, payloadB64: string): Promise<CallDelivery> {
    return this.request('CallInviteBroadcast', { toLogin, callId, payloadB64 });
  }

  /** Sends a call signal (answer, ice, reject, busy, hangup, cancel) to the other side of a call. */
  callSignal(toLogin: string, callId: string, kind: CallSignalKind, payloadB64 = ''): Promise<OpAnswer<'CallSignal'>> {
    return this.request('CallSignal', { toLogin, callId, kind, payloadB64 });
  }

  /**
   * Appends a block of this user's chain (docs/protocol.md §14): built on the head this connection knows (asked
   * from the server the first time), signed, sent with AddBlock. When the head moved meanwhile (CHAIN_CONFLICT,
   * another device added a block) it rebases on the head the server names and tries again, up to 5 times.
   * timeMs defaults to now, never before the head's.
   */
  async addBlock(kind: number, body: Uint8Array, options: { timeMs?: number } = {}): Promise<AddedBlock> {
    const me = this.me();
    let head = this.chainHead === undefined ? await this.ownBlockAt(null) : this.chainHead;
    for (let rebased = 0; ; rebased++) {
      const timeMs = options.timeMs ?? Math.max(this.now(), head?.timeMs ?? 0);
      const built = buildNextBlock(me, head, { kind, body, timeMs });
      try {
        const answer = await this.request('AddBlock', { blockB64: built.blockB64 });
        this.chainHead = built.block;
        return { ...answer, block: built.block, rebased };
      } catch (err) {
        this.chainHead = undefined;
        if (!(err instanceof ShineClientError && err.code === 'CHAIN_CONFLICT') || rebased >= MAX_REBASES) throw err;
        const { headIndex } = err.details;
        head = await this.ownBlockAt(typeof headIndex === 'number' ? headIndex : null);
      }
    }
  }

  /**
   * A user's chain (docs/protocol.md §14), paged with GetChain and checked block by block with the signing key
   * of the user's profile: each block decodes, carries the login, follows the block before it and is signed by
   * the user; the last one must be the head the server names. It stops at the first problem and says so
   * (`problem`); the blocks before it are returned. With `after` (a block verified before) only the blocks
   * after it are read and must follow it. Pages hold pageSize blocks (default 500, the most GetChain gives).
   * Rejects only when a request fails (USER_NOT_FOUND for an unknown user).
   */
  async getChain(login: string, options: { after?: Block; pageSize?: number } = {}): Promise<VerifiedChain> {
    const publicKey = await this.chainKeyOf(login);
    let head: Block | null = options.after ?? null;
    const blocks: Block[] = [];
    const result = (page: { headIndex: number; headHash: string | null }, problem: VerifiedChain['problem']) => ({
      login,
      headIndex: page.headIndex,
      headHash: page.headHash,
      blocks,
      problem,
    });
    for (;;) {
      const page = await this.request('GetChain', {
        login,
        fromIndex: head ? head.index + 1 : 0,
        limit: options.pageSize ?? MAX_CHAIN_PAGE,
      });
      const checked = checkChainItems(page.items, publicKey, login, head);
      blocks.push(...checked.blocks);
      head = checked.blocks.at(-1) ?? head;
      if (checked.problem) return result(page, checked.problem);
      if (page.hasMore && page.items.length > 0) continue;
      const last = head?.index ?? -1;
      if (last < page.headIndex) return result(page, { index: last + 1, reason: 'SHORT' });
      if (last > page.headIndex || (head && blockHash(head) !== page.headHash))
        return result(page, { index: Math.max(page.headIndex, 0), reason: 'HEAD_MISMATCH' });
      return result(page, null);
    }
  }

  /**
   * Checks blocks of login's chain that arrived otherwise than by getChain (a ChainEvent, an AddBlock answer) after
   * a verified head, with the key of login's profile: as getChain checks a page.
   */
  async checkChainItems(
    login: string,
    items: readonly ChainItem[],
    head: Block | null,
  ): Promise<{ blocks: Block[]; problem: VerifiedChain['problem'] }> {
    return checkChainItems(items, await this.chainKeyOf(login), login, head);
  }

  /** The signing key of login's profile, which signs every block of its chain. */
  private async chainKeyOf(login: string): Promise<Uint8Array> {
    const publicKey = fromBase64((await this.getProfile(login)).signKeyB64);
    if (!publicKey) throw new ShineClientError('BAD_PROFILE', 0, `profile of ${login} has no usable signKey`);
    return publicKey;
  }

  /**
   * A block of this user's own chain from the server, checked with the own key (null: the head, asked first;
   * index -1: the empty chain's head, null).
   */
  private async ownBlockAt(index: number | null): Promise<Block | null> {
    const login = this.me().login;
    if (index === null) index = (await this.request('GetChain', { login, fromIndex: 0, limit: 1 })).headIndex;
    if (index < 0) return null;
    const page = await this.request('GetChain', { login, fromIndex: index, limit: 1 });
    const { blocks, problem } = checkChainItems(page.items.slice(0, 1), this.me().signPublicKey, login, 'any');
    if (problem || blocks[0]?.index !== index)
      throw new ShineClientError(
        'BAD_BLOB',
        0,
        `the server's block ${index} of ${login}: ${problem ? describeChainProblem(problem) : 'missing'}`,
      );
    return blocks[0];
  }

  /** Closes the socket and waits until it is closed. */
  async close(): Promise<void> {
    if (!this.isClosed) this.ws.close(1000, 'bye');
    await this.closed;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
