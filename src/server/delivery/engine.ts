/**
 * The delivery engine of docs/protocol.md §6: the first attempt before the answer, the forward to the sender's
 * second server, and a worker that retries due rows on the configured schedule until `delivered` or
 * `failed`. Rows are claimed with a lease and a row-version compare-and-set, so several workers
 * (threads or processes) on one database never run the same attempt twice.
 */
import { toBase64 } from '../../protocol/bytes.js';
import type { Container } from '../../protocol/container.js';
import { incomingKeyOf, messageKeyOf } from '../../protocol/container.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import type { DeliveryReceipt, ReceiptExpectation } from '../../protocol/receipt.js';
import type { ServerKey } from '../keys.js';
import { checkReceipt, expectationFor, ownReceipt, proofSigners, storedReceipt } from './receipts.js';
import { eventFrame } from '../../protocol/envelope.js';
import type { DeliveryState, DeliveryStateChangedEvent, OpPayload } from '../../protocol/ops.js';
import type { BackgroundQueue } from '../background/queue.js';
import type { Clock, TimerHandle } from '../clock.js';
import type { Config } from '../config/config.js';
import { CONFIG_DEFAULTS } from '../config/config.js';
import type { Directory } from '../directory/service.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import type { Logger } from '../log.js';
import type { Counter, Histogram, Metrics } from '../metrics.js';
import type { Fanout } from '../cluster/fanout.js';
import type { DeliveryRow, DeliveryUpdate, Store } from '../store/types.js';
import type { Admission, DeliveryTrouble } from './trouble.js';
import { causeOf } from './trouble.js';

export interface DeliveryDeps {
  config: Config;
  clock: Clock;
  store: Pick<Store, 'delivery' | 'messages'>;
  fanout: Fanout;
  directory: Directory;
  peers: PeerCaller;
  log: Logger;
  metrics: Metrics;
  background: BackgroundQueue;
  /** Told of every call's outcome, per destination server (logs and /debug/peers). */
  trouble?: DeliveryTrouble;
  /** Checks the receipts of recipient servers (docs/protocol.md §13.1). */
  verifier: SignatureVerifier;
  /** Signs this server's own receipt for a recipient on this server. */
  serverKey: Pick<ServerKey, 'sign'>;
}

/**
 * What one attempt's calls gave: the receipt of the recipient server that took the copy, `local` when
 * this server is one of the recipient's (its own copy counts), or null when no route delivered.
 */
type Delivered = DeliveryReceipt | 'local' | null;

export interface DeliveryOptions {
  /** Attempts running at once. */
  poolSize?: number;
  /** Due rows waiting for the pool (each is claimed when its attempt starts); the worker scans no more while it is full. */
  queueSize?: number;
}

/** The shortest sender's wait whose end marks the servers still called as not answering (FirstAttempt.waitedOut). */
const UNANSWERED_FLOOR_MS = 1000;

/** The first wait between probes of a server not answering (probeLater), doubling up to a call timeout. */
const PROBE_FIRST_MS = 1000;

/** What the next probe of a server not answering delivers, and when. */
interface Probe {
  payload: OpPayload<'ReceiveIncomingMessage'>;
  want: ReceiptExpectation;
  timer: TimerHandle | null;
  waitMs: number;
}

/** A claimed row's lease, in call timeouts. */
const LEASE_TIMEOUTS = 6;

/**
 * How long a row stays leased to the process that stored it and runs its first attempt (docs/protocol.md
 * §6.6): the attempt's profile refresh (at most one call timeout) and its parallel calls (one timeout
 * each). No worker of any process claims the row meanwhile; if the process dies, the row is taken over
 * once the lease ends.
 */
export function firstAttemptLeaseMs(config: Pick<Config, 's2sTimeoutMs'>): number {
  return 2 * config.s2sTimeoutMs;
}

/** What a first attempt found: the revision's delivery state, and whether the attempt changed it. */
export interface FirstAttemptOutcome {
  state: DeliveryState;
  changed: boolean;
  /** The proof kept with the row when this attempt delivered it. */
  proof?: DeliveryReceipt | null;
}

