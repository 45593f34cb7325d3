/**
 * The SDK's `verified` against real servers (docs/protocol.md §13.1, decisions 36–38): alice on alpha,
 * bob on beta. beta signs what it stored, alpha keeps and serves the receipt, and alice's SDK checks it
 * with beta's key from GetServerDescriptor.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import type { DeliveryStateChangedEvent, DirectMessageEvent, Identity } from '../../src/client/index.js';
import {
  ShineClient,
  ShineClientError,
  createIdentity,
  fetchServerDescriptor,
  makeProfile,
} from '../../src/client/index.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { waitUntil } from '../helpers/wait.js';

// Needs the server side of §13.1 (receipts from ReceiveIncomingMessage, deliveryProof in history and
// events, GetServerDescriptor), which lands with branch `receipts`; passes against it (sqlite and PG).

describe('SDK: verified deliveries across two servers', () => {
  let net: TestNetwork;
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');
  const clients: ShineClient[] = [];

  async function session(i: number, identity: Identity, deviceId: string): Promise<ShineClient> {
    const client = await ShineClient.connect(net.servers[i]!.wsUrl, { WebSocket });
    clients.push(client);
    await client.login(identity, deviceId);
    return client;
  }

  before(async () => {
    // A retry one second after a failed attempt: a delivery after beta's restart comes as an event.
    const fast = { retryScheduleMs: '0,1000,2000,600000', workerTickMs: 50 };
    net = await startNetwork({
      federate: true,
      servers: [
        { serverLogin: 'alpha', ...fast },
        { serverLogin: 'beta', ...fast },
      ],
    });
    for (const [i, id, server] of [
      [0, alice, 'alpha'],
      [1, bob, 'beta'],
    ] as const) {
      const reg = await ShineClient.connect(net.servers[i]!.wsUrl, { WebSocket });
      await reg.register(makeProfile(id, [server], 1, Date.now()));
      await reg.close();
    }
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await net?.close();
  });

  it('alice’s history shows verified: true, with beta’s receipt; the sending device also compared the hash', async () => {
    const phone = await session(0, alice, 'alice-phone');
    const laptop = await session(0, alice, 'alice-laptop');
    const sent = await phone.sendText('bob', 'prove it');
    assert.equal(sent.deliveryState, 'delivered');

    const own = await phone.checkSent(sent);
    assert.deepEqual([own.verified, own.whyUnverified, own.hashChecked], [true, null, true]);
    assert.equal(own.proof?.serverLogin, 'beta');
    assert.equal(own.proof?.messageKey, sent.incomingKey);

    const [item] = (await laptop.history('bob')).items;
    assert.equal(item?.text, 'prove it');
    assert.deepEqual([item?.verified, item?.whyUnverified, item?.hashChecked], [true, null, false]);
    assert.deepEqual(item?.proof, own.proof);

    // The key alpha pinned for beta is beta's own.
    const pinned = await laptop.getServerDescriptor('beta');
    const real = await fetchServerDescriptor(net.servers[1]!.wsUrl);
    assert.equal(pinned.signKeyB64, real.signKeyB64);
    await assert.rejects(laptop.getServerDescriptor('nowhere'), (err: unknown) => {
      assert.ok(err instanceof ShineClientError);
      assert.deepEqual([err.code, err.status], ['SERVER_NOT_FOUND', 404]);
      return true;
    });

    // An edit is a new revision: its proof names it, and history checks it again.
    await phone.editText('bob', sent, 'prove it, edited');
    const [edited] = (await laptop.history('bob')).items;
    assert.equal(edited?.text, 'prove it, edited');
    assert.equal(edited?.verified, true);
    assert.ok((edited?.proof?.revisionTimeMs ?? 0) > 0);
  });

  it('a local delivery carries alpha’s own receipt, and it verifies too', async () => {
    const carol = createIdentity('carol');
    const reg = await ShineClient.connect(net.servers[0]!.wsUrl, { WebSocket });
    await reg.register(makeProfile(carol, ['alpha'], 1, Date.now()));
    await reg.close();
    const phone = await session(0, alice, 'alice-phone3');
    const sent = await phone.sendText('carol', 'next door');
    assert.equal(sent.deliveryState, 'delivered');
    const own = await phone.checkSent(sent);
    assert.deepEqual([own.verified, own.whyUnverified, own.proof?.serverLogin], [true, null, 'alpha']);
  });

  it('a delivery after beta comes back arrives live with a proof that verifies; bob’s read receipt is signed by bob', async () => {
    const phone = await session(0, alice, 'alice-phone2');
    const events: DeliveryStateChangedEvent[] = [];
    const receipts: DirectMessageEvent[] = [];
    phone.on('DmDeliveryStateChanged', (ev) => events.push(ev));
    phone.on('DirectMessage', (ev) => ev.messageType === 3 && receipts.push(ev));

    await net.stop(1);
    const sent = await phone.sendText('bob', 'while you were away');
    assert.equal(sent.deliveryState, 'accepted');
    const pending = await phone.checkSent(sent);
    assert.deepEqual([pending.verified, pending.whyUnverified], [false, 'it is accepted, not delivered']);
    await net.start(1);

    await waitUntil(() => events.some((e) => e.outgoingKey === sent.outgoingKey && e.deliveryState === 'delivered'));
    const ev = events.find((e) => e.outgoingKey === sent.outgoingKey && e.deliveryState === 'delivered')!;
    const checked = await phone.checkDeliveryEvent(ev);
    assert.deepEqual([checked.verified, checked.whyUnverified, checked.hashChecked], [true, null, true]);
    assert.equal(checked.proof?.serverLogin, 'beta');

    const bobPhone = await session(1, bob, 'bob-phone');
    const [incoming] = (await bobPhone.history('alice')).items.filter((i) => i.text === 'while you were away');
    assert.ok(incoming);
    assert.equal(incoming.verified, true, 'bob’s copy is signed by alice');
    await bobPhone.markRead({ ...incoming, nonce: Number(incoming.baseKey.split('|')[3]) });
    await waitUntil(() => receipts.length > 0);
    const read = await phone.decryptEvent(receipts[0]!);
    assert.equal(read.kind, 'receipt');
    assert.deepEqual([read.verified, read.signedBy], [true, 'bob']);
  });
});
