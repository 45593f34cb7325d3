/** Direct messages on one server: validating and storing pairs, history, receipts, deletes, replay. */
import { base64DecodedLength, fromBase64, toBase64 } from '../../protocol/bytes.js';
import type { Container } from '../../protocol/container.js';
import { checkBlobSize, decodeBlob } from '../../protocol/blob.js';
import {
  baseKeyOf,
  copyFieldsOf,
  messageKeyOf,
  ownerOf,
  pairProblem,
  signedBytesOf,
} from '../../protocol/container.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { eventFrame } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import type { DirectMessageEvent, OpAnswer, OpPayload, PairAnswer } from '../../protocol/ops.js';
import type { BackgroundQueue } from '../background/queue.js';
import type { Clock, TimerHandle } from '../clock.js';
import { raceTimer } from '../clock.js';
import type { Config } from '../config/config.js';
import type { DeliveryEngine } from '../delivery/engine.js';
import { firstAttemptLeaseMs } from '../delivery/engine.js';
import type { Directory } from '../directory/service.js';
import type { Logger } from '../log.js';
import type { PushService } from '../push/service.js';
import type { Fanout } from '../cluster/fanout.js';
import type { BulkVerifier, VerifyJob } from '../crypto/verify-pool.js';
import { inlineBulkVerifier } from '../crypto/verify-pool.js';
import type { Session, UserSession } from '../sessions.js';
import type { CopyResult, StorePairResult, StoredCopy, Store } from '../store/types.js';
import { takeWithinBytes } from '../store/rules.js';
import type { ServerKey } from '../keys.js';
import { ownReceipt, storedReceipt } from '../delivery/receipts.js';

export interface DmDeps {
  config: Config;
  clock: Clock;
  store: Pick<Store, 'devices' | 'messages' | 'settings' | 'delivery'>;
  /** This server's sessions on every process. */
  fanout: Fanout;
  directory: Directory;
  verifier: SignatureVerifier;
  log: Logger;
  background: BackgroundQueue;
  /** Remote delivery; absent on a server that is not federated. */
  delivery?: DeliveryEngine | undefined;
  /** WebPush to the owner's devices without a session (docs/protocol.md §5.5). */
  push?: Pick<PushService, 'notifyMessage'> | undefined;
  /** Signs the receipt of a delivery to a recipient on this server (docs/protocol.md §13.1). */
  serverKey: Pick<ServerKey, 'sign'>;
}

/** The copy types each pair op takes (incoming types; the outgoing one is the next number). */
export type PairOp = 'SendMessagePair' | 'DeleteMessage' | 'DeleteConversation';
const PAIR_OP_TYPES: Record<PairOp, readonly number[]> = {
  SendMessagePair: [1, 3],
  DeleteMessage: [5],
  DeleteConversation: [7],
};

/** A validated pair, ready to store. */
export interface CheckedPair {
  incoming: Container;
  outgoing: Container;
  /** The recipient's current access servers. */
  recipientServers: readonly string[];
}

const REPLAY_PAGE = 500;
/** Container bytes in one GetDirectMessages answer (at least one item): about 2.7 MB as base64. */
const HISTORY_MAX_BYTES = 2_000_000;
/** Bytes in one GetUserSettings answer as rules.settingAnswerBytes counts them (at least one setting): about 2.7 MB as JSON. */
const SETTINGS_MAX_BYTES = 2_000_000;
const HOUR = 3_600_000;
/**
 * How far a device's replay floor stays behind the clock: far more than a write waits between taking its
 * storedAtMs and committing, or than the clocks of one server's processes disagree.
 */
const REPLAY_FLOOR_LAG_MS = HOUR;

/**
 * Where a device's next replay may start, from the first page of this one (started at startedAtMs):
 * everything stored before the first copy still pending is acknowledged, so there, or an hour before
 * the start, whichever is earlier; not at the device's first day.
 */
export function replayFloorAfter(firstPage: readonly StoredCopy[], startedAtMs: number): number {
  return Math.min(firstPage[0]?.storedAtMs ?? Infinity, startedAtMs - REPLAY_FLOOR_LAG_MS);
}

export class DmService {
  private maintenance: TimerHandle | null = null;

