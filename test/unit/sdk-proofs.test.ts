/**
 * The SDK's checks of delivery proofs and read receipts (docs/protocol.md §13.1, decisions 36–38), with
 * receipts signed in the test. A stand-in server (like test/unit/client.test.ts's) stores what alice sends
 * and hands back whatever proof the test made, so every way a proof can be wrong is reachable.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import type { Identity } from '../../src/client/index.js';
import { ShineClient, ShineClientError, createIdentity, makeProfile, receiptPair } from '../../src/client/index.js';
import { fromBase64, toBase64 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import { copyFieldsOf, decodeContainer } from '../../src/protocol/container.js';
import type { ServerDescriptor, UserProfile } from '../../src/protocol/identity.js';
import { signDescriptor } from '../../src/protocol/identity.js';
import type { HistoryItem } from '../../src/protocol/ops.js';
import type { DeliveryReceipt, UnsignedReceipt } from '../../src/protocol/receipt.js';
import { containerSha256B64, signReceipt } from '../../src/protocol/receipt.js';
import type { ServerKey } from '../../src/server/keys.js';
import { keyFromSeed } from '../../src/server/keys.js';

const seedB1 = Uint8Array.from({ length: 32 }, (_, i) => i + 1);
const seedX = Uint8Array.from({ length: 32 }, (_, i) => i + 2);
const keyB1 = keyFromSeed(seedB1);
const keyX = keyFromSeed(seedX);
const descriptorOf = (serverLogin: string, seed: Uint8Array): ServerDescriptor =>
  signDescriptor(
    { serverLogin, wsUrl: `ws://${serverLogin}.test/ws`, signKeyB64: keyFromSeed(seed).publicKeyB64 },
    seed,
  );

/** What the stand-in signs for a stored pair: the test changes the fields, the key, or drops the proof. */
interface ProofPlan {
  change?: (r: UnsignedReceipt) => UnsignedReceipt;
  key?: ServerKey;
  /** Sent as the proof instead of a signed receipt. */
  raw?: unknown;
}

interface Stand {
  url: string;
  wss: WebSocketServer;
  profiles: Map<string, UserProfile>;
  descriptors: Map<string, ServerDescriptor>;
  plan: ProofPlan;
  items: HistoryItem[];
  /** The proof last signed, as the stand-in stored it. */
  lastProof: unknown;
  emit(op: string, payload: object): void;
}

function proofFor(incoming: Container, plan: ProofPlan): unknown {
  if ('raw' in plan) return plan.raw;
  const fields: UnsignedReceipt = {
    serverLogin: 'srv-b1',
    messageKey: `${incoming.fromLogin}|${incoming.toLogin}|${incoming.timeMs}|${incoming.nonce}|1`,
    revisionTimeMs: incoming.revisionTimeMs,
    reencryptedAtMs: incoming.reencryptedAtMs,
    storedAtMs: 1_700_000_000_500,
    containerSha256B64: containerSha256B64(incoming.bytes),
  };
  return signReceipt(plan.change ? plan.change(fields) : fields, (plan.key ?? keyB1).sign);
}

