/**
 * Call signalling (docs/protocol.md §5.6): invites and signals go to the callee's sessions here, a `call` push to
 * its devices without one, and to its other access servers through ReceiveCallSignal. Nothing of a
 * call is stored, and nothing is retried: a call that cannot ring now does not ring.
 */
import { base64DecodedLength, fromBase64 } from '../../protocol/bytes.js';
import { eventFrame } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import type { CallDelivery, CallInviteEvent, CallKind, CallSignalEvent, OpPayload } from '../../protocol/ops.js';
import { MAX_CALL_PAYLOAD } from '../../protocol/ops.js';
import type { Clock } from '../clock.js';
import { raceTimer } from '../clock.js';
import type { Config } from '../config/config.js';
import type { PeerCaller } from '../federation/peer-caller.js';
import type { Directory } from '../directory/service.js';
import type { Logger } from '../log.js';
import type { Fanout } from '../cluster/fanout.js';
import type { KeyedLimiter, LimiterFactory } from '../cluster/limits.js';
import type { Session, UserSession } from '../sessions.js';

/** Wakes a callee's devices that have no open session (docs/protocol.md §5.5); returns how many pushes were queued. */
export interface CallPush {
  notifyCall(owner: string, fromLogin: string, callId: string): number | Promise<number>;
}

export interface CallDeps {
  config: Config;
  clock: Clock;
  /** This server's sessions on every process. */
  fanout: Fanout;
  directory: Directory;
  peers: PeerCaller;
  push: CallPush;
  log: Logger;
  /** The server calling a server op: the authenticated one (or the payload's claim with s2sAuth off). */
  sourceOf(session: Session, sourceServerLogin: string | undefined): string | null;
  /** The per-login limits, shared by the server's processes when it has Redis (docs/protocol.md §9.2). */
  limits: LimiterFactory;
}

/** docs/protocol.md §5.6: per sending login, 30 invites and 600 signals a minute. */
export const CALL_LIMITS = {
  invite: { perSecond: 30 / 60, burst: 30 },
  signal: { perSecond: 600 / 60, burst: 600 },
} as const;

/** Signals a caller's own other sessions see too, so its other devices stop ringing. */
const ECHOED: ReadonlySet<CallKind> = new Set<CallKind>(['answer', 'reject', 'hangup']);

/** One call message on its way: who sends what to whom. */
interface CallMessage {
  fromLogin: string;
  toLogin: string;
  callId: string;
  kind: CallKind;
  payloadB64: string;
}

export class CallService {
  private readonly invites: KeyedLimiter;
  private readonly signals: KeyedLimiter;

  constructor(private readonly deps: CallDeps) {
    this.invites = deps.limits('call-invite', CALL_LIMITS.invite);
    this.signals = deps.limits('call-signal', CALL_LIMITS.signal);
  }

  /** CallInviteBroadcast from a client session. */
  async invite(p: OpPayload<'CallInviteBroadcast'>, session: UserSession): Promise<CallDelivery> {
    return this.send(Object.assign({}, p, { fromLogin: session.login, kind: 'invite' as const }), session);
  }

  /** CallSignal from a client session; its answer counts the callee's sessions only. */
  async signal(p: OpPayload<'CallSignal'>, session: UserSession): Promise<{ deliveredWsSessions: number }> {
    const { deliveredWsSessions } = await this.send(Object.assign({}, p, { fromLogin: session.login }), session);
    return { deliveredWsSessions };
  }

  /** ReceiveCallSignal: a call message from a server that serves its sender, for a user served here. */
  async receive(p: OpPayload<'ReceiveCallSignal'>, session: Session): Promise<CallDelivery> {
    const source = this.deps.sourceOf(session, p.sourceServerLogin);
    checkPayload(p.payloadB64);
    const { config, directory } = this.deps;
    const to = await directory.lookup(p.toLogin, { noImport: true });
    if (!to?.accessServers.includes(config.serverLogin)) {
      throw new ShineError('LOCAL_SERVER_NOT_ACCESS_SERVER', `this server is not an access server of ${p.toLogin}`);
    }
    // A server rings only for its own users, by the directory (a sender new here is imported).
    const from = await directory.lookup(p.fromLogin, {
      refreshAfterMs: config.profileRefreshMs,
      maxWaitMs: config.firstAttemptWaitMs / 2,
    });
    if (source === null || !from?.accessServers.includes(source)) {
      throw new ShineError('NOT_SENDER', `${source ?? 'the calling server'} is not an access server of ${p.fromLogin}`);
    }
    return this.ringHere(p);
  }