  /** A request's signatures are checked on the event loop (docs/performance.md: a thread did not pay). */
  private readonly inline: BulkVerifier;

  constructor(private readonly deps: DmDeps) {
    this.inline = inlineBulkVerifier(deps.verifier);
  }

  /** Starts the hourly clean-up of forgotten devices. */
  start(): void {
    const tick = (): void => {
      const { clock, config, store, log, background } = this.deps;
      background.run('device clean-up', {}, async () => {
        const n = await store.devices.forgetDevicesBefore(clock.now() - config.deviceForgetMs);
        if (n > 0) log.info('forgot idle devices', { count: n });
      });
      this.maintenance = clock.setTimer(HOUR, tick);
    };
    tick();
  }

  close(): void {
    this.maintenance?.cancel();
  }

  /**
   * The checks of docs/protocol.md §5.2, in its order; nothing is stored before all pass.
   * `sender` is the login the pair must come from.
   */
  async checkPair(op: PairOp, payload: OpPayload<PairOp>, sender: string | null): Promise<CheckedPair> {
    const inB64 = payload.incomingBlobB64;
    const outB64 = payload.outgoingBlobB64;
    if (!inB64 || !outB64) throw new ShineError('BAD_FIELDS', 'incomingBlobB64 and outgoingBlobB64 are required');
    checkBlobSize(inB64);
    checkBlobSize(outB64);
    const incoming = decodeBlob(inB64);
    const outgoing = decodeBlob(outB64);
    const problem = pairProblem(incoming, outgoing);
    if (problem) throw new ShineError('BAD_PAIR', `copies are not one pair (${problem.toLowerCase()})`);
    if (!PAIR_OP_TYPES[op].includes(incoming.messageType)) {
      throw new ShineError('BAD_PAIR', `${op} does not take types ${incoming.messageType}/${outgoing.messageType}`);
    }
    if (sender !== null && incoming.fromLogin !== sender)
      throw new ShineError('NOT_SENDER', 'fromLogin must be the session user');
    await this.checkSigned(incoming, outgoing);
    const to = await this.deps.directory.lookup(incoming.toLogin, {
      refreshAfterMs: this.deps.config.profileRefreshMs,
      background: true,
    });
    if (!to) throw new ShineError('USER_NOT_FOUND', `unknown recipient ${incoming.toLogin}`);
    return { incoming, outgoing, recipientServers: to.accessServers };
  }

  /** Signatures by fromLogin's key, then the time bound: shared by every path that accepts copies. */
  async checkSigned(...copies: Container[]): Promise<void> {
    const [problem] = await this.checkSignedRows([copies], this.inline);
    if (problem) throw problem;
  }

  /**
   * checkSigned for many rows at once (a replication page): every signature goes to `bulk` in one call,
   * so a verify pool checks them off the event loop. One answer per row: null, or the error checkSigned
   * would throw for it.
   */
  async checkSignedRows(rows: readonly Container[][], bulk: BulkVerifier): Promise<(ShineError | null)[]> {
    const { directory, clock, config } = this.deps;
    const problems: (ShineError | null)[] = [];
    const jobs: VerifyJob[] = [];
    const rowOfJob: number[] = [];
    for (const copies of rows) {
      const first = copies[0]!;
      const from = await directory.lookup(first.fromLogin);
      if (!from) {
        problems.push(new ShineError('USER_NOT_FOUND', `unknown sender ${first.fromLogin}`));
        continue;
      }
      // A future revision would outrank every later edit, so all three times are bounded.
      const latest = Math.max(first.timeMs, first.revisionTimeMs, first.reencryptedAtMs);
      problems.push(
        latest > clock.now() + config.maxTimeSkewMs
          ? new ShineError('BAD_TIME', 'timeMs is too far in the future')
          : null,
      );
      for (const c of copies) {
        jobs.push({ signature: c.signature, message: signedBytesOf(c), publicKey: from.signKey });
        rowOfJob.push(problems.length - 1);
      }
    }
    const verified = await bulk.verifyMany(jobs);
    verified.forEach((ok, k) => {
      if (!ok)
        problems[rowOfJob[k]!] = new ShineError('BAD_SIGNATURE', 'signature does not verify with the sender key');
    });
    return problems;
  }