/** How one attempt's calls go (deliverTo, callRoutes). */
interface RouteOptions {
  /** Each failed route's cause is pushed here. */
  errors?: string[];
  /** Called when, without a success, only calls to servers that were down as they started are left (or none). */
  routesDown?: () => void;
  /** Servers that are down are not called: they count as failed at once (a worker's regular attempt). */
  untriedWhenDown?: boolean;
  /** Every route that is not down is called, one not answering too (the last attempt before `failed`). */
  everyRoute?: boolean;
  /** Servers whose calls are running, kept up to date (a first attempt's, for waitedOut). */
  running?: Set<string>;
}

/** A first attempt under way. */
export interface FirstAttempt {
  outcome: Promise<FirstAttemptOutcome>;
  /**
   * Resolves when no route is left that could answer soon: every call still running is to a server that is
   * down, its last connection failed (docs/protocol.md §6.2), and no call was made to a server not answering but
   * its probe (§6.4). The sender's answer need not wait for them; their outcome still comes (outcome). Never
   * resolves otherwise.
   */
  routesDown: Promise<void>;
  /**
   * The sender's wait (firstAttemptWaitMs) ran out before the outcome: each server whose call is still running,
   * and that is not down, is not answering from now (DeliveryTrouble.unanswered), so the next sends do not
   * wait on it too. Not with a wait under UNANSWERED_FLOOR_MS.
   */
  waitedOut(): void;
}

export class DeliveryEngine {
  private timer: TimerHandle | null = null;
  /** Per server not answering: the message its next probe delivers, and that probe's timer and backoff. */
  private readonly probes = new Map<string, Probe>();
  private readonly queue: DeliveryRow[] = [];
  /** Keys in the queue or running, so that overlapping scans never queue one row twice. */
  private readonly queuedKeys = new Set<string>();
  /** The attempts running now (at most poolSize), for a peer's wake-up to wait on too (see wake). */
  private readonly attemptsRunning = new Set<Promise<void>>();
  private closed = false;
  /** A pass is reading due rows now. */
  private scanning = false;
  /** A pass was asked for while one was reading: it runs once that one is done (rows woken meanwhile). */
  private scanAgain = false;
  /** The last pass filled the queue's room: more rows may be due than it took (a backlog). */
  private moreDue = false;
  private readonly poolSize: number;
  private readonly queueSize: number;
  private readonly attempts: Counter;
  private readonly firstAttempts: Counter;
  private readonly callSeconds: Histogram;
  private readonly s2sErrors: Counter;
  private readonly probeCalls: Counter;
  private byState: Record<DeliveryState, number> = { accepted: 0, delivered: 0, failed: 0 };
  private countedAtMs = -Infinity;

  constructor(
    private readonly deps: DeliveryDeps,
    opts: DeliveryOptions = {},
  ) {
    this.poolSize = opts.poolSize ?? CONFIG_DEFAULTS.deliveryPoolSize;
    this.queueSize = opts.queueSize ?? CONFIG_DEFAULTS.deliveryQueueSize;
    const m = deps.metrics;
    this.attempts = m.counter(
      'delivery_attempts_total',
      'Worker delivery attempts, by outcome (delivered, retry, failed, extra)',
    );
    this.firstAttempts = m.counter(
      'delivery_first_attempts_total',
      'First attempts made at acceptance, by outcome (delivered, accepted)',
    );
    this.callSeconds = m.histogram(
      'delivery_call_seconds',
      'Duration of one ReceiveIncomingMessage call to a recipient server',
    );
    this.s2sErrors = m.counter('s2s_errors_total', 'Failed server-to-server calls made for delivery, by peer');
    this.probeCalls = m.counter(
      'delivery_probes_total',
      'Calls made on their own (no attempt made them) to a server not answering, to find when it answers again, by peer',
    );
    m.gauge('delivery_rows', 'Delivery rows by state (refreshed at most every 30 s)', () =>
      Object.entries(this.byState).map(([state, n]) => [{ state }, n]),
    );
    m.gauge('delivery_queue_depth', 'Due rows waiting for the attempt pool', () => this.queue.length);
    m.gauge('delivery_attempts_running', 'Attempts in progress', () => this.attemptsRunning.size);
    m.gauge(
      'delivery_peer_not_answering',
      'Per server called for delivery: 1 while it is connected but not answering (one call at a time until one succeeds), else 0',
      () => (deps.trouble?.snapshot() ?? []).map((r) => [{ peer: r.serverLogin }, r.notAnswering ? 1 : 0]),
      ['peer'],
    );
  }

