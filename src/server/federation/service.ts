/** Server operations of docs/protocol.md §5.1 and §5.4: ServerAuth and receiving copies from other servers. */
import { baseKeyOf, outgoingKeyOf } from '../../protocol/container.js';
import { ShineError } from '../../protocol/errors.js';
import { s2sSigningText, verifyText } from '../../protocol/identity.js';
import type { DeliveryStatusItem, OpAnswer, PairAnswer } from '../../protocol/ops.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config/config.js';
import type { DeliveryEngine } from '../delivery/engine.js';
import type { Directory } from '../directory/service.js';
import type { DmService } from '../dm/service.js';
import { checkBlobSize, decodeBlob } from '../../protocol/blob.js';
import type { Logger } from '../log.js';
import type { Session } from '../sessions.js';
import type { CopyResult, Store } from '../store/types.js';
import type { Container } from '../../protocol/container.js';
import type { DeliveryReceipt } from '../../protocol/receipt.js';
import { ownReceipt, storedReceipt } from '../delivery/receipts.js';
import type { ServerKey } from '../keys.js';

export interface FederationDeps {
  config: Config;
  clock: Clock;
  store: Pick<Store, 'delivery' | 'messages' | 'nonces'>;
  directory: Directory;
  dm: DmService;
  delivery: DeliveryEngine;
  verifier: SignatureVerifier;
  log: Logger;
  /** Signs this server's delivery receipts (docs/protocol.md §13.1). */
  serverKey: Pick<ServerKey, 'sign'>;
  /** Outgoing connections to peers, told when a peer authenticates here (it is up again). */
  peers?: { reachable(serverLogin: string): void };
}

const S2S_WINDOW_MS = 5 * 60_000;

export interface ServerAuthPayload {
  serverLogin: string;
  targetServerLogin: string;
  timestampMs: number;
  nonceB64: string;
  signatureB64: string;
}

export class FederationService {
  constructor(private readonly deps: FederationDeps) {}

  /** Server ops are meaningless on a server without a name of its own. */
  private requireConfigured(): void {
    if (this.deps.config.serverLogin === 'local') {
      throw new ShineError(
        'LOCAL_SERVER_NOT_CONFIGURED',
        'this server runs as `local`: set SHINE_SERVER_LOGIN to federate',
      );
    }
  }

  async serverAuth(
    p: ServerAuthPayload,
    session: Session,
  ): Promise<{ serverLogin: string; targetServerLogin: string }> {
    this.requireConfigured();
    const { config, clock, directory, store, verifier, delivery } = this.deps;
    const now = clock.now();
    const fail = (why: string): never => {
      throw new ShineError('AUTH_FAILED', why);
    };
    if (p.targetServerLogin !== config.serverLogin) fail('ServerAuth is for another server');
    if (Math.abs(now - p.timestampMs) > S2S_WINDOW_MS) fail('timestamp outside the 5 minute window');
    const known = await directory.lookupServer(p.serverLogin);
    if (!known) fail('unknown server');
    const text = s2sSigningText({
      from: p.serverLogin,
      to: p.targetServerLogin,
      timestampMs: p.timestampMs,
      nonceB64: p.nonceB64,
    });
    if (!verifyText(text, p.signatureB64, known!.descriptor.signKeyB64, verifier)) fail('bad signature');
    if (!(await store.nonces.rememberS2sNonce(p.serverLogin, p.nonceB64, now, now - 2 * S2S_WINDOW_MS)))
      fail('nonce replayed');
    session.serverLogin = p.serverLogin;
    this.deps.peers?.reachable(p.serverLogin);
    delivery.peerAlive(p.serverLogin);
    return { serverLogin: p.serverLogin, targetServerLogin: config.serverLogin };
  }

  /**
   * The calling server: the authenticated one, or with s2sAuth off the payload's claim (docs/protocol.md §5.1).
   * A payload that names another server than the authenticated one is refused.
   */
  sourceOf(session: Session, sourceServerLogin: string | undefined): string | null {
    if (this.deps.config.s2sAuth === 'off') return sourceServerLogin ?? session.serverLogin;
    if (!session.serverLogin) throw new ShineError('NOT_AUTHENTICATED', 'ServerAuth first');
    if (sourceServerLogin !== undefined && sourceServerLogin !== session.serverLogin) {
      throw new ShineError('SOURCE_MISMATCH', 'sourceServerLogin is not the authenticated server');
    }
    return session.serverLogin;
  }

