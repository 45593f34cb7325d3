/**
 * WebPush to devices without an open session (docs/protocol.md §5.5): subscriptions, the content-free pushes for
 * stored messages and call invites, and the bounded send queue with retries and per-subscription health.
 */
import { createHmac } from 'node:crypto';
import type { OpAnswer, OpPayload } from '../../protocol/ops.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { Config } from '../config/config.js';
import type { Logger } from '../log.js';
import type { Counter, Metrics } from '../metrics.js';
import type { Fanout } from '../cluster/fanout.js';
import type { UserSession } from '../sessions.js';
import type { PushAnswer, PushOptions, PushTarget, PushTransport } from './sender.js';
import { httpPushTransport } from './sender.js';
import type { PushStore, PushSubscriptionRow } from './store.js';
import { checkEndpoint, checkKeys } from './subscription.js';
import type { VapidIdentity } from './vapid.js';

export interface PushDeps {
  config: Config;
  clock: Clock;
  store: PushStore;
  /** Which devices have a session on some process (docs/protocol.md §5.5, decision 28). */
  fanout: Pick<Fanout, 'onlineDevices'>;
  log: Logger;
  metrics: Metrics;
  vapid: VapidIdentity;
}

/** The pushes' plaintext: never a blob, text or setting (docs/protocol.md §5.5). */
export type PushMessage =
  | { v: 1; kind: 'dm'; fromLogin: string; messageKey: string }
  | { v: 1; kind: 'call'; fromLogin: string; callId: string }
  | { v: 1; kind: 'test' };

/** What GET /debug/push shows of one subscription: the endpoint only as its origin. */
export interface PushSubscriptionHealth extends Omit<PushSubscriptionRow, 'endpoint' | 'p256dh' | 'auth'> {
  origin: string;
}

export const MAX_SUBSCRIPTIONS_PER_LOGIN = 10;
/** Retries after the first attempt, and their backoff (Retry-After, when longer, wins). */
export const RETRY_BACKOFF_MS: readonly number[] = [5_000, 30_000, 120_000];
/** No retry is made later than this after the first attempt. */
export const RETRY_WINDOW_MS = 600_000;
const TEST_WAIT_MS = 10_000;
const DM_TTL_S = 86_400;
const CALL_TTL_S = 60;

interface Job {
  target: PushTarget;
  payload: string;
  options: PushOptions;
  /** 0 for the first attempt. */
  attempt: number;
  firstAtMs: number;
  /** Told the first answer only (SendTestWebPush waits for it). */
  onFirstAnswer?: ((ok: boolean) => void) | undefined;
}

type Verdict = 'sent' | 'gone' | 'retry' | 'failed';

/** 2xx sent; 404/410 the subscription is gone; 429, 5xx and no answer are worth retrying; other 4xx not. */
export function verdictOf(answer: PushAnswer): Verdict {
  const { status } = answer;
  if (status === 'invalid') return 'failed';
  if (typeof status !== 'number' || status === 429 || status >= 500) return 'retry';
  if (status >= 200 && status < 300) return 'sent';
  return status === 404 || status === 410 ? 'gone' : 'failed';
}

export class PushService {
  private readonly queue: Job[] = [];
  private inFlight = 0;
  /** Answers whose bookkeeping is still being written. */
  private settling = 0;
  private readonly retryTimers = new Set<TimerHandle>();
  private readonly idleWaiters: (() => void)[] = [];
  private readonly closing = new AbortController();
  private readonly transport: PushTransport & { close(): void };
  private readonly count: Record<'sent' | 'dropped' | 'retried' | 'removed', Counter> & { failed: Counter };

  constructor(private readonly deps: PushDeps) {
    const { config, clock, metrics, vapid } = deps;
    this.transport = httpPushTransport({ vapid, clock, timeoutMs: config.pushTimeoutMs, signal: this.closing.signal });
    this.count = {
      sent: metrics.counter('push_sent_total', 'WebPush requests the push service accepted (2xx)'),
      failed: metrics.counter('push_failed_total', 'WebPush requests that failed for good, by reason'),
      retried: metrics.counter('push_retries_total', 'WebPush requests scheduled again after 429, 5xx or no answer'),
      dropped: metrics.counter('push_dropped_total', 'WebPush requests dropped because the send queue was full'),
      removed: metrics.counter('push_subscriptions_removed_total', 'Subscriptions deleted after a 404 or 410'),
    };
    metrics.gauge('push_queue_depth', 'WebPush requests waiting for a sender', () => this.queue.length);
    metrics.gauge('push_in_flight', 'WebPush requests waiting for the push service', () => this.inFlight);
    metrics.gauge('push_retries_pending', 'WebPush requests waiting to be retried', () => this.retryTimers.size);
  }

  get vapidPublicKey(): string {
    return this.deps.vapid.publicKey;
  }