  /** Starts the periodic worker; its first pass runs at once (rows left by a previous run). */
  start(): void {
    const tick = (): void => {
      if (this.closed) return;
      this.scan();
      this.timer = this.deps.clock.setTimer(this.deps.config.workerTickMs, tick);
    };
    tick();
  }

  /** Stops claiming rows; attempts in flight end in the background queue, which the server drains next. */
  close(): void {
    this.closed = true;
    this.timer?.cancel();
    for (const server of [...this.probes.keys()]) this.stopProbing(server);
    this.pump(); // drops the rows not started yet
  }

  /** One worker pass in the background; a failing scan is logged by the queue. */
  private scan(): void {
    this.deps.background.run('delivery worker pass', {}, () => this.processDue());
  }

  /**
   * The first attempt (docs/protocol.md §6.2) for a pair just stored with attempt 1 scheduled: calls the remote
   * routes in parallel and resolves after the first success or after all failed, with the revision's
   * state then and whether this attempt changed it (only such a change is this attempt's to report:
   * the worker reports its own). The remaining calls run on in the background; then the pair goes to
   * the sender's second server.
   */
  firstAttempt(incoming: Container, outgoing: Container, outgoingKey: string, senderPeer: string | null): FirstAttempt {
    const payload = { incomingBlobB64: toBase64(incoming.bytes), sourceServerLogin: this.deps.config.serverLogin };
    // Never rejects: callers chain on it without a catch of their own.
    // The refresh may take at most half the sender's wait, so the calls still fit in the answer.
    const { s2sTimeoutMs, firstAttemptWaitMs } = this.deps.config;
    const errors: string[] = [];
    const refreshWaitMs = Math.min(s2sTimeoutMs, firstAttemptWaitMs / 2);
    const want = expectationFor(Object.assign({}, incoming, { messageKey: messageKeyOf(incoming) }), undefined);
    let down = (): void => {};
    const routesDown = new Promise<void>((resolve) => (down = resolve));
    const running = new Set<string>();
    const calls = this.deliverTo(incoming.toLogin, payload, want, refreshWaitMs, {
      errors,
      routesDown: down,
      running,
    }).catch((err: unknown): Delivered => {
      this.deps.log.error('first attempt failed', { key: outgoingKey, err: String(err) });
      return null;
    });
    const outcome = calls.then(async (delivered): Promise<FirstAttemptOutcome> => {
      if (!delivered) this.firstAttempts.inc({ outcome: 'accepted' });
      if (!delivered) {
        await this.releaseFirstLease(outgoingKey, outgoing, errors.join('; ') || 'no route answered');
        return { state: 'accepted', changed: false };
      }
      try {
        const proof = delivered === 'local' ? await storedReceipt(this.deps, want.messageKey) : delivered;
        if (await this.deps.store.delivery.markDelivered(outgoingKey, outgoing, this.deps.clock.now(), proof)) {
          this.firstAttempts.inc({ outcome: 'delivered' });
          return { state: 'delivered', changed: true, proof };
        }
        // The worker delivered this revision meanwhile, or a newer revision replaced it.
        const row = await this.deps.store.delivery.getDelivery(outgoingKey);
        const same =
          row?.revisionTimeMs === outgoing.revisionTimeMs && row.reencryptedAtMs === outgoing.reencryptedAtMs;
        return { state: same && row.state === 'delivered' ? 'delivered' : 'accepted', changed: false };
      } catch (err) {
        // The row stays accepted: the worker's next attempt delivers again (the recipient stores idempotently).
        this.deps.log.error('could not record a delivery', { key: outgoingKey, err: String(err) });
        return { state: 'accepted', changed: false };
      }
    });
    if (senderPeer) {
      const forward = Object.assign({}, payload, { outgoingBlobB64: toBase64(outgoing.bytes) });
      this.deps.background.run('forward to sender peer', { peer: senderPeer, key: outgoingKey }, () =>
        outcome
          .then(() => this.deps.peers.call(senderPeer, 'ReceiveOutcomingMessage', forward))
          .catch((err: unknown) => {
            // Expected while the peer is down: replication (docs/protocol.md §7) repairs a failed forward.
            this.deps.log.debug('forward to sender peer failed', { peer: senderPeer, err: String(err) });
          }),
      );
    }
    this.deps.background.run('first attempt', { key: outgoingKey }, () => outcome);
    const waitedOut = (): void => {
      // A wait set shorter than a busy server's answer may take says nothing of the server.
      if (firstAttemptWaitMs < UNANSWERED_FLOOR_MS) return;
      for (const server of running) if (!this.deps.peers.down(server)) this.deps.trouble?.unanswered(server);
    };
    return { outcome, routesDown, waitedOut };
  }