  /**
   * The checks of a client's call message, then delivery here and on the callee's other servers
   * within SHINE_FIRST_ATTEMPT_WAIT_MS; the counters add up the answers that came in time.
   */
  private async send(msg: CallMessage, session: Pick<Session, 'id'>): Promise<CallDelivery> {
    checkPayload(msg.payloadB64);
    if (msg.toLogin === msg.fromLogin) throw new ShineError('BAD_FIELDS', 'a user cannot call itself');
    const limiter = msg.kind === 'invite' ? this.invites : this.signals;
    if (!(await limiter.take(msg.fromLogin))) {
      throw new ShineError('RATE_LIMITED', msg.kind === 'invite' ? 'too many call invites' : 'too many call signals');
    }
    const { config, clock, directory } = this.deps;
    const deadline = clock.now() + config.firstAttemptWaitMs;
    const to = await directory.lookup(msg.toLogin, {
      refreshAfterMs: config.profileRefreshMs,
      maxWaitMs: config.firstAttemptWaitMs / 2,
    });
    if (!to) throw new ShineError('USER_NOT_FOUND', `unknown callee ${msg.toLogin}`);
    if (ECHOED.has(msg.kind)) this.echoToOwnDevices(msg, session);
    const [here, remote] = await Promise.all([
      to.accessServers.includes(config.serverLogin) ? this.ringHere(msg) : null,
      this.ringElsewhere(msg, to.accessServers, Math.max(0, deadline - clock.now())),
    ]);
    // Another server's answer is only trusted as far as it makes sense: a count, or nothing.
    return [here, ...remote].reduce<CallDelivery>(
      (sum, d) => ({
        deliveredWsSessions: sum.deliveredWsSessions + count(d?.deliveredWsSessions),
        deliveredWebPushSessions: sum.deliveredWebPushSessions + count(d?.deliveredWebPushSessions),
      }),
      { deliveredWsSessions: 0, deliveredWebPushSessions: 0 },
    );
  }

  /**
   * The sender's other sessions, here and on its other access server, get the signal with fromLogin =
   * itself. Not waited for: the answer counts the callee's sessions only.
   */
  private echoToOwnDevices(msg: CallMessage, session: Pick<Session, 'id'>): void {
    const own = Object.assign({}, msg, { toLogin: msg.fromLogin });
    this.deps.fanout.sendToUser(own.toLogin, callFrame(own), session.id);
    const { directory, config, log } = this.deps;
    void directory
      .lookup(msg.fromLogin, { noImport: true })
      .then((me) => this.ringElsewhere(own, me?.accessServers ?? [], config.firstAttemptWaitMs))
      .catch((err: unknown) => log.debug('call echo to own devices failed', { err: String(err) }));
  }

  /** Delivers to toLogin's sessions on this server (except one) and, for an invite, to its devices by push. */
  private async ringHere(msg: CallMessage, exceptSessionId?: string): Promise<CallDelivery> {
    const deliveredWsSessions = await this.ringSessions(msg, exceptSessionId);
    const { fromLogin, toLogin, callId, kind } = msg;
    const deliveredWebPushSessions =
      kind === 'invite' ? await this.deps.push.notifyCall(toLogin, fromLogin, callId) : 0;
    return { deliveredWsSessions, deliveredWebPushSessions };
  }

  /** The event to toLogin's sessions on every process of this server (except one); resolves with how many. */
  private ringSessions(msg: CallMessage, exceptSessionId?: string): Promise<number> {
    return this.deps.fanout.sendToUserCounted(msg.toLogin, callFrame(msg), exceptSessionId);
  }

  /** ReceiveCallSignal to every access server of toLogin but this one, in parallel; null for each that missed waitMs. */
  private ringElsewhere(
    msg: CallMessage,
    servers: readonly string[],
    waitMs: number,
  ): Promise<(CallDelivery | null)[]> {
    const { config, clock, peers, log } = this.deps;
    const payload = Object.assign({}, msg, { sourceServerLogin: config.serverLogin });
    return Promise.all(
      servers
        .filter((s) => s !== config.serverLogin)
        .map((server) => {
          // A server that is down (its last connection failed) is not waited for: the call still goes at the
          // redial, within its timeout (docs/protocol.md §5.6, decision 52).
          const down = peers.down(server);
          const call = peers.call(server, 'ReceiveCallSignal', payload);
          call.catch((err: unknown) => log.debug('call signal not delivered', { server, err: String(err) }));
          return down ? null : raceTimer(call, waitMs, clock);
        }),
    );
  }
}

const count = (n: unknown): number => (Number.isSafeInteger(n) && (n as number) >= 0 ? (n as number) : 0);

/** A payload is opaque, but must be base64 of at most 16 KiB (docs/protocol.md §5.6). */
function checkPayload(payloadB64: string): void {
  if (base64DecodedLength(payloadB64) > MAX_CALL_PAYLOAD) {
    throw new ShineError('TOO_LARGE', `a call payload is at most ${MAX_CALL_PAYLOAD} bytes`);
  }
  if (fromBase64(payloadB64) === null) throw new ShineError('BAD_FIELDS', 'payloadB64 is not base64');
}

/** CallInvite for an invite, CallSignal for every other kind. */
function callFrame({ fromLogin, callId, kind, payloadB64 }: CallMessage) {
  if (kind === 'invite') return eventFrame('CallInvite', { fromLogin, callId, payloadB64 } satisfies CallInviteEvent);
  return eventFrame('CallSignal', { fromLogin, callId, kind, payloadB64 } satisfies CallSignalEvent);
}