  async upsert(p: OpPayload<'UpsertPushToken'>, session: UserSession): Promise<OpAnswer<'UpsertPushToken'>> {
    const { config, clock, store, log } = this.deps;
    const endpoint = checkEndpoint(p.endpoint, config.webPushAllowInsecure);
    const keys = checkKeys(p.p256dhB64, p.authB64);
    const { dropped } = await store.upsertSubscription(
      Object.assign({ endpoint }, keys, {
        ownerLogin: session.login,
        deviceId: p.deviceId ?? session.deviceId,
        nowMs: clock.now(),
        maxPerOwner: MAX_SUBSCRIPTIONS_PER_LOGIN,
      }),
    );
    if (dropped > 0) log.info('push subscriptions over the limit dropped', { owner: session.login, dropped });
    return { stored: true };
  }

  async remove(p: OpPayload<'DeletePushToken'>, session: UserSession): Promise<OpAnswer<'DeletePushToken'>> {
    // Stored endpoints are normalised; one that does not parse was never stored.
    let endpoint: string;
    try {
      endpoint = new URL(p.endpoint).href;
    } catch {
      return { deleted: 0 };
    }
    return { deleted: await this.deps.store.deleteSubscription(endpoint, session.login) };
  }

  /**
   * A newly stored copy for owner: a `dm` push for text (type 1) and, when configured, read receipts
   * (type 3) to each device without a session. Returns how many pushes were queued.
   */
  notifyMessage(copy: { owner: string; fromLogin: string; messageKey: string; messageType: number }): Promise<number> {
    const pushes = copy.messageType === 1 || (copy.messageType === 3 && this.deps.config.webPushReceipts);
    if (!pushes) return Promise.resolve(0);
    const message: PushMessage = { v: 1, kind: 'dm', fromLogin: copy.fromLogin, messageKey: copy.messageKey };
    return this.toDevicesWithoutSession(copy.owner, message, () => ({
      ttlSeconds: DM_TTL_S,
      topic: this.topicOf(copy.owner, copy.fromLogin),
    }));
  }

  /** A call invite for owner: a `call` push (TTL 60 s, high urgency) to each device without a session. */
  notifyCall(owner: string, fromLogin: string, callId: string): Promise<number> {
    const message: PushMessage = { v: 1, kind: 'call', fromLogin, callId };
    return this.toDevicesWithoutSession(owner, message, () => ({ ttlSeconds: CALL_TTL_S, urgency: 'high' }));
  }

  /** One `test` push to each of the caller's subscriptions; counts the first answers within 10 s. */
  async sendTest(session: UserSession): Promise<OpAnswer<'SendTestWebPush'>> {
    const subs = await this.deps.store.subscriptionsOf(session.login);
    const answers = await new Promise<boolean[]>((resolve) => {
      const got: boolean[] = [];
      const done = () => {
        timer.cancel();
        resolve(got);
      };
      const timer = this.deps.clock.setTimer(TEST_WAIT_MS, done);
      if (subs.length === 0) return done();
      const payload = JSON.stringify({ v: 1, kind: 'test' } satisfies PushMessage);
      for (const sub of subs) {
        const onFirstAnswer = (ok: boolean) => {
          got.push(ok);
          if (got.length === subs.length) done();
        };
        if (!this.enqueue(this.firstJob(sub, payload, { ttlSeconds: CALL_TTL_S }, onFirstAnswer))) onFirstAnswer(false);
      }
    });
    const sent = answers.filter((ok) => ok).length;
    return { sent, failed: subs.length - sent };
  }

  /** The owner's subscriptions and their health, for GET /debug/push. */
  async health(owner: string): Promise<{ owner: string; subscriptions: PushSubscriptionHealth[] }> {
    const subs = await this.deps.store.subscriptionsOf(owner);
    return {
      owner,
      subscriptions: subs.map(({ endpoint, p256dh: _k, auth: _a, ...rest }) => ({
        origin: originOf(endpoint),
        ...rest,
      })),
    };
  }

  /**
   * Resolves once no push is queued, in flight or being recorded (retries waiting for their time do
   * not count).
   */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Stops sending: queued pushes and pending retries are dropped, requests in flight aborted. */
  async close(): Promise<void> {
    this.closing.abort();
    this.queue.length = 0;
    for (const t of this.retryTimers) t.cancel();
    this.retryTimers.clear();
    await this.idle();
    this.transport.close();
  }

  /** `options` is made only when there is a device to push (a topic costs an HMAC). */
  private async toDevicesWithoutSession(
    owner: string,
    message: PushMessage,
    options: () => PushOptions,
  ): Promise<number> {
    const subs = await this.deps.store.subscriptionsOf(owner);
    // Most owners have no subscription: no presence lookup (a Redis round trip with several processes).
    if (subs.length === 0) return 0;
    // Sessions are looked at after the read, so a device that logged in meanwhile is not pushed.
    const online = await this.deps.fanout.onlineDevices(owner);
    const payload = JSON.stringify(message);
    let made: PushOptions | null = null;
    let queued = 0;
    for (const sub of subs) {
      if (!online.has(sub.deviceId) && this.enqueue(this.firstJob(sub, payload, (made ??= options())))) queued++;
    }
    return queued;
  }