  /**
   * A failed first attempt gives its row back at once, so the second regular attempt comes at its
   * offset rather than at the lease's end. Only the first attempt's own lease is released: a worker
   * that took the row over meanwhile holds a lease of its own (and a newer row version).
   */
  private async releaseFirstLease(
    outgoingKey: string,
    revision: { revisionTimeMs: number; reencryptedAtMs: number },
    lastError: string,
  ): Promise<void> {
    const { store, config, clock, log } = this.deps;
    try {
      // Read again when the row moved between the read and the write: a peer's wake-up may have made it due.
      for (let tries = 0; tries < 3; tries++) {
        const row = await store.delivery.getDelivery(outgoingKey);
        if (
          row?.state !== 'accepted' ||
          row.revisionTimeMs !== revision.revisionTimeMs ||
          row.reencryptedAtMs !== revision.reencryptedAtMs ||
          row.leaseUntilMs !== row.acceptedAtMs + firstAttemptLeaseMs(config)
        )
          return;
        const update = {
          state: 'accepted' as const,
          attempt: row.attempt,
          nextAttemptAtMs: row.nextAttemptAtMs,
          lastError,
        };
        if (await store.delivery.finishDelivery(outgoingKey, row.rowVersion, update, clock.now())) return;
      }
    } catch (err) {
      // The lease then simply runs out: the second attempt comes a little later.
      log.warn('could not release a first attempt lease', { key: outgoingKey, err: String(err) });
    }
  }

  /**
   * An outcome of a first attempt that comes after the answer reaches the sender's sessions here as
   * an event (docs/protocol.md §6.2, §6.7), when the attempt changed the state.
   */
  reportLate(first: Promise<FirstAttemptOutcome>, senderLogin: string, baseKey: string, outgoingKey: string): void {
    this.deps.background.run('first attempt outcome', { key: outgoingKey }, async () => {
      const o = await first;
      if (o.changed) this.notify(senderLogin, baseKey, outgoingKey, o.state, o.proof ?? null);
    });
  }

  /**
   * One attempt's calls: the recipient's routes read afresh (docs/protocol.md §4, §6.4: a profile older than
   * profileRefreshMs is refreshed first, waited for at most refreshWaitMs), then delivered to in
   * parallel. True at the first success — or at once when this server is one of the recipient's (its
   * copy counts, docs/protocol.md §6.2), while the calls to the recipient's other server still run to their end.
   */
  private async deliverTo(
    recipientLogin: string,
    payload: OpPayload<'ReceiveIncomingMessage'>,
    want: ReceiptExpectation,
    refreshWaitMs: number,
    opts: RouteOptions = {},
  ): Promise<Delivered> {
    const { directory, config } = this.deps;
    const recipient = await directory.lookup(recipientLogin, {
      refreshAfterMs: config.profileRefreshMs,
      maxWaitMs: refreshWaitMs,
    });
    if (!recipient) opts.errors?.push(`no profile of ${recipientLogin} found`);
    if (!recipient) return null;
    const routes = recipient.accessServers.filter((s) => s !== config.serverLogin);
    if (!recipient.accessServers.includes(config.serverLogin)) return this.callRoutes(routes, payload, want, opts);
    if (routes.length > 0)
      this.deps.background.run('delivery to other routes', { recipient: recipientLogin }, () =>
        this.callRoutes(routes, payload, want),
      );
    return 'local';
  }

