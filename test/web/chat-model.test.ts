/** The web client's chat model: the tick rules of docs/web-client.md and idempotent merging of events and pages. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChatMessage } from '../../web/src/chat.js';
import { ChatLog, TICK_TEXT, parseBaseKey, tickOf } from '../../web/src/chat.js';

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
