/** The web client's chat model: the tick rules of docs/web-client.md and idempotent merging of events and pages. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChatMessage, Evidence } from '../../web/src/chat.js';
import {
  ChatLog,
  TICK_TEXT,
  deliveryEvidence,
  evidenceOf,
  explainTick,
  parseBaseKey,
  reportedRead,
  signedRead,
  tickOf,
} from '../../web/src/chat.js';

const mine = (over: Partial<ChatMessage> = {}): ChatMessage => ({
  baseKey: 'alice|bob|1000|7',
  fromLogin: 'alice',
  toLogin: 'bob',
  timeMs: 1000,
  nonce: 7,
  mine: true,
  text: 'hi',
  problem: null,
  revisionTimeMs: 0,
  deliveryState: 'accepted',
  readAtMs: null,
  delivery: null,
  read: null,
  ...over,
});

describe('ticks', () => {
  it('follow the delivery state, and a read receipt wins over any state', () => {
    assert.equal(tickOf(mine()), 'accepted');
    assert.equal(tickOf(mine({ deliveryState: 'delivered' })), 'delivered');
    assert.equal(tickOf(mine({ deliveryState: 'failed' })), 'failed');
    assert.equal(tickOf(mine({ deliveryState: 'failed', readAtMs: 5 })), 'read');
    assert.equal(tickOf(mine({ mine: false, deliveryState: null })), null);
  });

  it('have the accessible texts of the client contract', () => {
    assert.deepEqual(TICK_TEXT, {
      accepted: 'Sent',
      delivered: 'Delivered',
      read: 'Read',
      failed: 'Message not delivered',
    });
  });
});

describe('ChatLog', () => {
  it('parses a baseKey into its parts', () => {
    assert.deepEqual(parseBaseKey('alice|bob|1774700000123|123456789'), {
      fromLogin: 'alice',
      toLogin: 'bob',
      timeMs: 1774700000123,
      nonce: 123456789,
    });
  });

  it('keeps the newest revision, keeps the read time across an edit, and ignores replays', () => {
    const log = new ChatLog();
    assert.equal(log.upsert(mine()), true);
    assert.equal(log.upsert(mine()), false, 'the same event again changes nothing');
    assert.equal(log.markRead('alice|bob|1000|7', 50), true);
    assert.equal(log.upsert(mine({ text: 'hi!', revisionTimeMs: 2000 })), true);
    assert.equal(log.get('alice|bob|1000|7')?.readAtMs, 50);
    assert.equal(log.upsert(mine({ text: 'old' })), false, 'an older revision loses');
    assert.equal(log.get('alice|bob|1000|7')?.text, 'hi!');
  });

  it('never turns a terminal delivery state back to accepted from a stale page', () => {
    const log = new ChatLog();
    log.upsert(mine());
    assert.equal(log.setDeliveryState('alice|bob|1000|7', 'delivered'), true);
    assert.equal(log.upsert(mine({ deliveryState: 'accepted' })), false);
    assert.equal(tickOf(log.get('alice|bob|1000|7')!), 'delivered');
  });

  it('orders by time and removes one message or everything up to a time', () => {
    const log = new ChatLog();
    log.upsert(mine({ baseKey: 'alice|bob|3000|1', timeMs: 3000 }));
    log.upsert(mine({ baseKey: 'bob|alice|2000|1', timeMs: 2000, mine: false }));
    log.upsert(mine({ baseKey: 'alice|bob|1000|1', timeMs: 1000 }));
    assert.deepEqual(
      log.list().map((m) => m.timeMs),
      [1000, 2000, 3000],
    );
    const before = log.list();
    assert.equal(log.list(), before, 'the same array until something changes');
    assert.equal(log.remove('bob|alice|2000|1'), true);
    assert.equal(log.removeThrough(1000), true);
    assert.deepEqual(
      log.list().map((m) => m.timeMs),
      [3000],
    );
    assert.equal(log.removeThrough(1000), false);
  });
});

describe('verified ticks', () => {
  const key = 'alice|bob|1000|7';
  const time = (ms: number) => `t${ms}`;
  const proof = {
    serverLogin: 'srv-b1',
    messageKey: 'alice|bob|1000|7|1',
    revisionTimeMs: 0,
    reencryptedAtMs: 0,
    storedAtMs: 1203,
    containerSha256B64: '',
    signatureB64: '',
  };
  const signed: Evidence = deliveryEvidence({ verified: true, whyUnverified: null, proof, hashChecked: true });
  const unsigned: Evidence = deliveryEvidence({
    verified: false,
    whyUnverified: 'no proof came with it',
    proof: null,
    hashChecked: false,
  });

  it('explain a delivered tick: signed by the recipient’s server, unverified with the reason, or still checking', () => {
    const delivered = mine({ deliveryState: 'delivered' });
    assert.equal(
      explainTick({ ...delivered, delivery: signed }, time),
      "Signed by bob's server srv-b1 at t1203: it stored this exact message",
    );
    assert.equal(
      explainTick({ ...delivered, delivery: { ...signed, exact: false } }, time),
      "Signed by bob's server srv-b1 at t1203: it stored this message",
    );
    assert.equal(
      explainTick({ ...delivered, delivery: unsigned }, time),
      "Delivered, but no proof from bob's server could be checked: no proof came with it",
    );
    assert.equal(explainTick(delivered, time), "Delivered; checking the proof from bob's server…");
    assert.equal(explainTick(mine(), time), null, 'a sent tick has nothing to explain');
    assert.equal(explainTick(mine({ deliveryState: 'failed' }), time), null);
    assert.equal(evidenceOf({ ...delivered, delivery: signed }), signed);
    assert.equal(evidenceOf(mine()), undefined);
  });

  it('explain a read tick: signed by the reader, or only the server’s word (history)', () => {
    const read = mine({ deliveryState: 'delivered', readAtMs: 1500, delivery: signed });
    assert.equal(
      explainTick({ ...read, read: signedRead('bob', 1500) }, time),
      "Read by bob at t1500, signed by bob. Signed by bob's server srv-b1 at t1203: it stored this exact message",
    );
    assert.equal(
      explainTick({ ...read, delivery: null, read: reportedRead('bob', 1500) }, time),
      "Read by bob at t1500, not signed: the server reports it; bob's signed receipt has not reached this device",
    );
    assert.equal(evidenceOf({ ...read, read: signedRead('bob', 1500) })?.verified, true);
  });

  it('a verified delivery or read is not given up for a weaker one, and the same evidence changes nothing', () => {
    const log = new ChatLog();
    log.upsert(mine({ deliveryState: 'delivered' }));
    assert.equal(log.setDelivery(key, 0, unsigned), true);
    assert.equal(log.setDelivery(key, 0, { ...unsigned }), false, 'equal evidence is no change');
    assert.equal(log.setDelivery(key, 5, signed), false, 'a proof for another revision is ignored');
    assert.equal(log.setDelivery(key, 0, signed), true);
    assert.equal(log.setDelivery(key, 0, unsigned), false);
    assert.equal(
      log.upsert(mine({ deliveryState: 'delivered', delivery: unsigned })),
      false,
      'a page does not undo it',
    );
    assert.equal(log.get(key)?.delivery?.verified, true);
    // A read from history, then the signed receipt live: the receipt backs the same read time.
    assert.equal(log.markRead(key, 1500, reportedRead('bob', 1500)), true);
    assert.equal(log.markRead(key, 1600, signedRead('bob', 1600)), true);
    assert.deepEqual([log.get(key)?.readAtMs, log.get(key)?.read?.verified], [1500, true]);
    assert.equal(log.markRead(key, 1500, reportedRead('bob', 1500)), false);
    // An edit needs a proof of its own; the read stays.
    assert.equal(log.upsert(mine({ text: 'hi!', revisionTimeMs: 2000, deliveryState: 'accepted' })), true);
    assert.deepEqual([log.get(key)?.delivery, log.get(key)?.read?.verified], [null, true]);
  });
});