  /**
   * Delivers to routes in parallel; resolves with the first receipt that proves the delivery (docs/protocol.md
   * §13.1), or null when every route failed or answered without one (BAD_RECEIPT). Calls still running
   * continue in the background.
   */
  private callRoutes(
    routes: readonly string[],
    payload: OpPayload<'ReceiveIncomingMessage'>,
    want: ReceiptExpectation,
    { errors, routesDown, untriedWhenDown = false, everyRoute = false, running }: RouteOptions = {},
  ): Promise<DeliveryReceipt | null> {
    if (routes.length === 0) return Promise.resolve(null);
    const { peers, trouble } = this.deps;
    // A server that is down is called (its call waits for a redial) unless untriedWhenDown, but not hoped for: a
    // sender's answer does not wait for it. One not answering gets one call at a time (DeliveryTrouble.admit):
    // the answer waits for that probe, which may find it working again, and not for the calls not made.
    const admission = new Map(
      routes.map((s): [string, Admission | 'down'] => [
        s,
        peers.down(s) ? 'down' : everyRoute ? 'call' : (trouble?.admit(s) ?? 'call'),
      ]),
    );
    return new Promise((resolve) => {
      let pending = routes.length;
      const hopeful = new Set(routes.filter((s) => admission.get(s) === 'call' || admission.get(s) === 'probe'));
      if (hopeful.size === 0) routesDown?.();
      for (const server of routes) {
        const admitted = admission.get(server)!;
        if (admitted === 'skip' || (untriedWhenDown && admitted === 'down')) {
          if (admitted === 'skip') this.keepForProbe(server, payload, want);
          errors?.push(
            admitted === 'down'
              ? `${server}: down (its last connection failed), not called`
              : `${server}: not answering (one call at a time until one succeeds), not called`,
          );
          if (--pending === 0) resolve(null);
          continue;
        }
        const call = this.callOne(server, payload, want, admitted === 'probe');
        if (running) {
          running.add(server);
          call.finally(() => running.delete(server)).catch(() => {});
        }
        call.then(resolve, (err: unknown) => {
          errors?.push(`${server}: ${causeOf(server, err)}`);
          const wasHopeful = hopeful.delete(server);
          if (--pending === 0) resolve(null);
          else if (wasHopeful && hopeful.size === 0) routesDown?.();
        });
      }
    });
  }

  /**
   * One delivery call to a recipient server: resolves with its receipt, checked, or rejects. Its outcome goes to
   * the server's trouble record (`probe`: it is the one call admitted to a server not answering); the call runs to
   * its end where drain() can see it, even when its caller no longer waits for it.
   */
  private callOne(
    server: string,
    payload: OpPayload<'ReceiveIncomingMessage'>,
    want: ReceiptExpectation,
    probe: boolean,
  ): Promise<DeliveryReceipt> {
    const { trouble, clock } = this.deps;
    const started = performance.now();
    const startedAtMs = clock.now();
    const settled = this.deps.peers
      .call(server, 'ReceiveIncomingMessage', payload)
      .then(async (answer) => {
        this.callSeconds.observe((performance.now() - started) / 1000);
        // Only the server called may prove the delivery to it.
        const checked = await checkReceipt(
          answer.receipt,
          Object.assign({}, want, { serverLogins: [server] }),
          this.deps,
        );
        if ('problem' in checked) {
          this.deps.log.warn('delivery answered without a valid receipt', {
            server,
            key: want.messageKey,
            err: `BAD_RECEIPT: ${checked.problem}`,
          });
          throw new Error(`BAD_RECEIPT: ${checked.problem}`);
        }
        return checked.receipt;
      })
      .then(
        (receipt) => {
          this.stopProbing(server);
          // The first success after failures: the server works again — it may never have been down (its
          // calls failed or timed out on a connection that stayed up, e.g. while its database was stuck),
          // so no redial told us. Its rows kept for later are attempted now (docs/protocol.md §6.4).
          if (trouble?.succeeded(server, probe)) this.peerAlive(server);
          return receipt;
        },
        (err: unknown) => {
          this.s2sErrors.inc({ peer: server });
          const notAnswering = trouble?.failed(server, err, probe) ?? false;
          this.deps.log.debug('delivery call failed', { server, err: String(err) });
          if (notAnswering) {
            this.keepForProbe(server, payload, want);
            this.probeLater(server, startedAtMs);
          } else this.stopProbing(server); // it answers, or its connection failed: the redial's wake-up is for that
          throw err;
        },
      );
    this.deps.background.run('delivery call', { server }, () => settled.catch(() => {}));
    return settled;
  }