  private firstJob(sub: PushTarget, payload: string, options: PushOptions, onFirstAnswer?: Job['onFirstAnswer']): Job {
    const target = { endpoint: sub.endpoint, p256dh: sub.p256dh, auth: sub.auth };
    return { target, payload, options, attempt: 0, firstAtMs: this.deps.clock.now(), onFirstAnswer };
  }

  /**
   * Sender per (owner, fromLogin), keyed by this server's VAPID private key: the push service can
   * neither read the login from it nor link one sender's pushes across recipients.
   */
  private topicOf(owner: string, fromLogin: string): string {
    return createHmac('sha256', this.deps.vapid.privateKey)
      .update(`shine-push-topic\n${owner}\n${fromLogin}`)
      .digest('base64url')
      .slice(0, 32);
  }

  private enqueue(job: Job): boolean {
    if (this.closing.signal.aborted || this.queue.length >= this.deps.config.pushQueueSize) {
      this.count.dropped.inc();
      return false;
    }
    this.queue.push(job);
    this.pump();
    return true;
  }

  private pump(): void {
    while (this.inFlight < this.deps.config.pushConcurrency && this.queue.length > 0) {
      const job = this.queue.shift()!;
      this.inFlight++;
      void this.send(job).then(async (answer) => {
        // The slot is free once the push service has answered; the bookkeeping (a database write) must
        // not hold it, or the queue would move at the pace of commits.
        this.inFlight--;
        this.settling++;
        this.pump();
        try {
          await this.settle(job, answer);
        } catch (err) {
          this.deps.log.error('push bookkeeping failed', { origin: originOf(job.target.endpoint), err });
        } finally {
          this.settling--;
          if (this.isIdle()) for (const w of this.idleWaiters.splice(0)) w();
        }
      });
    }
  }

  private isIdle(): boolean {
    return this.queue.length === 0 && this.inFlight === 0 && this.settling === 0;
  }

  private async send(job: Job): Promise<PushAnswer> {
    try {
      return await this.transport(job.target, job.payload, job.options);
    } catch (err) {
      // The library refused to build the request (a stored key it cannot use): not worth retrying.
      this.deps.log.warn('push request not built', { origin: originOf(job.target.endpoint), err: String(err) });
      return { status: 'invalid', retryAfterMs: null };
    }
  }

  /** Counts the answer, arms a retry or deletes a gone subscription, and records the health. */
  private async settle(job: Job, answer: PushAnswer): Promise<void> {
    const { clock, store, log } = this.deps;
    if (this.closing.signal.aborted) return;
    const verdict = verdictOf(answer);
    const now = clock.now();
    job.onFirstAnswer?.(verdict === 'sent');
    job.onFirstAnswer = undefined;
    const error = verdict === 'sent' ? null : String(answer.status);
    if (verdict === 'sent') this.count.sent.inc();
    else if (verdict === 'gone') {
      this.count.failed.inc({ reason: 'gone' });
      if ((await store.deleteSubscription(job.target.endpoint, null)) > 0) this.count.removed.inc();
      return;
    } else if (verdict === 'retry' && this.scheduleRetry(job, answer, now)) this.count.retried.inc();
    else {
      this.count.failed.inc({ reason: error! });
      log.info('push failed', { origin: originOf(job.target.endpoint), status: error, attempts: job.attempt + 1 });
    }
    await store.recordPushResult(job.target.endpoint, now, error);
  }

  /** Arms the next attempt if one is left within the window; false when the job has run out. */
  private scheduleRetry(job: Job, answer: PushAnswer, nowMs: number): boolean {
    const backoff = RETRY_BACKOFF_MS[job.attempt];
    if (backoff === undefined) return false;
    const delay = Math.max(backoff, answer.retryAfterMs ?? 0);
    if (nowMs + delay - job.firstAtMs > RETRY_WINDOW_MS) return false;
    const timer = this.deps.clock.setTimer(delay, () => {
      this.retryTimers.delete(timer);
      void this.retry(job);
    });
    this.retryTimers.add(timer);
    return true;
  }

  /** The retry goes to the subscription as it is now: deleted meanwhile, it is not sent. */
  private async retry(job: Job): Promise<void> {
    const sub = await this.deps.store.getSubscription(job.target.endpoint).catch(() => null);
    if (!sub) return;
    this.enqueue(
      Object.assign({}, job, {
        target: { endpoint: sub.endpoint, p256dh: sub.p256dh, auth: sub.auth },
        attempt: job.attempt + 1,
      }),
    );
  }
}

/** Where a push goes, without the token part of its URL (for logs and /debug/push). */
export function originOf(endpoint: string): string {
  return new URL(endpoint).origin;
}