function standIn(): Promise<Stand> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  const stand: Stand = {
    url: '',
    wss,
    profiles: new Map(),
    descriptors: new Map(),
    plan: {},
    items: [],
    lastProof: null,
    emit: (op, payload) => {
      for (const s of wss.clients) s.send(JSON.stringify({ op, event: true, status: 200, payload }));
    },
  };
  const answers: Record<string, (p: Record<string, unknown>) => object | { error: [number, string] }> = {
    AuthChallenge: () => ({ serverLogin: 'srv-a1', challengeB64: 'AAAA', expiresAtMs: Date.now() + 60_000 }),
    AuthLogin: (p) => ({ login: p.login, deviceId: p.deviceId, sessionId: 's1' }),
    GetUserProfile: (p) => {
      const profile = stand.profiles.get(String(p.login));
      return profile ? { profile } : { error: [404, 'USER_NOT_FOUND'] };
    },
    GetServerDescriptor: (p) => {
      const descriptor = stand.descriptors.get(String(p.serverLogin));
      return descriptor ? { descriptor } : { error: [404, 'SERVER_NOT_FOUND'] };
    },
    SendMessagePair: (p) => {
      const incoming = decodeContainer(fromBase64(String(p.incomingBlobB64))!);
      const outgoing = decodeContainer(fromBase64(String(p.outgoingBlobB64))!);
      const fields = copyFieldsOf(outgoing);
      stand.lastProof = proofFor(incoming, stand.plan);
      stand.items = stand.items.filter((i) => i.messageKey !== fields.messageKey);
      stand.items.push({
        ...fields,
        createdAtMs: outgoing.timeMs,
        readAtMs: null,
        deliveryState: 'delivered',
        blobB64: String(p.outgoingBlobB64),
        deliveryProof: stand.lastProof as DeliveryReceipt,
      });
      return {
        messageKey: fields.messageKey,
        baseKey: fields.baseKey,
        incomingKey: fields.messageKey.replace(/\|2$/, '|1'),
        outgoingKey: fields.messageKey,
        deliveryState: 'delivered',
        deliveredWsSessions: 0,
        deliveredWebPushSessions: 0,
      };
    },
    // The real cursor rule (docs/protocol.md §5.2): newest first, strictly before (timeMs, messageKey).
    GetDirectMessages: (p) => {
      const beforeTimeMs = Number(p.beforeTimeMs ?? 0);
      const beforeKey = String(p.beforeMessageKey ?? '');
      const sorted = [...stand.items].sort(
        (a, b) => b.timeMs - a.timeMs || (a.messageKey < b.messageKey ? 1 : a.messageKey > b.messageKey ? -1 : 0),
      );
      const after = sorted.filter(
        (i) => beforeTimeMs === 0 || i.timeMs < beforeTimeMs || (i.timeMs === beforeTimeMs && i.messageKey < beforeKey),
      );
      const items = after.slice(0, Number(p.limit ?? 50));
      const last = items.at(-1);
      return {
        items,
        hasMore: after.length > items.length,
        nextBeforeTimeMs: last?.timeMs ?? 0,
        nextBeforeMessageKey: last?.messageKey ?? '',
      };
    },
  };
  wss.on('connection', (socket) => {
    socket.on('message', (data) => {
      const req = JSON.parse(String(data)) as { op: string; requestId: string; payload: Record<string, unknown> };
      const out = answers[req.op]?.(req.payload) ?? { error: [404, 'UNKNOWN_OP'] };
      const frame =
        'error' in out && Array.isArray(out.error)
          ? { status: out.error[0], ok: false, error: { code: out.error[1], message: String(out.error[1]) } }
          : { status: 200, ok: true, payload: out };
      socket.send(JSON.stringify({ op: req.op, requestId: req.requestId, ...frame }));
    });
  });
  return new Promise((resolve) =>
    wss.on('listening', () =>
      resolve(Object.assign(stand, { url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/ws` })),
    ),
  );
}

describe('SDK: delivery proofs and read receipts', () => {
  let stand: Stand;
  let alice: Identity;
  let bob: Identity;
  const clients: ShineClient[] = [];

  async function device(who: Identity = alice): Promise<ShineClient> {
    const c = await ShineClient.connect(stand.url, { WebSocket });
    clients.push(c);
    await c.login(who, `dev${clients.length}`);
    return c;
  }

  before(async () => {
    alice = createIdentity('alice');
    bob = createIdentity('bob');
    stand = await standIn();
  });
  beforeEach(() => {
    stand.plan = {};
    stand.items = [];
    stand.profiles.set('alice', makeProfile(alice, ['srv-a1'], 1, 1));
    stand.profiles.set('bob', makeProfile(bob, ['srv-b1', 'srv-b2'], 1, 1));
    stand.descriptors.set('srv-b1', descriptorOf('srv-b1', seedB1));
    stand.descriptors.set('srv-x', descriptorOf('srv-x', seedX));
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await new Promise<void>((resolve) => stand.wss.close(() => resolve()));
  });

  /** Sends one text and returns the sender's own verdict and that of alice's other device (no copy). */
  async function sendAndCheck(plan: ProofPlan) {
    stand.plan = plan;
    const phone = await device();
    const laptop = await device();
    const sent = await phone.sendText('bob', 'hello bob');
    const own = await phone.checkSent(sent);
    const [item] = (await laptop.history('bob')).items;
    assert.ok(item);
    assert.equal(item.text, 'hello bob');
    return { sent, own, other: item, phone };
  }

  it('a valid proof verifies on the sending device (hash compared) and on another device (hash not comparable)', async () => {
    const { own, other, phone } = await sendAndCheck({});
    assert.deepEqual(
      { verified: own.verified, why: own.whyUnverified, hash: own.hashChecked, server: own.proof?.serverLogin },
      { verified: true, why: null, hash: true, server: 'srv-b1' },
    );
    assert.equal(own.proof?.storedAtMs, 1_700_000_000_500);
    assert.deepEqual([other.verified, other.whyUnverified, other.hashChecked], [true, null, false]);
    // The sender's own history compares the hash too: it built the pair.
    const [mine] = (await phone.history('bob')).items;
    assert.deepEqual([mine?.verified, mine?.hashChecked], [true, true]);
  });

  it('a proof signed by a server that is not one of the recipient’s is not verified', async () => {
    const { own, other } = await sendAndCheck({ change: (r) => ({ ...r, serverLogin: 'srv-x' }), key: keyX });
    assert.equal(own.verified, false);
    assert.equal(own.whyUnverified, "it is signed by srv-x, which is not one of bob's servers");
    assert.equal(own.proof?.serverLogin, 'srv-x');
    assert.equal(other.verified, false);
  });

  it('a proof naming another message is not verified', async () => {
    const { own, other } = await sendAndCheck({
      change: (r) => ({ ...r, messageKey: r.messageKey.replace(/1$/, '2') }),
    });
    assert.deepEqual([own.verified, own.whyUnverified], [false, 'it names another message']);
    assert.deepEqual([other.verified, other.whyUnverified], [false, 'it names another message']);
  });

  it('a proof for another revision is not verified', async () => {
    const { own, other } = await sendAndCheck({ change: (r) => ({ ...r, revisionTimeMs: r.revisionTimeMs + 1 }) });
    assert.deepEqual([own.verified, own.whyUnverified], [false, 'it is for another revision of this message']);
    assert.equal(other.verified, false);
  });

  it('a wrong hash fails on the device that has the copy; elsewhere it cannot be compared', async () => {
    const { own, other } = await sendAndCheck({
      change: (r) => ({ ...r, containerSha256B64: toBase64(new Uint8Array(32)) }),
    });
    assert.deepEqual([own.verified, own.whyUnverified], [false, 'srv-b1 stored other bytes than this device sent']);
    assert.deepEqual([other.verified, other.hashChecked], [true, false]);
  });

  it('a bad signature is not verified', async () => {
    const { own, other } = await sendAndCheck({ key: keyX });
    assert.deepEqual([own.verified, own.whyUnverified], [false, "its signature does not match srv-b1's key"]);
    assert.equal(other.verified, false);
  });

  it('a descriptor with a bad signature, or none, is not used (and not cached)', async () => {
    stand.descriptors.set('srv-b1', { ...descriptorOf('srv-b1', seedB1), wsUrl: 'ws://elsewhere.test/ws' });
    const { own, phone } = await sendAndCheck({});
    assert.deepEqual(
      [own.verified, own.whyUnverified],
      [false, 'the key of srv-b1 could not be checked (descriptor of srv-b1 does not verify)'],
    );
    await assert.rejects(phone.getServerDescriptor('srv-b1'), (err: unknown) => {
      assert.ok(err instanceof ShineClientError);
      assert.equal(err.code, 'BAD_PROFILE');
      return true;
    });
    // A descriptor of another server under this name is refused as well.
    stand.descriptors.set('srv-b1', descriptorOf('srv-x', seedX));
    await assert.rejects(phone.getServerDescriptor('srv-b1'), /does not verify/);
    stand.descriptors.delete('srv-b1');
    await assert.rejects(phone.getServerDescriptor('srv-b1'), (err: unknown) => {
      assert.ok(err instanceof ShineClientError);
      assert.deepEqual([err.code, err.status], ['SERVER_NOT_FOUND', 404]);
      return true;
    });
    // The real descriptor, once there, is fetched again and the same proof now verifies.
    stand.descriptors.set('srv-b1', descriptorOf('srv-b1', seedB1));
    const [item] = (await phone.history('bob')).items;
    assert.deepEqual([item?.verified, item?.whyUnverified], [true, null]);
  });

  it('no proof, or a malformed one, is not verified', async () => {
    const none = await sendAndCheck({ raw: null });
    assert.deepEqual(
      [none.own.verified, none.own.whyUnverified, none.own.proof],
      [false, 'no proof came with it', null],
    );
    const bad = await sendAndCheck({ raw: { serverLogin: 'srv-b1' } });
    assert.equal(bad.own.verified, false);
    assert.match(bad.own.whyUnverified ?? '', /^the proof is malformed \(/);
  });

  it('DmDeliveryStateChanged: the proof is checked against the revision this device has seen', async () => {
    const phone = await device();
    const sent = await phone.sendText('bob', 'live');
    const proof = stand.lastProof as DeliveryReceipt;
    const event = { baseKey: sent.baseKey, outgoingKey: sent.outgoingKey, deliveryState: 'delivered' as const };
    const ok = await phone.checkDeliveryEvent({ ...event, deliveryProof: proof });
    assert.deepEqual([ok.verified, ok.hashChecked, ok.baseKey], [true, true, sent.baseKey]);
    // After an edit this device expects the new revision: the old proof does not prove it.
    const edited = await phone.editText('bob', sent, 'live, edited');
    assert.ok(edited.revisionTimeMs > 0);
    const stale = await phone.checkDeliveryEvent({ ...event, deliveryProof: proof });
    assert.deepEqual([stale.verified, stale.whyUnverified], [false, 'it is for another revision of this message']);
    const fresh = await phone.checkDeliveryEvent({ ...event, deliveryProof: stand.lastProof as DeliveryReceipt });
    assert.equal(fresh.verified, true);
    // A device that never saw the message cannot say which revision the proof must name.
    const laptop = await device();
    const unseen = await laptop.checkDeliveryEvent({ ...event, deliveryProof: proof });
    assert.deepEqual([unseen.verified, unseen.whyUnverified], [false, 'this device has not seen that message']);
    const failed = await phone.checkDeliveryEvent({ ...event, deliveryState: 'failed' });
    assert.deepEqual([failed.verified, failed.whyUnverified], [false, 'it is failed, not delivered']);
  });

  it('read receipts: verified by the reader’s profile key; one signed by another key is refused', async () => {
    const phone = await device();
    const sent = await phone.sendText('bob', 'read me');
    const eventOf = (reader: Identity) => {
      const pair = receiptPair(reader, sent, 1_700_000_001_000);
      const c = pair.incoming;
      return { ...copyFieldsOf(c), storedAtMs: 1, blobB64: pair.incomingBlobB64 };
    };
    const opened = await phone.decryptEvent(eventOf(bob));
    assert.equal(opened.kind, 'receipt');
    assert.deepEqual([opened.verified, opened.whyUnverified, opened.signedBy], [true, null, 'bob']);
    // Someone else's key under bob's login: the signature does not verify against bob's profile.
    const forger = createIdentity('bob');
    await assert.rejects(phone.decryptEvent(eventOf(forger)), (err: unknown) => {
      assert.ok(err instanceof ShineClientError);
      assert.equal(err.code, 'BAD_SIGNATURE');
      return true;
    });
  });
});