  /** A call to a server not answering was not made, or failed: its message is the next probe's. */
  private keepForProbe(server: string, payload: OpPayload<'ReceiveIncomingMessage'>, want: ReceiptExpectation): void {
    const p = this.probes.get(server);
    if (p) Object.assign(p, { payload, want });
    else
      this.probes.set(server, {
        payload,
        want,
        timer: null,
        waitMs: Math.min(PROBE_FIRST_MS, this.deps.config.s2sTimeoutMs),
      });
  }

  /**
   * The next probe of a server not answering, a backoff after the start of the call that just failed
   * (PROBE_FIRST_MS doubling up to s2sTimeoutMs): a server that recovers while no send or regular attempt calls
   * it is found then, not at its rows' next offset (up to 25 min away). A call that timed out has waited its
   * backoff already, so a server that does not answer at all always has one probe waiting on it, and the probe
   * that is waiting as it recovers finds it. The probe delivers the latest message kept for the server; its
   * success wakes the server's rows.
   */
  private probeLater(server: string, failedCallStartedAtMs: number): void {
    const p = this.probes.get(server);
    if (!p || p.timer || this.closed) return;
    const { clock, config } = this.deps;
    const waitMs = Math.max(0, failedCallStartedAtMs + p.waitMs - clock.now());
    p.timer = clock.setTimer(waitMs, () => {
      p.timer = null;
      p.waitMs = Math.min(2 * p.waitMs, config.s2sTimeoutMs);
      // A call is admitted as the probe unless the server works again ('call') or a probe is under way ('skip'),
      // whose failure asks for the next one.
      if (this.closed || this.deps.trouble?.admit(server) !== 'probe') return;
      this.deps.log.debug('probing a server not answering', { peer: server });
      this.probeCalls.inc({ peer: server });
      this.callOne(server, p.payload, p.want, true).catch(() => {});
    });
  }

  private stopProbing(server: string): void {
    this.probes.get(server)?.timer?.cancel();
    this.probes.delete(server);
  }

  /**
   * One worker pass: queues due rows while the queue has room and feeds the pool. Returns rows queued.
   * When it fills the room, the next pass comes as soon as the queue is down to one pool's worth instead of
   * at the next tick (refill), so a backlog (a peer back after an outage) drains at the pool's pace, not at
   * one queue a tick.
   */
  async processDue(): Promise<number> {
    const { store, clock } = this.deps;
    const room = this.queueSize - this.queue.length;
    if (room <= 0 || this.closed) return 0;
    if (this.scanning) {
      this.scanAgain = true;
      return 0;
    }
    this.scanning = true;
    try {
      const now = clock.now();
      if (now - this.countedAtMs >= 30_000) {
        this.countedAtMs = now;
        this.byState = await store.delivery.countDeliveriesByState();
      }
      const due = await store.delivery.dueDeliveries(now, room);
      this.moreDue = due.length >= room;
      let queued = 0;
      for (const row of due) {
        if (this.queuedKeys.has(row.outgoingKey)) continue;
        this.queuedKeys.add(row.outgoingKey);
        this.queue.push(row);
        queued++;
      }
      this.pump();
      return queued;
    } finally {
      this.scanning = false;
      if (this.scanAgain) {
        this.scanAgain = false;
        this.scan();
      }
    }
  }

  /**
   * The next pass at once when the last one left rows behind and the queue is down to one pool's worth. Rows
   * still queued are due too and come back in the pass (skipped, queuedKeys): the fewer of them, the more
   * new rows it takes.
   */
  private refill(): void {
    if (!this.moreDue || this.scanning || this.closed || this.queue.length > this.poolSize) return;
    this.moreDue = false;
    this.scan();
  }

  private pump(): void {
    const stopped = () => this.closed || this.deps.background.signal.aborted;
    while (!stopped() && this.attemptsRunning.size < this.poolSize && this.queue.length > 0) {
      const row = this.queue.shift()!;
      const attempt: Promise<void> = this.claimAndAttempt(row).finally(() => {
        this.attemptsRunning.delete(attempt);
        this.queuedKeys.delete(row.outgoingKey);
        this.pump();
        this.refill();
      });
      this.attemptsRunning.add(attempt);
      // Where drain() sees it; a failure is logged there.
      this.deps.background.run('delivery attempt', { key: row.outgoingKey }, () => attempt);
    }
    if (stopped()) {
      // Unclaimed: whoever runs next picks them up as due.
      for (const row of this.queue.splice(0)) this.queuedKeys.delete(row.outgoingKey);
    }
  }