  /** SendMessagePair, DeleteMessage, DeleteConversation from a client session. */
  async acceptPair(op: PairOp, payload: OpPayload<PairOp>, session: UserSession): Promise<PairAnswer> {
    const login = session.login;
    const pair = await this.checkPair(op, payload, login);
    const { config, clock, delivery, directory } = this.deps;
    const stored = await this.storeCheckedPair(pair, { from: null, senderSession: session });
    const { result, routes } = stored;
    const senderPeer = delivery
      ? ((await directory.lookup(login))?.accessServers.find((s) => s !== config.serverLogin) ?? null)
      : null;
    let deliveryState = stored.answer.deliveryState;
    if (delivery && stored.fresh && (routes.length > 0 || senderPeer)) {
      const outgoingKey = result.outgoing.messageKey;
      const first = delivery.firstAttempt(pair.incoming, pair.outgoing, outgoingKey, senderPeer);
      if (deliveryState === 'accepted') {
        // Routes whose servers are down (their last connection failed) do not hold the answer (docs/protocol.md §6.2).
        const answerable = Promise.race([first.outcome, first.routesDown.then(() => 'down' as const)]);
        const waited = await raceTimer(answerable, config.firstAttemptWaitMs, clock);
        // A server that did not answer within the wait is not waited for by the next sends (§6.4).
        if (waited === null) first.waitedOut();
        if (waited === null || waited === 'down')
          delivery.reportLate(first.outcome, login, baseKeyOf(pair.outgoing), outgoingKey);
        else deliveryState = waited.state;
      }
    }
    return Object.assign({}, stored.answer, { deliveryState });
  }

  /**
   * Stores a checked pair in one transaction with its outbox rows and its delivery row — `delivered` at
   * once when the recipient's profile lists this server (the local copy counts, docs/protocol.md §6.2), otherwise
   * `accepted` and leased to this process for the first attempt, which the caller runs; the worker (of
   * any process) owns the row from the second offset on, or once the lease ends if this process dies
   * meanwhile — then sends the new copies to their owners' sessions.
   * `from` is the server the pair came from (the sender's other access server), null for a client's send.
   */
  async storeCheckedPair(
    pair: CheckedPair,
    opts: { from: string | null; senderSession?: Session },
  ): Promise<{ result: StorePairResult; answer: PairAnswer; routes: string[]; fresh: boolean }> {
    const { config, clock, store } = this.deps;
    const now = clock.now();
    const sender = pair.outgoing.fromLogin;
    const recipient = pair.incoming.toLogin;
    const recipientIsLocal = pair.recipientServers.includes(config.serverLogin);
    // Only the sender's other access server forwards (callers check it): its copies are there already.
    const outbox = new Map([[sender, opts.from !== null]]);
    if (recipientIsLocal && recipient !== sender)
      outbox.set(recipient, opts.from !== null && pair.recipientServers.includes(opts.from));
    const device = opts.senderSession?.deviceId;
    const incomingKey = messageKeyOf(pair.incoming);
    const result = await store.messages.storePair({
      incoming: pair.incoming,
      outgoing: pair.outgoing,
      nowMs: now,
      outbox: { owners: outbox },
      delivery: recipientIsLocal
        ? {
            state: 'delivered',
            attempt: 1,
            acceptedAtMs: now,
            nextAttemptAtMs: null,
            // This server's own receipt (docs/protocol.md §13.1), for the incoming copy as this call stores it.
            proof: ownReceipt(
              this.deps,
              Object.assign({}, pair.incoming, { messageKey: incomingKey, storedAtMs: now }),
            ),
          }
        : {
            state: 'accepted',
            attempt: 1,
            acceptedAtMs: now,
            nextAttemptAtMs: now + (config.retryScheduleMs[1] ?? 0),
            // This process runs the first attempt now: no worker (here or in another process) runs one beside it.
            leaseUntilMs: now + firstAttemptLeaseMs(config),
          },
      senderDevice: device ? { login: sender, deviceId: device } : undefined,
    });
    const fresh = result.outgoing.outcome === 'inserted' || result.outgoing.outcome === 'updated';
    if (recipientIsLocal && fresh && !isNew(result.incoming)) {
      // The incoming copy was not stored by this call: it was there already (its own storedAtMs; a newer
      // revision proves nothing for this one), or a tombstone refused it (nothing to prove).
      const proof =
        result.incoming.outcome === 'unchanged'
          ? await storedReceipt(this.deps, result.incoming.messageKey, pair.incoming)
          : null;
      await store.delivery.setDeliveryProof(result.outgoing.messageKey, pair.outgoing, proof);
    }
    this.publish(pair.outgoing, result.outgoing, opts.senderSession?.id);
    const reached = recipientIsLocal ? await this.publishCounted(pair.incoming, result.incoming) : 0;
    const pushed = recipientIsLocal ? await this.pushFor(pair.incoming, result.incoming) : 0;
    return {
      result,
      routes: pair.recipientServers.filter((s) => s !== config.serverLogin),
      fresh,
      answer: {
        messageKey: result.outgoing.messageKey,
        baseKey: baseKeyOf(pair.outgoing),
        incomingKey: result.incoming.messageKey,
        outgoingKey: result.outgoing.messageKey,
        // A tombstoned pair is answered 200 but stored nowhere: it will never be delivered.
        deliveryState: result.outgoing.outcome === 'tombstoned' ? 'failed' : (result.deliveryState ?? 'accepted'),
        deliveredWsSessions: reached,
        deliveredWebPushSessions: pushed,
      },
    };
  }

