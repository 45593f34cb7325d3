import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  baseKeyOf,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  messageKeyOf,
} from '../../src/protocol/container.js';
import type { SqliteStore } from '../../src/server/store/sqlite/store.js';
import { openSqliteStore } from '../../src/server/store/sqlite/store.js';
import type { StorePairInput } from '../../src/server/store/types.js';
import { testPair } from '../helpers/containers.js';
import type { PairSpec } from '../helpers/containers.js';

const T0 = 1_774_700_000_000;
const both = {
  owners: new Map([
    ['alice', false],
    ['bob', false],
  ]),
};

describe('SQLite store', () => {
  let dir: string;
  let store: SqliteStore;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'shine-store-'));
    store = openSqliteStore({ path: join(dir, 'db.sqlite'), sync: 'full' });
    await store.migrate();
    await store.migrate(); // idempotent
  });
  after(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const put = (spec: PairSpec, extra: Partial<StorePairInput> = {}) => {
    const p = testPair(spec);
    return store.messages.storePair({
      ...p,
      nowMs: spec.timeMs,
      outbox: both,
      delivery: { state: 'delivered', attempt: 1, acceptedAtMs: spec.timeMs, nextAttemptAtMs: null },
      ...extra,
    });
  };

  it('stores a pair once; the same revision again changes nothing; an older one neither', async () => {
    const r1 = await put({ from: 'alice', to: 'bob', timeMs: T0, nonce: 1, revisionTimeMs: 10 });
    assert.equal(r1.outgoing.outcome, 'inserted');
    assert.equal(r1.incoming.outcome, 'inserted');
    assert.equal(r1.deliveryState, 'delivered');
    const r2 = await put({ from: 'alice', to: 'bob', timeMs: T0, nonce: 1, revisionTimeMs: 10 });
    assert.equal(r2.outgoing.outcome, 'unchanged');
    const r3 = await put({
      from: 'alice',
      to: 'bob',
      timeMs: T0,
      nonce: 1,
      revisionTimeMs: 5,
      body: new Uint8Array([9]),
    });
    assert.equal(r3.outgoing.outcome, 'unchanged');
    const copy = await store.messages.getCopy('alice|bob|' + T0 + '|1|2');
    assert.equal(copy?.revisionTimeMs, 10);
  });

  it('an edit replaces the copy and restarts the delivery row of the new revision', async () => {
    const p = { from: 'alice', to: 'bob', timeMs: T0 + 1, nonce: 2 } as const;
    await put(p);
    const edit = await put(
      { ...p, revisionTimeMs: T0 + 100, body: new TextEncoder().encode('edited') },
      {
        delivery: { state: 'accepted', attempt: 1, acceptedAtMs: T0 + 100, nextAttemptAtMs: T0 + 130 },
      },
    );
    assert.equal(edit.outgoing.outcome, 'updated');
    assert.equal(edit.deliveryState, 'accepted');
    const h = await store.messages.getDirectMessages({
      owner: 'bob',
      peer: 'alice',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 10,
    });
    const item = h.items.find((i) => i.timeMs === T0 + 1)!;
    assert.equal(item.revisionTimeMs, T0 + 100);
    assert.equal(item.deliveryState, null);
  });

  it('a receipt sets readAt on both sides, even when it arrives before the message', async () => {
    const msg = { from: 'bob', to: 'alice', timeMs: T0 + 50, nonce: 77 } as const;
    const receipt = encodeReceiptBody({ readAtMs: T0 + 60, targetTimeMs: msg.timeMs, targetNonce: msg.nonce });
    await put({ type: 3, from: 'alice', to: 'bob', timeMs: T0 + 60, nonce: 5, body: receipt });
    await put(msg);
    const bobSide = await store.messages.getDirectMessages({
      owner: 'bob',
      peer: 'alice',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 50,
    });
    assert.equal(bobSide.items.find((i) => i.timeMs === msg.timeMs)?.readAtMs, T0 + 60);
    const aliceSide = await store.messages.getDirectMessages({
      owner: 'alice',
      peer: 'bob',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 50,
    });
    assert.equal(aliceSide.items.find((i) => i.timeMs === msg.timeMs)?.readAtMs, T0 + 60);
    assert.ok(
      aliceSide.items.every((i) => i.messageType === 1 || i.messageType === 2),
      'receipts are never items',
    );
  });

  it('a delete removes both copies and outbox rows, and wins over a copy that arrives later', async () => {
    const msg = { from: 'alice', to: 'bob', timeMs: T0 + 200, nonce: 9 } as const;
    const del = encodeDeleteMessageBody({ targetTimeMs: msg.timeMs, targetNonce: msg.nonce, targetSender: 0 });
    await put({ type: 5, from: 'alice', to: 'bob', timeMs: T0 + 210, nonce: 10, body: del });
    const late = await put(msg);
    assert.equal(late.outgoing.outcome, 'tombstoned');
    assert.equal(late.incoming.outcome, 'tombstoned');
    assert.equal(await store.messages.getCopy(messageKeyOf({ ...testPair(msg).outgoing })), null);
    const msg2 = { from: 'alice', to: 'bob', timeMs: T0 + 300, nonce: 11 } as const;
    await put(msg2);
    const del2 = encodeDeleteMessageBody({ targetTimeMs: msg2.timeMs, targetNonce: msg2.nonce, targetSender: 1 });
    await put({ type: 5, from: 'bob', to: 'alice', timeMs: T0 + 310, nonce: 12, body: del2 });
    assert.equal(await store.messages.getCopy(`${baseKeyOf(testPair(msg2).incoming)}|1`), null);
    assert.equal(await store.messages.getCopy(`${baseKeyOf(testPair(msg2).incoming)}|2`), null);
    const n = store.db.conn
      .prepare(`SELECT COUNT(*) AS n FROM dm_sync_outbox WHERE primary_message_key LIKE ?`)
      .get(`${baseKeyOf(testPair(msg2).incoming)}|%`) as { n: number };
    assert.equal(n.n, 0);
  });

  it('pages history newest first across equal times and deletes a conversation before a time', async () => {
    for (let i = 0; i < 30; i++)
      await put({ from: 'carol', to: 'dave', timeMs: T0 + 1000 + Math.floor(i / 3), nonce: i });
    const seen: string[] = [];
    let cursor = { beforeTimeMs: 0, beforeMessageKey: '' };
    for (;;) {
      const page = await store.messages.getDirectMessages({ owner: 'carol', peer: 'dave', ...cursor, limit: 7 });
      seen.push(...page.items.map((i) => i.messageKey));
      if (!page.hasMore) break;
      const last = page.items.at(-1)!;
      cursor = { beforeTimeMs: last.timeMs, beforeMessageKey: last.messageKey };
    }
    assert.equal(seen.length, 30);
    assert.equal(new Set(seen).size, 30);
    const conv = encodeDeleteConversationBody({ deleteBeforeMs: T0 + 1004 });
    await put({ type: 7, from: 'dave', to: 'carol', timeMs: T0 + 2000, nonce: 1, body: conv });
    const rest = await store.messages.getDirectMessages({
      owner: 'carol',
      peer: 'dave',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 100,
    });
    assert.equal(rest.items.length, 15);
    assert.ok(rest.items.every((i) => i.timeMs > T0 + 1004));
    const again = await put({ from: 'carol', to: 'dave', timeMs: T0 + 1001, nonce: 99 });
    assert.equal(again.outgoing.outcome, 'tombstoned');
    const convs = await store.messages.getConversations('dave', 10);
    assert.deepEqual(
      convs.map((c) => c.peerLogin),
      ['carol'],
    );
    assert.equal(convs[0]!.unreadCount, 15);
  });

  it('names as last message of a conversation the first of its history, among messages of the same timeMs too', async () => {
    for (const nonce of [900, 7, 12345, 50]) await put({ from: 'hank', to: 'gina', timeMs: T0 + 5, nonce });
    for (const owner of ['gina', 'hank']) {
      const [conv] = await store.messages.getConversations(owner, 10);
      const [newest] = (
        await store.messages.getDirectMessages({
          owner,
          peer: owner === 'gina' ? 'hank' : 'gina',
          beforeTimeMs: 0,
          beforeMessageKey: '',
          limit: 1,
        })
      ).items;
      assert.deepEqual([conv!.lastTimeMs, conv!.lastMessageKey], [newest!.timeMs, newest!.messageKey], owner);
    }
  });

  it('replays to a known device what it has not acknowledged, again after a newer revision', async () => {
    await store.devices.touchDevice('erin', 'phone', T0);
    await put({ from: 'frank', to: 'erin', timeMs: T0 + 1, nonce: 1 });
    await put({ from: 'frank', to: 'erin', timeMs: T0 + 2, nonce: 2 });
    await put(
      { from: 'erin', to: 'frank', timeMs: T0 + 3, nonce: 3 },
      { senderDevice: { login: 'erin', deviceId: 'phone' } },
    );
    let pending = await store.devices.pendingForDevice('erin', 'phone', null, 100);
    assert.equal(pending.length, 2);
    assert.equal(
      await store.devices.ackForDevice('erin', 'phone', pending.map((p) => p.messageKey).concat(['nope|x']), T0 + 5),
      2,
    );
    assert.equal((await store.devices.pendingForDevice('erin', 'phone', null, 100)).length, 0);
    await put({ from: 'frank', to: 'erin', timeMs: T0 + 1, nonce: 1, revisionTimeMs: T0 + 10 });
    pending = await store.devices.pendingForDevice('erin', 'phone', null, 100);
    assert.equal(pending.length, 1);
    assert.equal(pending[0]!.revisionTimeMs, T0 + 10);
    assert.equal(await store.devices.forgetDevicesBefore(T0 + 1), 1);
  });

  it('settings: last writer wins by time, ties by value bytes', async () => {
    const set = (v: number[], at: number) =>
      store.settings.setSetting({
        owner: 'alice',
        key: 'theme',
        value: new Uint8Array(v),
        updatedAtMs: at,
        nowMs: at,
        synced: false,
      });
    assert.deepEqual(await set([1], 100), { applied: true, updatedAtMs: 100 });
    assert.deepEqual(await set([9], 50), { applied: false, updatedAtMs: 100 });
    assert.deepEqual(await set([0], 100), { applied: false, updatedAtMs: 100 });
    assert.deepEqual(await set([2], 100), { applied: true, updatedAtMs: 100 });
    assert.deepEqual(
      (await store.settings.getSettings('alice')).map((s) => [s.key, [...s.value]]),
      [['theme', [2]]],
    );
    await set([], 200);
    assert.equal((await store.settings.getSettings('alice', ['theme'])).length, 0);
  });

  it('group commit: concurrent writes share commits and all resolve after them', async () => {
    const before = { ...store.db.stats };
    await Promise.all(
      Array.from({ length: 200 }, (_, i) => put({ from: 'gina', to: 'hank', timeMs: T0 + 5000 + i, nonce: i })),
    );
    const commits = store.db.stats.commits - before.commits;
    assert.ok(commits < 20, `200 writes took ${commits} commits`);
    const page = await store.messages.getDirectMessages({
      owner: 'hank',
      peer: 'gina',
      beforeTimeMs: 0,
      beforeMessageKey: '',
      limit: 200,
    });
    assert.equal(page.items.length, 200);
  });

  it('refuses writes with 503 OVERLOADED while the commit queue is full, and commits the queued ones', async () => {
    const small = openSqliteStore({ path: join(dir, 'small.sqlite'), sync: 'normal', maxQueuedWrites: 3 });
    await small.migrate();
    const writes = Array.from({ length: 5 }, (_, i) =>
      small.setMeta(`k${i}`, 'v').then(
        () => 'ok',
        (err: { code?: string }) => err.code,
      ),
    );
    assert.deepEqual(await Promise.all(writes), ['ok', 'ok', 'ok', 'OVERLOADED', 'OVERLOADED']);
    assert.equal(await small.getMeta('k2'), 'v');
    assert.equal(await small.getMeta('k3'), null);
    await small.close();
  });
});