  /**
   * Claims the row just before its attempt, so the lease covers the attempt and not the time spent in
   * the queue: a lease that ran out while the row waited would let another worker run the same attempt.
   */
  private async claimAndAttempt(row: DeliveryRow): Promise<void> {
    const { store, clock, config } = this.deps;
    // A lease outlives one attempt: the peer check, the profile refresh and the parallel calls, one
    // timeout each at most (a call's timeout covers its backoff wait, dial and ServerAuth too).
    const mine = await store.delivery.claimDelivery(
      row.outgoingKey,
      row.rowVersion,
      clock.now() + LEASE_TIMEOUTS * config.s2sTimeoutMs,
    );
    if (mine) await this.attempt(mine);
  }

  /** Runs one claimed attempt and writes its outcome (docs/protocol.md §6.4–6.5). */
  private async attempt(row: DeliveryRow): Promise<void> {
    const { store, clock, config, directory } = this.deps;
    const schedule = config.retryScheduleMs;
    const now = clock.now();
    // The latest offset that has passed: missed offsets collapse into this one attempt.
    let due = 0;
    while (due + 1 < schedule.length && row.acceptedAtMs + schedule[due + 1]! <= now) due++;
    // The row's attempt index past the schedule means its last regular attempt is the one now due.
    const regular = due >= row.attempt || row.attempt >= schedule.length;

    const copy = await store.messages.getCopy(incomingKeyOf(row.outgoingKey));
    if (!copy || copy.revisionTimeMs !== row.revisionTimeMs || copy.reencryptedAtMs !== row.reencryptedAtMs) {
      // Deleted, or replaced by a newer revision whose own row supersedes this one.
      await this.finish(row, { state: 'failed', attempt: row.attempt, nextAttemptAtMs: null, lastError: 'copy gone' });
      return;
    }
    const sender = await directory.lookup(row.senderLogin);
    const senderPeer = sender?.accessServers.find((s) => s !== config.serverLogin) ?? null;
    const want = expectationFor(Object.assign({}, copy, { bytes: copy.blob }), undefined);
    const peerProof =
      regular && senderPeer && config.peerCheckAttempts.includes(due + 1)
        ? await this.peerProof(senderPeer, row, want)
        : null;
    if (peerProof) {
      const update = { state: 'delivered' as const, attempt: due + 1, nextAttemptAtMs: null, lastError: null };
      await this.finish(row, Object.assign({}, update, { proof: peerProof }));
      return;
    }
    const payload = { incomingBlobB64: toBase64(copy.blob), sourceServerLogin: config.serverLogin };
    const errors: string[] = [];
    // A server that is down (its last connection failed) is not called by a regular attempt before the last: the
    // call would hold a place in the pool until a redial, and a peer's return wakes its rows anyway. The last
    // attempt calls before `failed`, and so does an extra one: a process saw the peer back (docs/protocol.md §6.4).
    // The last calls a server that is not answering too, though another call (its probe) is under way.
    const last = regular && due + 1 >= schedule.length;
    const delivered = await this.deliverTo(row.recipientLogin, payload, want, config.s2sTimeoutMs, {
      errors,
      untriedWhenDown: regular && !last,
      everyRoute: last,
    });
    // Each route's own cause, so /debug/delivery says which server failed and why.
    const lastError = errors.join('; ') || 'no route answered';
    if (delivered) {
      await this.finish(row, {
        state: 'delivered',
        attempt: regular ? due + 1 : row.attempt,
        nextAttemptAtMs: null,
        lastError: null,
        proof: delivered === 'local' ? ownReceipt(this.deps, copy) : delivered,
      });
    } else if (!regular) {
      // An extra attempt (a peer came back): the regular schedule stays as it was.
      await this.finish(row, {
        state: 'accepted',
        attempt: row.attempt,
        nextAttemptAtMs: row.acceptedAtMs + schedule[row.attempt]!,
        lastError,
      });
    } else if (last) {
      await this.finish(row, {
        state: 'failed',
        attempt: due + 1,
        nextAttemptAtMs: null,
        lastError,
      });
    } else {
      await this.finish(row, {
        state: 'accepted',
        attempt: due + 1,
        nextAttemptAtMs: row.acceptedAtMs + schedule[due + 1]!,
        lastError,
      });
    }
  }