  /** Sends a newly stored copy to its owner's sessions on every process (except one). */
  publish(copy: Container, result: CopyResult, exceptSessionId?: string): void {
    if (isNew(result)) this.deps.fanout.sendToUser(ownerOf(copy), directMessageFrame(copy, result), exceptSessionId);
  }

  /** The same; resolves with how many sessions it went to (docs/protocol.md decision 28). */
  async publishCounted(copy: Container, result: CopyResult, exceptSessionId?: string): Promise<number> {
    if (!isNew(result)) return 0;
    return this.deps.fanout.sendToUserCounted(ownerOf(copy), directMessageFrame(copy, result), exceptSessionId);
  }

  /**
   * Queues WebPush for a newly stored copy to its owner's devices without a session; returns how many.
   * The copy is stored whatever happens here, so a failure costs only the push.
   */
  async pushFor(copy: Container, result: CopyResult): Promise<number> {
    const { push, log } = this.deps;
    if (!push || !isNew(result)) return 0;
    const { fromLogin, messageType } = copy;
    try {
      return await push.notifyMessage({ owner: ownerOf(copy), fromLogin, messageKey: result.messageKey, messageType });
    } catch (err) {
      log.error('push for a stored copy failed', { err });
      return 0;
    }
  }

  async history(payload: OpPayload<'GetDirectMessages'>, session: UserSession): Promise<OpAnswer<'GetDirectMessages'>> {
    const limit = clamp(payload.limit ?? 50, 1, 200);
    const page = await this.deps.store.messages.getDirectMessages({
      owner: session.login,
      peer: payload.peerLogin,
      beforeTimeMs: payload.beforeTimeMs ?? 0,
      beforeMessageKey: payload.beforeMessageKey ?? '',
      limit,
    });
    // Whole items while their containers add up to HISTORY_MAX_BYTES (the first always): 200 copies of 64 KiB would
    // be an answer of 17.7 MB, more than a socket may hold unsent (docs/protocol.md decision 60).
    const { items, hasMore } = takeWithinBytes(page.items, Infinity, HISTORY_MAX_BYTES, (i) =>
      base64DecodedLength(i.blobB64),
    );
    const last = items.at(-1);
    return {
      items,
      hasMore: hasMore || page.hasMore,
      nextBeforeTimeMs: last?.timeMs ?? 0,
      nextBeforeMessageKey: last?.messageKey ?? '',
    };
  }

  async conversations(
    payload: OpPayload<'GetConversations'>,
    session: UserSession,
  ): Promise<OpAnswer<'GetConversations'>> {
    return {
      items: await this.deps.store.messages.getConversations(session.login, clamp(payload.limit ?? 50, 1, 200)),
    };
  }

  async ack(payload: OpPayload<'AckSessionDelivery'>, session: UserSession): Promise<OpAnswer<'AckSessionDelivery'>> {
    const acked = await this.deps.store.devices.ackForDevice(
      session.login,
      session.deviceId,
      payload.messageKeys,
      this.deps.clock.now(),
    );
    return { acked };
  }