  async receiveIncoming(
    p: { incomingBlobB64?: string | undefined; sourceServerLogin?: string | undefined },
    session: Session,
  ): Promise<OpAnswer<'ReceiveIncomingMessage'>> {
    const source = this.sourceOf(session, p.sourceServerLogin);
    const { config, clock, store, directory, dm } = this.deps;
    if (!p.incomingBlobB64) throw new ShineError('BAD_FIELDS', 'incomingBlobB64 is required');
    const copy = decodeBlob(p.incomingBlobB64);
    if (copy.messageType % 2 !== 1)
      throw new ShineError('BAD_PAIR', 'ReceiveIncomingMessage takes an incoming (odd) copy');
    // A recipient this server does not know is not one of its users (docs/protocol.md §5.4: else 403).
    const to = await directory.lookup(copy.toLogin, { noImport: true });
    if (!to?.accessServers.includes(config.serverLogin)) {
      throw new ShineError('LOCAL_SERVER_NOT_ACCESS_SERVER', `this server is not an access server of ${copy.toLogin}`);
    }
    await dm.checkSigned(copy);
    // From the recipient's other access server (its user sent it there), the copy is there already —
    // taken only from an authenticated server session, never from a claim (s2sAuth off).
    const authenticated = session.serverLogin !== null && session.serverLogin === source;
    const synced = authenticated && source !== config.serverLogin && to.accessServers.includes(source);
    const result = await store.messages.storeCopy({
      copy,
      nowMs: clock.now(),
      outbox: { owners: new Map([[copy.toLogin, synced]]) },
    });
    const receipt = await this.receiptOf(copy, result);
    return {
      messageKey: result.messageKey,
      baseKey: baseKeyOf(copy),
      deliveredWsSessions: await dm.publishCounted(copy, result),
      deliveredWebPushSessions: await dm.pushFor(copy, result),
      ...(receipt ? { receipt } : {}),
    };
  }

  /**
   * The receipt of the copy as it is stored now (docs/protocol.md §13.1, decision 32): the copy just
   * written; on a re-delivery the stored one (its revision, its bytes, when it was stored), which may be
   * a newer revision than the one sent and then proves nothing to its sender; none for a copy a
   * tombstone refused.
   */
  private async receiptOf(copy: Container, result: CopyResult): Promise<DeliveryReceipt | null> {
    if (result.outcome === 'inserted' || result.outcome === 'updated')
      return ownReceipt(
        this.deps,
        Object.assign({}, copy, { messageKey: result.messageKey, storedAtMs: result.storedAtMs }),
      );
    return result.outcome === 'unchanged' ? storedReceipt(this.deps, result.messageKey) : null;
  }

  /** The whole pair from the sender's other access server; this server runs its own delivery for it. */
  async receiveOutgoing(
    p: {
      incomingBlobB64?: string | undefined;
      outgoingBlobB64?: string | undefined;
      sourceServerLogin?: string | undefined;
    },
    session: Session,
  ): Promise<PairAnswer> {
    const source = this.sourceOf(session, p.sourceServerLogin);
    const { config, directory, dm, delivery } = this.deps;
    if (!p.incomingBlobB64 || !p.outgoingBlobB64)
      throw new ShineError('BAD_FIELDS', 'incomingBlobB64 and outgoingBlobB64 are required');
    // docs/protocol.md §5.2 order: sizes before decoding.
    checkBlobSize(p.incomingBlobB64);
    checkBlobSize(p.outgoingBlobB64);
    const type = decodeBlob(p.incomingBlobB64).messageType;
    // The caller first (docs/protocol.md §5.4: else 403 NOT_PEER): this server and the caller must be the sender's
    // two access servers (a sender new here is imported, from the servers its profile lists); only
    // then the pair's own checks.
    const from = decodeBlob(p.outgoingBlobB64).fromLogin;
    const senderServers = (await directory.lookup(from))?.accessServers ?? [];
    if (
      !source ||
      source === config.serverLogin ||
      !senderServers.includes(source) ||
      !senderServers.includes(config.serverLogin)
    ) {
      throw new ShineError('NOT_PEER', "only the sender's other access server forwards its pairs");
    }
    const op = type === 5 ? 'DeleteMessage' : type === 7 ? 'DeleteConversation' : 'SendMessagePair';
    const pair = await dm.checkPair(op, p, null);
    const stored = await dm.storeCheckedPair(pair, { from: source });
    const local = pair.recipientServers.includes(config.serverLogin);
    if (stored.fresh && !local && stored.routes.length > 0) {
      // Answered at once; this server's own first attempt runs on, and never forwards back.
      const outgoingKey = stored.result.outgoing.messageKey;
      // The sender's sessions here learn the outcome too (docs/protocol.md §6.7).
      const first = delivery.firstAttempt(pair.incoming, pair.outgoing, outgoingKey, null);
      delivery.reportLate(first.outcome, pair.outgoing.fromLogin, stored.answer.baseKey, outgoingKey);
    }
    return stored.answer;
  }

  /** GetDmDeliveryStatus, single or batch (docs/protocol.md §5.4), with the proof of a delivery (§13.1). Read-only. */
  async deliveryStatus(
    p: { messageKey?: string | undefined; messageKeys?: string[] | undefined; sourceServerLogin?: string | undefined },
    session: Session,
  ): Promise<OpAnswer<'GetDmDeliveryStatus'>> {
    this.sourceOf(session, p.sourceServerLogin);
    const messageKeys = p.messageKeys ?? (p.messageKey ? [p.messageKey] : null);
    if (messageKeys === null) throw new ShineError('EMPTY_MESSAGE_KEY', 'messageKey or messageKeys is required');
    // An incoming key is answered for its pair's outgoing key (a malformed one for none: '' has no row); a batch
    // is read in one statement.
    const rows = await this.deps.store.delivery.getDeliveries(messageKeys.map((k) => outgoingKeyOf(k) ?? ''));
    const items = messageKeys.map((messageKey, i): DeliveryStatusItem => {
      const row = rows[i] ?? null;
      const delivered = row?.state === 'delivered';
      return { messageKey, known: row !== null, delivered, ...(delivered && row.proof ? { proof: row.proof } : {}) };
    });
    return p.messageKeys !== undefined ? { items } : items[0]!;
  }
}