  /**
   * The sender's other server's proof that it delivered this revision (docs/protocol.md §6.4, §13.1), or
   * null: its `delivered` counts only with a proof by one of the recipient's servers that verifies and
   * matches this server's copy (byte-identical to its own; decision 33).
   */
  private async peerProof(peer: string, row: DeliveryRow, want: ReceiptExpectation): Promise<DeliveryReceipt | null> {
    // Not asked while it is down or not answering (its delivery calls time out or get 5xx): the attempt would
    // wait for a redial, or a call timeout, before calling the recipient.
    if (this.deps.peers.down(peer) || this.deps.trouble?.get(peer)?.notAnswering) return null;
    try {
      const answer = await this.deps.peers.call(peer, 'GetDmDeliveryStatus', { messageKey: row.outgoingKey });
      if (!('delivered' in answer) || !answer.delivered) return null;
      const servers = await proofSigners(this.deps.directory, row.recipientLogin);
      const checked = await checkReceipt(
        answer.proof,
        servers ? Object.assign({}, want, { serverLogins: servers }) : want,
        this.deps,
      );
      if ('receipt' in checked) return checked.receipt;
      this.deps.log.warn('peer says delivered without a valid proof', {
        peer,
        key: row.outgoingKey,
        err: `BAD_RECEIPT: ${checked.problem}`,
      });
      return null;
    } catch (err) {
      // The peer's silence never blocks our own attempt.
      this.deps.log.debug('peer status check failed', { peer, err: String(err) });
      return null;
    }
  }

  private async finish(row: DeliveryRow, update: DeliveryUpdate): Promise<void> {
    const ok = await this.deps.store.delivery.finishDelivery(
      row.outgoingKey,
      row.rowVersion,
      update,
      this.deps.clock.now(),
    );
    if (!ok) return; // a newer revision or another path changed the row meanwhile
    const extra = update.state === 'accepted' && update.attempt === row.attempt;
    this.attempts.inc({ outcome: update.state === 'accepted' ? (extra ? 'extra' : 'retry') : update.state });
    if (update.state !== row.state)
      this.notify(row.senderLogin, row.baseKey, row.outgoingKey, update.state, update.proof ?? null);
  }

  /**
   * DmDeliveryStateChanged to the sender's sessions on this server's every process (docs/protocol.md §6.7),
   * with the delivery's proof when there is one (§13.1).
   */
  notify(
    senderLogin: string,
    baseKey: string,
    outgoingKey: string,
    deliveryState: DeliveryState,
    proof: DeliveryReceipt | null = null,
  ): void {
    const event: DeliveryStateChangedEvent = { baseKey, outgoingKey, deliveryState };
    if (proof) event.deliveryProof = proof;
    this.deps.fanout.sendToUser(senderLogin, eventFrame('DmDeliveryStateChanged', event));
  }

  /**
   * A peer server showed life: its due-later rows are attempted now (an extra attempt, never past the
   * hour), in the background. A failure loses only that early attempt; the regular schedule still runs.
   */
  peerAlive(serverLogin: string): void {
    if (this.closed) return;
    const running = [...this.attemptsRunning];
    this.deps.background.run('peer wake-up', { peer: serverLogin }, () => this.wake(serverLogin, running));
  }

  /**
   * Makes the peer's rows due now, then once more after the attempts that were running as it came back: such
   * an attempt's row was due already, so the first pass left it alone, and when its call had failed just
   * before the return, the attempt then scheduled the row's next regular offset, up to 25 min later.
   */
  private async wake(serverLogin: string, running: Promise<void>[]): Promise<void> {
    const { clock, store } = this.deps;
    // A row in its first attempt (or in a worker's attempt of another process) is woken too: its lease
    // keeps workers off it until that attempt ends, and if the attempt fails the row is then due at once.
    const pass = async (): Promise<void> => {
      const woken = await store.delivery.wakeDeliveriesFor(serverLogin, clock.now());
      if (woken === 0) return;
      this.deps.log.info('peer back: attempting its rows now', { peer: serverLogin, rows: woken });
      this.scan();
    };
    await pass();
    if (running.length === 0) return;
    await Promise.allSettled(running);
    await pass();
  }
}