  /**
   * Called right after a successful AuthLogin answer: replays the device's unacknowledged events, in
   * order, each sent only when the socket's buffer has room, so a backlog larger than the buffer limit
   * arrives whole instead of getting the socket closed as a slow consumer. Stops when signal aborts.
   */
  async onLogin(session: UserSession, signal?: AbortSignal): Promise<void> {
    const { store, clock } = this.deps;
    const seen = await store.devices.touchDevice(session.login, session.deviceId, clock.now());
    if (seen.isNew) return; // a new device reads history instead
    await this.replayPending(session, signal);
  }

  /**
   * Sends an open session its device's unacknowledged copies, in order and paced by its socket; after
   * a login, and again when its process may have missed events from other processes (Redis was away).
   */
  async replayPending(session: UserSession, signal?: AbortSignal): Promise<void> {
    const { login, deviceId } = session;
    const { store, clock, background } = this.deps;
    const startedAtMs = clock.now();
    let after: { storedAtMs: number; messageKey: string } | null = null;
    for (;;) {
      const page: StoredCopy[] = await store.devices.pendingForDevice(login, deviceId, after, REPLAY_PAGE);
      if (after === null) {
        const floorMs = replayFloorAfter(page, startedAtMs);
        background.run('replay floor', { login, deviceId }, () =>
          store.devices.advanceReplayFloor(login, deviceId, floorMs),
        );
      }
      for (const copy of page) {
        if (signal?.aborted) return;
        if (!(await session.sendPaced(eventFrame('DirectMessage', directMessageEvent(copy))))) return;
      }
      const last = page.at(-1);
      if (!last || page.length < REPLAY_PAGE) return;
      after = { storedAtMs: last.storedAtMs, messageKey: last.messageKey };
    }
  }

  async setSetting(payload: OpPayload<'SetUserSetting'>, session: UserSession): Promise<OpAnswer<'SetUserSetting'>> {
    const value = fromBase64(payload.valueB64);
    if (!value) throw new ShineError('BAD_FIELDS', 'valueB64 is not base64');
    if (value.length > 65_536) throw new ShineError('TOO_LARGE', 'a setting value is at most 64 KiB');
    const { clock, config, store } = this.deps;
    const now = clock.now();
    if (payload.updatedAtMs > now + config.maxTimeSkewMs)
      throw new ShineError('BAD_TIME', 'updatedAtMs is too far in the future');
    const r = await store.settings.setSetting({
      owner: session.login,
      key: payload.key,
      value,
      updatedAtMs: payload.updatedAtMs,
      nowMs: now,
      synced: false,
    });
    return { key: payload.key, ...r };
  }

  /**
   * The user's settings (or the named ones) after afterKey, in the byte order of their keys' UTF-8, whole ones up to
   * SETTINGS_MAX_BYTES (the first always); hasMore where cut (docs/protocol.md decision 61).
   */
  async getSettings(payload: OpPayload<'GetUserSettings'>, session: UserSession): Promise<OpAnswer<'GetUserSettings'>> {
    const afterKey = payload.afterKey ?? '';
    const page = await this.deps.store.settings.settingsPage({
      owner: session.login,
      keys: payload.keys,
      afterKey,
      maxBytes: SETTINGS_MAX_BYTES,
    });
    const items = page.items.map((r) => ({ key: r.key, valueB64: toBase64(r.value), updatedAtMs: r.updatedAtMs }));
    return { items, hasMore: page.hasMore, nextKey: items.at(-1)?.key ?? afterKey };
  }
}

function directMessageFrame(copy: Container, result: CopyResult) {
  const event: DirectMessageEvent = Object.assign(copyFieldsOf(copy), {
    storedAtMs: result.storedAtMs,
    blobB64: toBase64(copy.bytes),
  });
  return eventFrame('DirectMessage', event);
}

function directMessageEvent({ blob, ...fields }: StoredCopy): DirectMessageEvent {
  return Object.assign({}, fields, { blobB64: toBase64(blob) });
}

const isNew = (r: CopyResult): boolean => r.outcome === 'inserted' || r.outcome === 'updated';

const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, v));
