/**
 * One contract suite for the Store (src/server/store/types.ts), run on every dialect: what each area
 * answers, through the interface only. Each dialect's test file passes a factory for fresh, migrated
 * stores; the suite takes a new store per test so tests never see each other's rows.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { UserProfile } from '../../src/protocol/identity.js';
import {
  baseKeyOf,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  messageKeyOf,
  syncIdOf,
} from '../../src/protocol/container.js';
import { toBase64 } from '../../src/protocol/bytes.js';
import { checkDatabase } from '../../src/server/check/service.js';
import { POSTGRES_MIGRATIONS } from '../../src/server/store/postgres/migrations.js';
import { ZERO_HASH_HEX, copyDigest, xorInto } from '../../src/server/store/rules.js';
import { SQLITE_MIGRATIONS } from '../../src/server/store/sqlite/migrations.js';
import { inlineBulkVerifier } from '../../src/server/crypto/verify-pool.js';
import type { Store, StorePairInput } from '../../src/server/store/types.js';
import type { DeliveryReceipt } from '../../src/protocol/receipt.js';
import type { PairSpec } from './containers.js';
import { publicKeyOf, testPair } from './containers.js';

export const T0 = 1_774_700_000_000;

/** Every setting of owner (or the named ones), as one unbounded page of settingsPage. */
export const allSettings = async (store: Store, owner: string, keys?: string[]) =>
  (await store.settings.settingsPage({ owner, keys, afterKey: '', maxBytes: Infinity })).items;

/** A genesis block of login as the chain store takes it (the store checks links, not signatures). */
const genesisInput = (login: string) => ({
  login,
  index: 0,
  prevHash: ZERO_HASH_HEX,
  hash: login.padEnd(64, '0'),
  timeMs: T0,
  bytes: new Uint8Array([1]),
});

/** The tables of migration 6 (user chains). */
const CHAIN_TABLES = [
  'chain_blocks',
  'chain_heads',
  'chain_seq',
  'chain_resync',
  'chain_partner_cursors',
  'chain_partner_acks',
];

/** Makes fresh, migrated stores of one dialect (empty of rows); the test file closes them and drops their data. */
export interface StoreFactory {
  readonly dialect: Store['dialect'];
  /** How the suite's title names this store, when the dialect alone does not (default: the dialect). */
  readonly name?: string;
  open(): Promise<Store>;
  /**
   * Runs SQL on the store's database behind its back (`?` placeholders, as queryTestDb): the tests of
   * `shine check` corrupt a database on purpose.
   */
  query(store: Store, sql: string, params?: readonly unknown[]): Promise<Record<string, unknown>[]>;
}

const owners = (...logins: string[]) => ({ owners: new Map(logins.map((l) => [l, false])) });
const both = owners('alice', 'bob');

/** storePair with the defaults the tests share: both owners local, the row written delivered. */
export function putPair(store: Store, spec: PairSpec, extra: Partial<StorePairInput> = {}) {
  const p = testPair(spec);
  return store.messages.storePair({
    ...p,
    nowMs: spec.timeMs,
    outbox: both,
    delivery: { state: 'delivered', attempt: 1, acceptedAtMs: spec.timeMs, nextAttemptAtMs: null },
    ...extra,
  });
}

const history = (store: Store, owner: string, peer: string, limit = 100) =>
  store.messages.getDirectMessages({ owner, peer, beforeTimeMs: 0, beforeMessageKey: '', limit });

/** Every DM outbox row of owner, without acknowledging any. */
export async function outbox(
  store: Store,
  owner: string,
): Promise<{ syncId: string; storedAtMs: number; primaryMessageKey: string }[]> {
  const page = await store.replication.dmSyncPage({
    owner,
    ackSyncIds: [],
    afterStoredAtMs: -1,
    afterKey: '',
    limit: 10_000,
    maxBytes: 1 << 30,
  });
  return page.items.map((i) => ({
    syncId: i.syncId,
    storedAtMs: i.storedAtMs,
    primaryMessageKey: i.primaryMessageKey,
  }));
}

function profile(login: string, accessServers: string[], version = 1): UserProfile {
  return {
    login,
    signKeyB64: `sign-${login}`,
    encKeyB64: `enc-${login}`,
    accessServers,
    version,
    updatedAtMs: T0 + version,
    signatureB64: 'sig',
  };
}

export function storeContract(factory: StoreFactory): void {
  const fresh = () => factory.open();

  describe(`Store contract (${factory.name ?? factory.dialect})`, () => {
    it('migrate twice is idempotent and keeps the data', async () => {
      const store = await fresh();
      await store.meta.setMeta('k', 'v');
      await store.migrate();
      await store.migrate();
      assert.equal(await store.meta.getMeta('k'), 'v');
      assert.equal(await store.meta.getMeta('missing'), null);
      await store.meta.setMeta('k', 'w');
      assert.equal(await store.meta.getMeta('k'), 'w');
      await store.ping();
      assert.equal(store.dialect, factory.dialect);
    });

    it('stores a pair once; the same revision again changes nothing; an older one neither', async () => {
      const store = await fresh();
      const r1 = await putPair(store, { from: 'alice', to: 'bob', timeMs: T0, nonce: 1, revisionTimeMs: 10 });
      assert.deepEqual(
        [r1.outgoing.outcome, r1.incoming.outcome, r1.deliveryState, r1.outgoing.storedAtMs],
        ['inserted', 'inserted', 'delivered', T0],
      );
      const r2 = await putPair(store, { from: 'alice', to: 'bob', timeMs: T0, nonce: 1, revisionTimeMs: 10 });
      assert.equal(r2.outgoing.outcome, 'unchanged');
      assert.equal(r2.outgoing.storedAtMs, T0);
      const r3 = await putPair(store, {
        from: 'alice',
        to: 'bob',
        timeMs: T0,
        nonce: 1,
        revisionTimeMs: 5,
        body: new Uint8Array([9]),
      });
      assert.equal(r3.outgoing.outcome, 'unchanged');
      const copy = await store.messages.getCopy(`alice|bob|${T0}|1|2`);
      assert.equal(copy?.revisionTimeMs, 10);
      assert.deepEqual([copy?.fromLogin, copy?.toLogin, copy?.messageType], ['alice', 'bob', 2]);
      assert.deepEqual(
        copy?.blob,
        testPair({ from: 'alice', to: 'bob', timeMs: T0, nonce: 1, revisionTimeMs: 10 }).outgoing.bytes,
      );
      assert.equal(await store.messages.getCopy('nobody|x|1|1|1'), null);
    });

    it('an edit replaces the copy and restarts the delivery row of the new revision', async () => {
      const store = await fresh();
      const p = { from: 'alice', to: 'bob', timeMs: T0 + 1, nonce: 2 } as const;
      const accepted = (at: number) => ({
        state: 'accepted' as const,
        attempt: 1,
        acceptedAtMs: at,
        nextAttemptAtMs: at,
      });
      await putPair(store, p, { delivery: accepted(T0 + 1) });
      const key = messageKeyOf(testPair(p).outgoing);
      const first = await store.delivery.getDelivery(key);
      assert.equal(first?.rowVersion, 1);
      const edit = await putPair(
        store,
        { ...p, revisionTimeMs: T0 + 100, body: new TextEncoder().encode('edited') },
        { delivery: { ...accepted(T0 + 100), nextAttemptAtMs: T0 + 130 } },
      );
      assert.equal(edit.outgoing.outcome, 'updated');
      assert.equal(edit.deliveryState, 'accepted');
      const row = await store.delivery.getDelivery(key);
      assert.deepEqual(
        [row?.revisionTimeMs, row?.nextAttemptAtMs, row?.rowVersion, row?.baseKey, row?.recipientLogin],
        [T0 + 100, T0 + 130, 2, baseKeyOf(testPair(p).outgoing), 'bob'],
      );
      const h = await history(store, 'bob', 'alice', 10);
      const item = h.items.find((i) => i.timeMs === T0 + 1)!;
      assert.equal(item.revisionTimeMs, T0 + 100);
      assert.equal(item.deliveryState, null);
      const mine = (await history(store, 'alice', 'bob', 10)).items[0]!;
      assert.equal(mine.deliveryState, 'accepted');
    });

    it('a receipt sets readAt on both sides, even when it arrives before the message', async () => {
      const store = await fresh();
      const msg = { from: 'bob', to: 'alice', timeMs: T0 + 50, nonce: 77 } as const;
      const receipt = encodeReceiptBody({ readAtMs: T0 + 60, targetTimeMs: msg.timeMs, targetNonce: msg.nonce });
      await putPair(store, { type: 3, from: 'alice', to: 'bob', timeMs: T0 + 60, nonce: 5, body: receipt });
      await putPair(store, msg);
      const bobSide = await history(store, 'bob', 'alice');
      assert.equal(bobSide.items.find((i) => i.timeMs === msg.timeMs)?.readAtMs, T0 + 60);
      const aliceSide = await history(store, 'alice', 'bob');
      assert.equal(aliceSide.items.find((i) => i.timeMs === msg.timeMs)?.readAtMs, T0 + 60);
      assert.ok(
        aliceSide.items.every((i) => i.messageType === 1 || i.messageType === 2),
        'receipts are never items',
      );
      // An earlier receipt moves readAt back; a later one leaves it.
      const earlier = encodeReceiptBody({ readAtMs: T0 + 55, targetTimeMs: msg.timeMs, targetNonce: msg.nonce });
      await putPair(store, {
        type: 3,
        from: 'alice',
        to: 'bob',
        timeMs: T0 + 60,
        nonce: 5,
        body: earlier,
        revisionTimeMs: 1,
      });
      assert.equal((await history(store, 'bob', 'alice')).items[0]?.readAtMs, T0 + 55);
    });

    it('a delete removes both copies, their receipts and outbox rows, and wins over a copy that arrives later', async () => {
      const store = await fresh();
      const msg = { from: 'alice', to: 'bob', timeMs: T0 + 200, nonce: 9 } as const;
      const del = encodeDeleteMessageBody({ targetTimeMs: msg.timeMs, targetNonce: msg.nonce, targetSender: 0 });
      await putPair(store, { type: 5, from: 'alice', to: 'bob', timeMs: T0 + 210, nonce: 10, body: del });
      const late = await putPair(store, msg);
      assert.equal(late.outgoing.outcome, 'tombstoned');
      assert.equal(late.incoming.outcome, 'tombstoned');
      assert.equal(late.outgoing.storedAtMs, 0);
      assert.equal(await store.messages.getCopy(messageKeyOf(testPair(msg).outgoing)), null);

      const msg2 = { from: 'alice', to: 'bob', timeMs: T0 + 300, nonce: 11 } as const;
      await putPair(store, msg2);
      const rcpt = encodeReceiptBody({ readAtMs: T0 + 305, targetTimeMs: msg2.timeMs, targetNonce: msg2.nonce });
      await putPair(store, { type: 3, from: 'bob', to: 'alice', timeMs: T0 + 305, nonce: 3, body: rcpt });
      const base = baseKeyOf(testPair(msg2).incoming);
      const rowsBefore = (await outbox(store, 'alice')).length;
      const del2 = encodeDeleteMessageBody({ targetTimeMs: msg2.timeMs, targetNonce: msg2.nonce, targetSender: 1 });
      await putPair(store, { type: 5, from: 'bob', to: 'alice', timeMs: T0 + 310, nonce: 12, body: del2 });
      assert.equal(await store.messages.getCopy(`${base}|1`), null);
      assert.equal(await store.messages.getCopy(`${base}|2`), null);
      for (const owner of ['alice', 'bob']) {
        const rows = await outbox(store, owner);
        assert.ok(
          rows.every((r) => !r.syncId.startsWith(base)),
          `${owner}: no outbox row of the deleted message`,
        );
      }
      // alice lost her copy and her received receipt's row, and got the delete's incoming copy's row.
      assert.equal((await outbox(store, 'alice')).length, rowsBefore - 2 + 1);
      assert.equal((await history(store, 'alice', 'bob')).items.length, 0);
    });

    it('pages history newest first across equal times and deletes a conversation before a time', async () => {
      const store = await fresh();
      for (let i = 0; i < 30; i++)
        await putPair(store, { from: 'carol', to: 'dave', timeMs: T0 + 1000 + Math.floor(i / 3), nonce: i });
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
      // Byte order of keys, newest first: nonces 10 and 9 of one millisecond sort "…|10|…" before "…|9|…".
      const sorted = [...seen].sort((a, b) => {
        const ta = Number(a.split('|')[2]);
        const tb = Number(b.split('|')[2]);
        return tb - ta || (a < b ? 1 : a > b ? -1 : 0);
      });
      assert.deepEqual(seen, sorted);
      const conv = encodeDeleteConversationBody({ deleteBeforeMs: T0 + 1004 });
      await putPair(store, { type: 7, from: 'dave', to: 'carol', timeMs: T0 + 2000, nonce: 1, body: conv });
      const rest = await history(store, 'carol', 'dave');
      assert.equal(rest.items.length, 15);
      assert.ok(rest.items.every((i) => i.timeMs > T0 + 1004));
      const again = await putPair(store, { from: 'carol', to: 'dave', timeMs: T0 + 1001, nonce: 99 });
      assert.equal(again.outgoing.outcome, 'tombstoned');
      const convs = await store.messages.getConversations('dave', 10);
      assert.deepEqual(
        convs.map((c) => [c.peerLogin, c.unreadCount]),
        [['carol', 15]],
      );
    });

    it('a conversation delete removes every kind of copy of that dialog up to its time, and nothing else', async () => {
      const store = await fresh();
      const at = (dt: number) => T0 + dt;
      for (const [from, to, dt] of [
        ['carol', 'dave', 1],
        ['dave', 'carol', 2],
        ['carol', 'dave', 3],
        ['carol', 'dave', 20],
        ['carol', 'erin', 4],
        ['erin', 'carol', 5],
      ] as const)
        await putPair(store, { from, to, timeMs: at(dt), nonce: dt });
      // Receipts both ways, a deleted message, and the same kinds in carol's dialog with erin.
      const receipt = (from: string, to: string, dt: number, target: number) =>
        putPair(store, {
          type: 3,
          from,
          to,
          timeMs: at(dt),
          nonce: dt,
          body: encodeReceiptBody({ readAtMs: at(dt), targetTimeMs: at(target), targetNonce: target }),
        });
      await receipt('carol', 'dave', 6, 2);
      await receipt('dave', 'carol', 7, 1);
      await receipt('carol', 'erin', 8, 5);
      await putPair(store, {
        type: 5,
        from: 'carol',
        to: 'dave',
        timeMs: at(9),
        nonce: 9,
        body: encodeDeleteMessageBody({ targetSender: 0, targetTimeMs: at(3), targetNonce: 3 }),
      });
      const rows = async () =>
        (
          await factory.query(
            store,
            'SELECT owner_login AS "owner", peer_login AS "peer", message_type AS "type", time_ms AS "timeMs" FROM signed_messages',
          )
        )
          .map((r) => `${r.owner}>${r.peer} ${r.type} ${Number(r.timeMs) - T0}`)
          .sort();
      const before = await rows();
      const conv = encodeDeleteConversationBody({ deleteBeforeMs: at(10) });
      await putPair(store, { type: 7, from: 'carol', to: 'dave', timeMs: at(30), nonce: 30, body: conv });
      const covered = (r: string) => {
        const [dialog, type, dt] = r.split(' ');
        return ['carol>dave', 'dave>carol'].includes(dialog!) && Number(type) <= 6 && Number(dt) <= 10;
      };
      // Texts, receipts both ways and the delete of carol's third message, on both sides: types 1 to 6.
      assert.deepEqual(
        new Set(before.filter(covered).map((r) => r.split(' ')[1])),
        new Set(['1', '2', '3', '4', '5', '6']),
      );
      assert.equal(before.filter(covered).length, 10);
      assert.deepEqual(
        await rows(),
        [...before.filter((r) => !covered(r)), 'carol>dave 8 30', 'dave>carol 7 30'].sort(),
      );
    });

    it('names as last message of a conversation the first of its history, among messages of the same timeMs too', async () => {
      const store = await fresh();
      for (const nonce of [900, 7, 12345, 50])
        await putPair(store, { from: 'hank', to: 'gina', timeMs: T0 + 5, nonce });
      await putPair(store, { from: 'ivan', to: 'gina', timeMs: T0 + 9, nonce: 1 });
      for (const owner of ['gina', 'hank']) {
        const [conv] = await store.messages.getConversations(owner, 10);
        const [newest] = (await history(store, owner, owner === 'gina' ? 'ivan' : 'gina', 1)).items;
        assert.deepEqual([conv!.lastTimeMs, conv!.lastMessageKey], [newest!.timeMs, newest!.messageKey], owner);
      }
      assert.deepEqual(
        (await store.messages.getConversations('gina', 10)).map((c) => c.peerLogin),
        ['ivan', 'hank'],
      );
      assert.equal((await store.messages.getConversations('gina', 1)).length, 1);
    });

    it('outbox rows follow copies; sync pages ack only the current revision; markUnsynced', async () => {
      const store = await fresh();
      // alice is local (rows not yet synced), bob's copies came from his other server (synced).
      const policy = {
        owners: new Map([
          ['alice', false],
          ['bob', true],
        ]),
      };
      for (let i = 0; i < 5; i++)
        await putPair(store, { from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i }, { outbox: policy });
      assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 0, unsynced: 5 });
      assert.deepEqual(await store.replication.outboxCounts('bob'), { synced: 5, unsynced: 0 });
      const page = (afterStoredAtMs: number, afterKey: string, ackSyncIds: string[], limit = 2, maxBytes = 1 << 20) =>
        store.replication.dmSyncPage({ owner: 'alice', ackSyncIds, afterStoredAtMs, afterKey, limit, maxBytes });
      const p1 = await page(-1, '', []);
      assert.equal(p1.items.length, 2);
      assert.ok(p1.hasMore);
      // The outgoing copy's row carries both blobs.
      const pair0 = testPair({ from: 'alice', to: 'bob', timeMs: T0, nonce: 0 });
      assert.deepEqual(p1.items[0]!.blobs, [pair0.incoming.bytes, pair0.outgoing.bytes]);
      assert.equal(p1.items[0]!.syncId, syncIdOf(messageKeyOf(pair0.outgoing), 0, 0));
      const last1 = p1.items.at(-1)!;
      const p2 = await page(
        last1.storedAtMs,
        last1.primaryMessageKey,
        p1.items.map((i) => i.syncId),
      );
      assert.equal(p2.items.length, 2);
      assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 2, unsynced: 3 });
      // A newer revision of an unacked row moves on; the old syncId no longer acks it.
      const edited = p2.items[0]!;
      const t = Number(edited.primaryMessageKey.split('|')[2]);
      const n = Number(edited.primaryMessageKey.split('|')[3]);
      await putPair(
        store,
        { from: 'alice', to: 'bob', timeMs: t, nonce: n, revisionTimeMs: T0 + 50 },
        { outbox: policy, nowMs: T0 + 50 },
      );
      const last2 = p2.items.at(-1)!;
      const p3 = await page(
        last2.storedAtMs,
        last2.primaryMessageKey,
        p2.items.map((i) => i.syncId),
        10,
      );
      assert.equal(p3.hasMore, false);
      assert.ok(p3.items.some((i) => i.syncId === syncIdOf(edited.primaryMessageKey, T0 + 50, 0)));
      assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 3, unsynced: 2 });
      // maxBytes: one row larger than the limit still comes alone.
      const tiny = await page(-1, '', [], 10, 1);
      assert.equal(tiny.items.length, 1);
      assert.ok(tiny.hasMore);
      // Malformed syncIds are ignored.
      await page(-1, '', ['nonsense', 'a:b:c']);
      assert.deepEqual(await store.replication.markUnsynced('alice'), { updated: 0, dmUpdated: 3 });
      assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 0, unsynced: 5 });
      assert.deepEqual(await store.replication.markUnsynced(null), { updated: 0, dmUpdated: 5 });
    });

    it('anti-entropy reads: digests by message time, keys of a range, rows by key; an edit changes its digest', async () => {
      const store = await fresh();
      for (let i = 0; i < 6; i++) await putPair(store, { from: 'alice', to: 'bob', timeMs: T0 + i * 10, nonce: i });
      const ranges = [
        { fromTimeMs: T0, toTimeMs: T0 + 25 },
        { fromTimeMs: T0 + 25, toTimeMs: T0 + 60 },
        { fromTimeMs: T0 + 60, toTimeMs: T0 + 100 },
      ];
      // The expected digest of a range: the xor over its copies, computed here from the keys.
      const expected = (owner: 'alice' | 'bob', times: number[], revision = (_t: number) => 0) => {
        const xor = new Uint8Array(32);
        for (const t of times) {
          const pair = testPair({ from: 'alice', to: 'bob', timeMs: t, nonce: (t - T0) / 10 });
          const keys =
            owner === 'alice'
              ? [messageKeyOf(pair.incoming), messageKeyOf(pair.outgoing)]
              : [messageKeyOf(pair.incoming)];
          for (const k of keys) xorInto(xor, copyDigest(k, revision(t), 0));
        }
        return xor;
      };
      const alice = await store.replication.dmDigest('alice', ranges);
      assert.deepEqual(
        alice.map((b) => b.count),
        [6, 6, 0],
      );
      assert.deepEqual(alice[0]!.xor, expected('alice', [T0, T0 + 10, T0 + 20]));
      assert.deepEqual(alice[1]!.xor, expected('alice', [T0 + 30, T0 + 40, T0 + 50]));
      assert.deepEqual(alice[2]!.xor, new Uint8Array(32));
      const bob = await store.replication.dmDigest('bob', ranges);
      assert.deepEqual(
        bob.map((b) => b.count),
        [3, 3, 0],
      );
      assert.deepEqual(bob[1]!.xor, expected('bob', [T0 + 30, T0 + 40, T0 + 50]));
      // An edit changes its range's digest.
      await putPair(
        store,
        { from: 'alice', to: 'bob', timeMs: T0 + 30, nonce: 3, revisionTimeMs: 7 },
        { nowMs: T0 + 99 },
      );
      const edited = await store.replication.dmDigest('alice', ranges.slice(1, 2));
      assert.deepEqual(
        edited[0]!.xor,
        expected('alice', [T0 + 30, T0 + 40, T0 + 50], (t) => (t === T0 + 30 ? 7 : 0)),
      );
      // Keys of a range, in time order, with the rows' syncIds and copy counts; a limit cuts the list.
      const keys = await store.replication.dmKeys('alice', ranges[1]!, 10);
      assert.deepEqual(
        keys.map((k) => [Number(k.primaryMessageKey.split('|')[2]), k.copies, k.syncId.split(':')[1]]),
        [
          [T0 + 30, 2, '7'],
          [T0 + 40, 2, '0'],
          [T0 + 50, 2, '0'],
        ],
      );
      assert.equal((await store.replication.dmKeys('alice', ranges[1]!, 2)).length, 2);
      assert.deepEqual(await store.replication.dmKeys('alice', ranges[2]!, 10), []);
      // Rows by key, with both blobs of a pair; unknown keys and other owners' rows are absent.
      const rows = await store.replication.dmRows('alice', [keys[0]!.primaryMessageKey, 'nobody|x|1|1|2']);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.blobs.length, 2);
      assert.deepEqual(await store.replication.dmRows('bob', [keys[0]!.primaryMessageKey]), []);
      // A whole-range digest equals the xor of its parts.
      const whole = await store.replication.dmDigest('alice', [{ fromTimeMs: 0, toTimeMs: T0 * 2 }]);
      const parts = await store.replication.dmDigest('alice', ranges);
      const xor = new Uint8Array(32);
      for (const b of parts) xorInto(xor, b.xor);
      assert.deepEqual(whole[0]!.xor, xor);
      assert.equal(whole[0]!.count, 12);
    });

    it('the anti-entropy migration fills the digest columns of rows written before it', async () => {
      const store = await fresh();
      for (let i = 0; i < 3; i++) await putPair(store, { from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i });
      const all = [{ fromTimeMs: 0, toTimeMs: T0 * 2 }];
      const before = await store.replication.dmDigest('alice', all);
      assert.equal(before[0]!.count, 6);
      // A database from before the migration (5: its columns and index gone, and the objects of the migrations
      // after it), its version back at 4.
      const sqlite = factory.dialect === 'sqlite';
      const version = 4;
      assert.ok((sqlite ? SQLITE_MIGRATIONS : POSTGRES_MIGRATIONS).length > version);
      const later = CHAIN_TABLES.map((t) => `DROP TABLE ${t}`);
      const undo = sqlite
        ? [
            ...later,
            ...['insert', 'delete', 'update'].map((t) => `DROP TRIGGER dm_delivery_counts_${t}`),
            'DROP TABLE dm_delivery_counts',
            'ALTER TABLE session_devices DROP COLUMN replay_floor_ms',
            'DROP INDEX signed_messages_unread',
            'DROP INDEX dm_delivery_state_failed',
            'DROP INDEX dm_sync_outbox_digest',
            ...['time_ms', 'copies', 'digest'].map((c) => `ALTER TABLE dm_sync_outbox DROP COLUMN ${c}`),
            `PRAGMA user_version = ${version}`,
          ]
        : [
            ...later,
            'ALTER TABLE dm_sync_outbox DROP COLUMN time_ms, DROP COLUMN copies, DROP COLUMN digest',
            'ALTER TABLE session_devices DROP COLUMN replay_floor_ms',
            'DROP INDEX signed_messages_unread',
            `DELETE FROM schema_migrations WHERE version > ${version}`,
          ];
      for (const sql of undo) await factory.query(store, sql);
      // A read and a write through the store first: SQLite reloads a connection's schema when a statement
      // finds it changed, and the store's writes may have a connection of their own (a writer thread).
      assert.deepEqual(await store.replication.outboxCounts('alice'), { synced: 0, unsynced: 3 });
      await store.meta.setMeta('schema', 'reloaded');
      await store.migrate();
      assert.deepEqual(await store.replication.dmDigest('alice', all), before);
      assert.equal((await store.replication.dmKeys('alice', all[0]!, 10)).length, 3);
    });

    it('settings: last writer wins by time, ties by value bytes; the settings outbox', async () => {
      const store = await fresh();
      const set = (v: number[], at: number, key = 'theme', synced = false) =>
        store.settings.setSetting({
          owner: 'alice',
          key,
          value: new Uint8Array(v),
          updatedAtMs: at,
          nowMs: at,
          synced,
        });
      assert.deepEqual(await set([1], 100), { applied: true, updatedAtMs: 100 });
      assert.deepEqual(await set([9], 50), { applied: false, updatedAtMs: 100 });
      assert.deepEqual(await set([0], 100), { applied: false, updatedAtMs: 100 });
      assert.deepEqual(await set([2], 100), { applied: true, updatedAtMs: 100 });
      assert.deepEqual(await set([2, 0], 100), { applied: true, updatedAtMs: 100 });
      assert.deepEqual(
        (await allSettings(store, 'alice')).map((s) => [s.key, [...s.value]]),
        [['theme', [2, 0]]],
      );
      await set([7], 150, 'lang', true);
      const page = await store.replication.settingsSyncPage({
        owner: 'alice',
        ackSyncIds: [],
        afterStoredAtMs: -1,
        afterKey: '',
        limit: 10,
        maxBytes: 1 << 20,
      });
      assert.deepEqual(
        page.items.map((i) => [i.key, i.syncId]),
        [['theme', 'theme:100']],
      );
      const acked = await store.replication.settingsSyncPage({
        owner: 'alice',
        ackSyncIds: ['theme:99', 'lang:150'],
        afterStoredAtMs: -1,
        afterKey: '',
        limit: 10,
        maxBytes: 1 << 20,
      });
      assert.equal(acked.items.length, 1, 'an ack of an older syncId leaves the row unsynced');
      await store.replication.settingsSyncPage({
        owner: 'alice',
        ackSyncIds: ['theme:100'],
        afterStoredAtMs: -1,
        afterKey: '',
        limit: 10,
        maxBytes: 1 << 20,
      });
      assert.deepEqual(await store.replication.markUnsynced('alice'), { updated: 2, dmUpdated: 0 });
      assert.deepEqual(
        (await allSettings(store, 'alice', ['lang', 'none'])).map((s) => s.key),
        ['lang'],
      );
      await set([], 200);
      assert.equal((await allSettings(store, 'alice', ['theme'])).length, 0, 'an empty value is a removal');
    });

    it('settingsPage: keys in UTF-8 byte order after afterKey, only the named ones, deleted left out, cut by bytes', async () => {
      const store = await fresh();
      const put = (key: string, bytes: number) =>
        store.settings.setSetting({
          owner: 'gina',
          key,
          value: new Uint8Array(bytes).fill(1),
          updatedAtMs: 100,
          nowMs: 100,
          synced: false,
        });
      // 'Z' < 'a' < 'z' < 'é' in byte order (most collations put 'é' before 'z', some 'a' before 'Z').
      for (const key of ['é1', 'z1', 'a1', 'Z1', 'gone']) await put(key, 1_000);
      await store.settings.setSetting({
        owner: 'gina',
        key: 'gone',
        value: new Uint8Array(0),
        updatedAtMs: 200,
        nowMs: 200,
        synced: false,
      });
      const page = async (afterKey: string, maxBytes: number, keys?: string[]) => {
        const p = await store.settings.settingsPage({ owner: 'gina', keys, afterKey, maxBytes });
        return [p.items.map((i) => i.key), p.hasMore];
      };
      assert.deepEqual(await page('', 1 << 20), [['Z1', 'a1', 'z1', 'é1'], false]);
      // Each counts 1 000 + 4 (its key as JSON, quotes included) + 64 bytes.
      assert.deepEqual(await page('', 2 * 1_068), [['Z1', 'a1'], true]);
      assert.deepEqual(await page('', 2 * 1_068 - 1), [['Z1'], true]);
      assert.deepEqual(await page('', 1), [['Z1'], true], 'the first row comes whatever its size');
      // 'é' is two bytes of UTF-8: 'é1' counts 1 069.
      assert.deepEqual(await page('a1', 1_068 + 1_069), [['z1', 'é1'], false]);
      assert.deepEqual(await page('a1', 1_068 + 1_068), [['z1'], true]);
      assert.deepEqual(await page('z', 1 << 20, ['é1', 'Z1', 'gone', 'missing']), [['é1'], false]);
      assert.deepEqual((await store.settings.settingsPage({ owner: 'nobody', afterKey: '', maxBytes: 1 })).items, []);
      const [first] = (await store.settings.settingsPage({ owner: 'gina', afterKey: '', maxBytes: 1 })).items;
      assert.deepEqual(
        [first!.key, first!.value.length, first!.updatedAtMs, first!.storedAtMs],
        ['Z1', 1_000, 100, 100],
      );
    });

    it('replays to a known device what it has not acknowledged, again after a newer revision', async () => {
      const store = await fresh();
      assert.deepEqual(await store.devices.touchDevice('erin', 'phone', T0), { firstSeenAtMs: T0, isNew: true });
      assert.deepEqual(await store.devices.touchDevice('erin', 'phone', T0 + 1), { firstSeenAtMs: T0, isNew: false });
      await putPair(store, { from: 'frank', to: 'erin', timeMs: T0 + 1, nonce: 1 });
      await putPair(store, { from: 'frank', to: 'erin', timeMs: T0 + 2, nonce: 2 });
      await putPair(
        store,
        { from: 'erin', to: 'frank', timeMs: T0 + 3, nonce: 3 },
        { senderDevice: { login: 'erin', deviceId: 'phone' } },
      );
      await putPair(store, { from: 'frank', to: 'erin', timeMs: T0 + 4, nonce: 4 }, { silent: true });
      let pending = await store.devices.pendingForDevice('erin', 'phone', null, 100);
      assert.deepEqual(
        pending.map((p) => p.timeMs),
        [T0 + 1, T0 + 2],
      );
      const after = await store.devices.pendingForDevice('erin', 'phone', pending[0]!, 100);
      assert.deepEqual(
        after.map((p) => p.timeMs),
        [T0 + 2],
      );
      assert.equal(
        await store.devices.ackForDevice('erin', 'phone', pending.map((p) => p.messageKey).concat(['nope|x']), T0 + 5),
        2,
      );
      assert.equal((await store.devices.pendingForDevice('erin', 'phone', null, 100)).length, 0);
      await putPair(store, { from: 'frank', to: 'erin', timeMs: T0 + 1, nonce: 1, revisionTimeMs: T0 + 10 });
      pending = await store.devices.pendingForDevice('erin', 'phone', null, 100);
      assert.equal(pending.length, 1);
      assert.equal(pending[0]!.revisionTimeMs, T0 + 10);
      assert.equal(await store.devices.ackForDevice('erin', 'phone', [], T0 + 6), 0);
      assert.equal(await store.devices.forgetDevicesBefore(T0 + 1), 0);
      assert.equal(await store.devices.forgetDevicesBefore(T0 + 2), 1);
      assert.equal((await store.devices.touchDevice('erin', 'phone', T0 + 20)).isNew, true);
    });

    it("a device's replay floor: the replay reads from it, it never falls, a later revision above it is replayed", async () => {
      const store = await fresh();
      await store.devices.touchDevice('erin', 'phone', T0);
      const spec = (i: number) => ({ from: 'frank', to: 'erin', timeMs: T0 + i, nonce: i });
      for (const i of [1, 2, 3, 4, 5]) await putPair(store, spec(i));
      const pending = async () =>
        (await store.devices.pendingForDevice('erin', 'phone', null, 100)).map((p) => p.timeMs);
      const copies = await store.devices.pendingForDevice('erin', 'phone', null, 100);
      await store.devices.ackForDevice('erin', 'phone', [copies[0]!.messageKey, copies[1]!.messageKey], T0 + 6);
      assert.deepEqual(await pending(), [T0 + 3, T0 + 4, T0 + 5]);
      // At the first copy still pending, the replay is unchanged.
      await store.devices.advanceReplayFloor('erin', 'phone', T0 + 3);
      assert.deepEqual(await pending(), [T0 + 3, T0 + 4, T0 + 5]);
      // Above it, the replay starts there (the caller vouches for what lies below), also with a cursor.
      await store.devices.advanceReplayFloor('erin', 'phone', T0 + 4);
      assert.deepEqual(await pending(), [T0 + 4, T0 + 5]);
      const cursor = { storedAtMs: T0 + 1, messageKey: copies[0]!.messageKey };
      assert.deepEqual(
        (await store.devices.pendingForDevice('erin', 'phone', cursor, 100)).map((p) => p.timeMs),
        [T0 + 4, T0 + 5],
      );
      await store.devices.advanceReplayFloor('erin', 'phone', T0 + 2);
      assert.deepEqual(await pending(), [T0 + 4, T0 + 5], 'a lower floor does not lower it');
      // A new revision of an acknowledged copy below the floor is stored now, above it, and replayed.
      await putPair(store, { ...spec(1), revisionTimeMs: T0 + 9 }, { nowMs: T0 + 9 });
      assert.deepEqual(await pending(), [T0 + 4, T0 + 5, T0 + 1]);
      // Another device of the same user keeps its own floor.
      await store.devices.touchDevice('erin', 'laptop', T0);
      assert.equal((await store.devices.pendingForDevice('erin', 'laptop', null, 100)).length, 5);
    });

    it('/debug/delivery listing: the newest rows of the state asked for, newest first, at most the limit', async () => {
      const store = await fresh();
      const states = ['accepted', 'delivered', 'failed', 'delivered', 'failed', 'delivered', 'accepted'] as const;
      const keys: Record<string, string[]> = { accepted: [], delivered: [], failed: [] };
      for (const [i, state] of states.entries()) {
        const spec = { from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i + 1 } as const;
        const next = state === 'accepted' ? T0 + 60_000 : null;
        await putPair(store, spec, { delivery: { state, attempt: 1, acceptedAtMs: T0 + i, nextAttemptAtMs: next } });
        keys[state]!.unshift(messageKeyOf(testPair(spec).outgoing));
      }
      for (const state of ['accepted', 'delivered', 'failed'] as const) {
        const listed = await store.delivery.listDeliveries(state, 10);
        assert.deepEqual(
          listed.map((r) => r.outgoingKey),
          keys[state],
          state,
        );
        assert.ok(listed.every((r) => r.state === state));
        assert.deepEqual(
          (await store.delivery.listDeliveries(state, 1)).map((r) => r.outgoingKey),
          keys[state]!.slice(0, 1),
        );
      }
    });

    it('delivery rows: due through the index, a stored lease, one winner of two claims, finish, markDelivered', async () => {
      const store = await fresh();
      const accepted = (at: number, extra = {}) => ({
        delivery: { state: 'accepted' as const, attempt: 1, acceptedAtMs: at, nextAttemptAtMs: at, ...extra },
      });
      const a = { from: 'alice', to: 'bob', timeMs: T0, nonce: 1 } as const;
      const b = { from: 'alice', to: 'bob', timeMs: T0 + 1, nonce: 2 } as const;
      const c = { from: 'alice', to: 'bob', timeMs: T0 + 2, nonce: 3 } as const;
      await putPair(store, a, accepted(T0));
      await putPair(store, b, accepted(T0 + 1, { leaseUntilMs: T0 + 1000 }));
      await putPair(store, c, accepted(T0 + 2, { nextAttemptAtMs: T0 + 500 }));
      const [ka, kb] = [a, b].map((s) => messageKeyOf(testPair(s).outgoing)) as [string, string];
      assert.equal((await store.delivery.getDelivery(kb))?.leaseUntilMs, T0 + 1000);
      assert.deepEqual(
        (await store.delivery.dueDeliveries(T0 + 10, 10)).map((r) => r.outgoingKey),
        [ka],
        'the leased row and the later one are not due',
      );
      assert.equal((await store.delivery.dueDeliveries(T0 + 1000, 10)).length, 3);
      assert.equal((await store.delivery.dueDeliveries(T0 + 1000, 2)).length, 2);

      const row = (await store.delivery.getDelivery(ka))!;
      const claims = await Promise.all([
        store.delivery.claimDelivery(ka, row.rowVersion, T0 + 100),
        store.delivery.claimDelivery(ka, row.rowVersion, T0 + 100),
      ]);
      assert.equal(claims.filter((x) => x !== null).length, 1, 'exactly one claim wins');
      const leased = claims.find((x) => x !== null)!;
      assert.deepEqual([leased.rowVersion, leased.leaseUntilMs], [row.rowVersion + 1, T0 + 100]);
      assert.equal((await store.delivery.dueDeliveries(T0 + 50, 10)).length, 0);
      const update = { state: 'accepted' as const, attempt: 2, nextAttemptAtMs: T0 + 300, lastError: 'beta: timeout' };
      assert.equal(await store.delivery.finishDelivery(ka, row.rowVersion, update, T0 + 60), false, 'stale version');
      assert.equal(await store.delivery.finishDelivery(ka, leased.rowVersion, update, T0 + 60), true);
      const finished = (await store.delivery.getDelivery(ka))!;
      assert.deepEqual(
        [finished.attempt, finished.leaseUntilMs, finished.lastError, finished.nextAttemptAtMs],
        [2, null, 'beta: timeout', T0 + 300],
      );
      assert.equal(await store.delivery.markDelivered(ka, { revisionTimeMs: 1, reencryptedAtMs: 0 }, T0, null), false);
      assert.equal(
        await store.delivery.markDelivered(ka, { revisionTimeMs: 0, reencryptedAtMs: 0 }, T0 + 70, null),
        true,
      );
      assert.equal(
        await store.delivery.markDelivered(ka, { revisionTimeMs: 0, reencryptedAtMs: 0 }, T0 + 70, null),
        false,
      );
      assert.equal(
        await store.delivery.claimDelivery(ka, finished.rowVersion + 1, T0 + 900),
        null,
        'delivered rows are not claimed',
      );
      assert.deepEqual(await store.delivery.countDeliveriesByState(), { accepted: 2, delivered: 1, failed: 0 });
      assert.deepEqual(
        (await store.delivery.listDeliveries('accepted', 10)).map((r) => r.acceptedAtMs),
        [T0 + 2, T0 + 1],
      );
      assert.equal((await store.delivery.listDeliveries('accepted', 1)).length, 1);
      // The history shows the sender's copy's delivery state.
      const states = (await history(store, 'alice', 'bob')).items.map((i) => i.deliveryState);
      assert.deepEqual(states, ['accepted', 'accepted', 'delivered']);
    });

    it('delivery rows by state: the count follows every write (new rows, revisions, outcomes, removal)', async () => {
      const store = await fresh();
      const scanned = async () => {
        const out = { accepted: 0, delivered: 0, failed: 0 };
        const rows = await factory.query(store, 'SELECT state, COUNT(*) AS n FROM dm_delivery_state GROUP BY state');
        for (const r of rows) out[r.state as keyof typeof out] = Number(r.n);
        return out;
      };
      const counted = async (expected: { accepted: number; delivered: number; failed: number }, step: string) => {
        assert.deepEqual(await scanned(), expected, `${step}: the table`);
        assert.deepEqual(await store.delivery.countDeliveriesByState(), expected, `${step}: the count`);
      };
      const at = (i: number) => ({ from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i }) as const;
      const keyOf = (i: number) => messageKeyOf(testPair(at(i)).outgoing);
      const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
      const rev = { revisionTimeMs: 0, reencryptedAtMs: 0 };
      await counted({ accepted: 0, delivered: 0, failed: 0 }, 'empty');
      for (const i of [1, 2, 3]) await putPair(store, at(i), { delivery: accepted });
      await putPair(store, at(4));
      await putPair(store, at(5), { delivery: { ...accepted, state: 'failed', nextAttemptAtMs: null } });
      await counted({ accepted: 3, delivered: 1, failed: 1 }, 'stored');
      assert.equal(await store.delivery.markDelivered(keyOf(1), rev, T0 + 1, null), true);
      assert.equal(await store.delivery.markDelivered(keyOf(1), rev, T0 + 1, null), false);
      await counted({ accepted: 2, delivered: 2, failed: 1 }, 'markDelivered');
      const row = (await store.delivery.getDelivery(keyOf(2)))!;
      const gaveUp = { state: 'failed' as const, attempt: 9, nextAttemptAtMs: null, lastError: 'beta: timeout' };
      assert.equal(await store.delivery.finishDelivery(keyOf(2), row.rowVersion, gaveUp, T0 + 2), true);
      const retry = { state: 'accepted' as const, attempt: 2, nextAttemptAtMs: T0 + 9, lastError: 'beta: timeout' };
      assert.equal(await store.delivery.finishDelivery(keyOf(3), 1, retry, T0 + 2), true);
      await counted({ accepted: 1, delivered: 2, failed: 2 }, 'finishDelivery');
      // A new revision restarts the delivered row and the failed one; the same revision again changes nothing.
      for (const i of [4, 5]) {
        await putPair(store, { ...at(i), revisionTimeMs: 7 }, { delivery: accepted });
        await putPair(store, { ...at(i), revisionTimeMs: 7 }, { delivery: accepted });
      }
      await counted({ accepted: 3, delivered: 1, failed: 1 }, 'revised');
      // Removed by `shine check`'s repair once its pair has no copy any more.
      await factory.query(store, 'DELETE FROM signed_messages WHERE base_key = ?', [keyOf(1).slice(0, -2)]);
      assert.equal(await store.check.removeDeliveriesWithoutCopy([keyOf(1)]), 1);
      await counted({ accepted: 3, delivered: 0, failed: 1 }, 'removed');
    });

    it('markDelivered asked for at once (answers arriving in a burst): each as if alone, the same mark made once', async () => {
      const store = await fresh();
      const at = (i: number) => ({ from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i }) as const;
      const keyOf = (i: number) => messageKeyOf(testPair(at(i)).outgoing);
      const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
      const rev = { revisionTimeMs: 0, reencryptedAtMs: 0 };
      for (const i of [1, 2, 3]) await putPair(store, at(i), { delivery: accepted });
      await putPair(store, at(4));
      const marks = await Promise.all([
        store.delivery.markDelivered(keyOf(1), rev, T0 + 5, null),
        store.delivery.markDelivered(keyOf(2), { revisionTimeMs: 7, reencryptedAtMs: 0 }, T0 + 5, null),
        store.delivery.markDelivered(keyOf(1), rev, T0 + 6, null),
        store.delivery.markDelivered(keyOf(4), rev, T0 + 5, null),
        store.delivery.markDelivered(keyOf(3), rev, T0 + 7, null),
      ]);
      assert.deepEqual(marks, [true, false, false, false, true]);
      const rows = await Promise.all(
        [1, 2, 3].map(async (i) => {
          const [row] = await factory.query(
            store,
            'SELECT state, updated_at_ms FROM dm_delivery_state WHERE outgoing_key = ?',
            [keyOf(i)],
          );
          return [row?.state, Number(row?.updated_at_ms)];
        }),
      );
      assert.deepEqual(rows, [
        ['delivered', T0 + 5],
        ['accepted', T0 + 2],
        ['delivered', T0 + 7],
      ]);
    });

    it('claims and finishes asked for at once (a backlog’s attempts): each as if alone, one claim of a row wins', async () => {
      const store = await fresh();
      const at = (i: number) => ({ from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i }) as const;
      const keyOf = (i: number) => messageKeyOf(testPair(at(i)).outgoing);
      const accepted = { state: 'accepted' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: T0 };
      for (const i of [1, 2, 3]) await putPair(store, at(i), { delivery: accepted });
      const v = async (i: number) => (await store.delivery.getDelivery(keyOf(i)))!.rowVersion;
      const [v1, v2, v3] = [await v(1), await v(2), await v(3)];
      const claims = await Promise.all([
        store.delivery.claimDelivery(keyOf(1), v1, T0 + 100),
        store.delivery.claimDelivery(keyOf(2), v2, T0 + 100),
        store.delivery.claimDelivery(keyOf(1), v1, T0 + 200), // the same row and version: the first claim won
        store.delivery.claimDelivery(keyOf(3), v3 + 5, T0 + 100), // a stale version
      ]);
      assert.deepEqual(
        claims.map((c) => c && [c.outgoingKey, c.leaseUntilMs, c.rowVersion]),
        [[keyOf(1), T0 + 100, v1 + 1], [keyOf(2), T0 + 100, v2 + 1], null, null],
      );
      const retry = { state: 'accepted' as const, attempt: 2, nextAttemptAtMs: T0 + 30_000, lastError: 'down' };
      const done = { state: 'delivered' as const, attempt: 2, nextAttemptAtMs: null, lastError: null };
      const finished = await Promise.all([
        store.delivery.finishDelivery(keyOf(1), v1 + 1, retry, T0 + 150),
        store.delivery.finishDelivery(keyOf(2), v2 + 1, done, T0 + 150),
        store.delivery.finishDelivery(keyOf(1), v1 + 1, done, T0 + 160), // the row moved on with the first
        store.delivery.finishDelivery(keyOf(3), v3, done, T0 + 150), // unclaimed: its version still matches
      ]);
      assert.deepEqual(finished, [true, true, false, true]);
      const rows = await Promise.all([1, 2, 3].map((i) => store.delivery.getDelivery(keyOf(i))));
      // The same rows in one read, in the order asked (a key twice, one without a row).
      assert.deepEqual(await store.delivery.getDeliveries([keyOf(3), 'alice|nobody|1|1|2', keyOf(1), keyOf(3)]), [
        rows[2],
        null,
        rows[0],
        rows[2],
      ]);
      assert.deepEqual(await store.delivery.getDeliveries([]), []);
      assert.deepEqual(
        rows.map((r) => r && [r.state, r.attempt, r.nextAttemptAtMs, r.leaseUntilMs, r.lastError]),
        [
          ['accepted', 2, T0 + 30_000, null, 'down'],
          ['delivered', 2, null, null, null],
          ['delivered', 2, null, null, null],
        ],
      );
    });

    it('delivery proofs (§13.1): kept with the row by storePair, markDelivered, finishDelivery and setDeliveryProof; shown in history only for the delivered revision', async () => {
      const store = await fresh();
      const proofOf = (messageKey: string, revisionTimeMs: number, storedAtMs: number): DeliveryReceipt => ({
        serverLogin: 'beta',
        messageKey,
        revisionTimeMs,
        reencryptedAtMs: 0,
        storedAtMs,
        containerSha256B64: toBase64(new Uint8Array(32).fill(revisionTimeMs & 0xff)),
        signatureB64: toBase64(new Uint8Array(64).fill(7)),
      });
      const accepted = (at: number) => ({
        state: 'accepted' as const,
        attempt: 1,
        acceptedAtMs: at,
        nextAttemptAtMs: at,
      });
      const mine = async (key: string) =>
        (await history(store, 'alice', 'bob', 10)).items.find((i) => i.messageKey === key);

      // storePair: a delivered row with its proof (a local delivery, or one taken by sync).
      const a = { from: 'alice', to: 'bob', timeMs: T0, nonce: 1 } as const;
      const ka = messageKeyOf(testPair(a).outgoing);
      const pa = proofOf(messageKeyOf(testPair(a).incoming), 0, T0);
      const delivered = { state: 'delivered' as const, attempt: 1, acceptedAtMs: T0, nextAttemptAtMs: null };
      await putPair(store, a, { delivery: { ...delivered, proof: pa } });
      assert.deepEqual((await store.delivery.getDelivery(ka))?.proof, pa);
      assert.deepEqual((await mine(ka))?.deliveryProof, pa);
      const theirs = (await history(store, 'bob', 'alice', 10)).items[0]!;
      assert.equal(theirs.deliveryProof, undefined, 'the incoming copy carries none');

      // markDelivered with a proof; an edit restarts the row without it, and history shows none for the new revision.
      const b = { from: 'alice', to: 'bob', timeMs: T0 + 1, nonce: 2 } as const;
      const kb = messageKeyOf(testPair(b).outgoing);
      await putPair(store, b, { delivery: accepted(T0 + 1) });
      assert.equal((await store.delivery.getDelivery(kb))?.proof, null);
      assert.equal((await mine(kb))?.deliveryProof, undefined);
      const pb = proofOf(messageKeyOf(testPair(b).incoming), 0, T0 + 2);
      assert.equal(await store.delivery.markDelivered(kb, { revisionTimeMs: 0, reencryptedAtMs: 0 }, T0 + 3, pb), true);
      assert.deepEqual((await store.delivery.getDelivery(kb))?.proof, pb);
      assert.deepEqual((await mine(kb))?.deliveryProof, pb);
      await putPair(store, { ...b, revisionTimeMs: T0 + 50 }, { delivery: accepted(T0 + 50) });
      assert.equal((await store.delivery.getDelivery(kb))?.proof, null, 'a new revision has no proof yet');
      assert.equal((await mine(kb))?.deliveryProof, undefined);
      // setDeliveryProof only for a delivered row of that very revision.
      const pb2 = proofOf(pb.messageKey, T0 + 50, T0 + 60);
      const rev2 = { revisionTimeMs: T0 + 50, reencryptedAtMs: 0 };
      assert.equal(await store.delivery.setDeliveryProof(kb, rev2, pb2), false, 'not delivered yet');
      assert.equal(await store.delivery.markDelivered(kb, rev2, T0 + 61, null), true);
      assert.equal(await store.delivery.setDeliveryProof(kb, { revisionTimeMs: 0, reencryptedAtMs: 0 }, pb2), false);
      assert.equal(await store.delivery.setDeliveryProof(kb, rev2, pb2), true);
      assert.deepEqual((await mine(kb))?.deliveryProof, pb2);
      assert.equal(await store.delivery.setDeliveryProof(kb, rev2, null), true);
      assert.equal((await mine(kb))?.deliveryProof, undefined);

      // finishDelivery keeps the proof given with `delivered` (the receipt's own fields only).
      const c = { from: 'alice', to: 'bob', timeMs: T0 + 2, nonce: 3 } as const;
      const kc = messageKeyOf(testPair(c).outgoing);
      await putPair(store, c, { delivery: accepted(T0 + 2) });
      const pc = proofOf(messageKeyOf(testPair(c).incoming), 0, T0 + 4);
      const claimed = (await store.delivery.claimDelivery(kc, 1, T0 + 100))!;
      const done = {
        state: 'delivered' as const,
        attempt: 2,
        nextAttemptAtMs: null,
        lastError: null,
        proof: { ...pc, junk: 'dropped' } as DeliveryReceipt,
      };
      assert.equal(await store.delivery.finishDelivery(kc, claimed.rowVersion, done, T0 + 5), true);
      assert.deepEqual((await store.delivery.getDelivery(kc))?.proof, pc);
      assert.deepEqual(
        (await store.delivery.listDeliveries('delivered', 10)).find((r) => r.outgoingKey === kc)?.proof,
        pc,
      );
    });

    it('wakes accepted rows of a server and counts them; a leased row stays out of the due rows until its lease ends', async () => {
      const store = await fresh();
      await store.directory.putUser(profile('bob', ['beta', 'gamma']), 'imported', T0);
      await store.directory.putUser(profile('carol', ['delta']), 'imported', T0);
      const accepted = (at: number, leaseUntilMs: number | null = null) => ({
        delivery: {
          state: 'accepted' as const,
          attempt: 1,
          acceptedAtMs: at,
          nextAttemptAtMs: at + 10_000,
          leaseUntilMs,
        },
      });
      await putPair(store, { from: 'alice', to: 'bob', timeMs: T0, nonce: 1 }, accepted(T0));
      // In its first attempt: leased to T0 + 1 000.
      const leased = await putPair(
        store,
        { from: 'alice', to: 'bob', timeMs: T0 + 5, nonce: 2 },
        accepted(T0 + 5, T0 + 1000),
      );
      await putPair(store, { from: 'alice', to: 'carol', timeMs: T0, nonce: 3 }, accepted(T0));
      assert.equal(await store.delivery.countAcceptedFor('gamma'), 2);
      assert.equal(await store.delivery.countAcceptedFor('delta'), 1);
      assert.equal(await store.delivery.wakeDeliveriesFor('gamma', T0 + 100), 2);
      const due = await store.delivery.dueDeliveries(T0 + 100, 10);
      assert.deepEqual(
        due.map((r) => r.recipientLogin),
        ['bob'],
      );
      assert.notEqual(due[0]!.outgoingKey, leased.outgoing.messageKey, 'the leased row is not due while leased');
      assert.equal(await store.delivery.wakeDeliveriesFor('gamma', T0 + 100), 0, 'already due');
      const after = await store.delivery.dueDeliveries(T0 + 1000, 10);
      assert.equal(after.length, 2, 'due once its lease ran out');
      assert.equal(await store.delivery.countAcceptedFor('nowhere'), 0);
    });

    it('directory: users with their access servers, servers, shared users', async () => {
      const store = await fresh();
      await store.directory.putUser(profile('bob', ['beta', 'gamma']), 'imported', T0);
      await store.directory.putUser(profile('carol', ['beta']), 'local', T0);
      await store.directory.putUser(profile('dan', ['gamma', 'delta']), 'static', T0);
      assert.deepEqual(await store.directory.getUser('bob'), {
        profile: profile('bob', ['beta', 'gamma']),
        source: 'imported',
        fetchedAtMs: T0,
      });
      assert.equal(await store.directory.getUser('nobody'), null);
      assert.deepEqual(await store.directory.peerServersOf('gamma'), ['beta', 'delta']);
      assert.deepEqual(await store.directory.sharedUsers('beta', 'gamma'), ['bob']);
      await store.directory.putUser(profile('bob', ['beta'], 2), 'imported', T0 + 1);
      assert.deepEqual(await store.directory.sharedUsers('beta', 'gamma'), []);
      assert.equal((await store.directory.getUser('bob'))?.profile.version, 2);
      const d = (login: string, url: string) => ({
        serverLogin: login,
        wsUrl: url,
        signKeyB64: 'k',
        signatureB64: 's',
      });
      await store.directory.putServer(d('zeta', 'ws://z'), 'peer');
      await store.directory.putServer(d('beta', 'ws://b'), 'static');
      await store.directory.putServer(d('zeta', 'ws://z2'), 'peer');
      assert.deepEqual(await store.directory.getServer('zeta'), { descriptor: d('zeta', 'ws://z2'), source: 'peer' });
      assert.equal(await store.directory.getServer('none'), null);
      assert.deepEqual(
        (await store.directory.listServers()).map((s) => s.descriptor.serverLogin),
        ['beta', 'zeta'],
      );
    });

    it('chains: appends follow the head, say why not otherwise, and globalSeq grows with every append', async () => {
      const store = await fresh();
      const h = (login: string, i: number, v = 'a') => `${login}-${i}-${v}`.padEnd(64, '0');
      const blk = (login: string, i: number, v = 'a', prev = i === 0 ? ZERO_HASH_HEX : h(login, i - 1)) => ({
        login,
        index: i,
        prevHash: prev,
        hash: h(login, i, v),
        timeMs: T0 + i,
        bytes: new Uint8Array([i, v.charCodeAt(0)]),
      });
      assert.equal(await store.chains.head('alice'), null);
      const g = await store.chains.append(blk('alice', 0));
      assert.equal(g.link, 'stored');
      assert.equal((await store.chains.append(blk('bob', 1))).link, 'gap');
      assert.equal((await store.chains.append(blk('bob', 0, 'a', h('x', 0)))).link, 'mismatch');
      const b0 = await store.chains.append(blk('bob', 0));
      const a1 = await store.chains.append(blk('alice', 1));
      assert.ok(g.globalSeq! < b0.globalSeq! && b0.globalSeq! < a1.globalSeq!);
      assert.deepEqual(await store.chains.append(blk('alice', 0)), {
        link: 'known',
        head: a1.head,
        globalSeq: g.globalSeq,
      });
      assert.equal((await store.chains.append(blk('alice', 1, 'b'))).link, 'diverged');
      assert.equal((await store.chains.append(blk('alice', 2, 'a', h('alice', 1, 'b')))).link, 'mismatch');
      assert.equal((await store.chains.append(blk('alice', 3))).link, 'gap');
      assert.equal((await store.chains.append({ ...blk('alice', 2), timeMs: T0 })).link, 'time');
      assert.deepEqual(await store.chains.head('alice'), {
        login: 'alice',
        index: 1,
        hash: h('alice', 1),
        timeMs: T0 + 1,
        globalSeq: a1.globalSeq,
      });
      const rows = await store.chains.blocks('alice', 0, 10);
      assert.deepEqual(
        rows.map((r) => [r.index, r.hash, [...r.bytes]]),
        [
          [0, h('alice', 0), [0, 97]],
          [1, h('alice', 1), [1, 97]],
        ],
      );
      assert.equal(await store.chains.hashAt('alice', 1), h('alice', 1));
      assert.equal(await store.chains.hashAt('alice', 2), null);
      // Heads in globalSeq order after a cursor: bob's head is older than alice's.
      assert.deepEqual(
        (await store.chains.headsAfter(0, 10)).map((x) => x.login),
        ['bob', 'alice'],
      );
      assert.deepEqual(
        (await store.chains.headsAfter(b0.globalSeq!, 10)).map((x) => x.login),
        ['alice'],
      );
      // A replacement takes a new globalSeq, and removes the marker.
      assert.deepEqual(await store.chains.markResync({ login: 'alice', source: 'alpha', startedAtMs: 5 }), {
        login: 'alice',
        source: 'alpha',
        startedAtMs: 5,
      });
      assert.equal((await store.chains.markResync({ login: 'alice', source: 'beta', startedAtMs: 9 })).source, 'alpha');
      assert.deepEqual(await store.chains.resyncMarkers(), [{ login: 'alice', source: 'alpha', startedAtMs: 5 }]);
      const other = [blk('alice', 0), blk('alice', 1, 'b'), blk('alice', 2, 'b', h('alice', 1, 'b'))];
      const { replaced, head } = await store.chains.replace('alice', other);
      assert.equal(replaced?.hash, h('alice', 1));
      assert.equal(head.index, 2);
      assert.ok(head.globalSeq > a1.globalSeq!);
      assert.deepEqual(await store.chains.resyncMarkers(), []);
      assert.deepEqual(
        (await store.chains.blocks('alice', 1, 10)).map((r) => r.hash),
        [h('alice', 1, 'b'), h('alice', 2, 'b')],
      );
      assert.deepEqual(
        (await store.chains.headsAfter(0, 10)).map((x) => x.login),
        ['bob', 'alice'],
      );
      // Partner cursors and acks (an ack never moves back).
      assert.equal(await store.chains.partnerCursor('beta'), 0);
      await store.chains.setPartnerCursor('beta', 42);
      assert.equal(await store.chains.partnerCursor('beta'), 42);
      await store.chains.ackPartner({ partner: 'beta', login: 'alice', index: 2, hash: h('alice', 2), ackedAtMs: 1 });
      await store.chains.ackPartner({ partner: 'beta', login: 'alice', index: 1, hash: h('alice', 1), ackedAtMs: 2 });
      assert.deepEqual(await store.chains.partnerAcks('alice'), [
        { partner: 'beta', login: 'alice', index: 2, hash: h('alice', 2), ackedAtMs: 1 },
      ]);
    });

    it('chains: concurrent appends to many chains get distinct, commit-ordered globalSeqs', async () => {
      const store = await fresh();
      const logins = Array.from({ length: 20 }, (_, i) => `user${i}`);
      const results = await Promise.all(logins.map((login) => store.chains.append(genesisInput(login))));
      const seqs = results.map((r) => r.globalSeq!);
      assert.equal(new Set(seqs).size, logins.length);
      const heads = await store.chains.headsAfter(0, 100);
      assert.deepEqual(
        heads.map((x) => x.globalSeq),
        [...seqs].sort((a, b) => a - b),
      );
    });

    it('chains: a GetChainHeads reader following its cursor during concurrent appends never skips a chain', async () => {
      const store = await fresh();
      const logins = Array.from({ length: 60 }, (_, i) => `cursor${i}`);
      const seen = new Set<string>();
      let cursor = 0;
      let done = false;
      const reader = (async () => {
        for (;;) {
          const last = done;
          for (const h of await store.chains.headsAfter(cursor, 1000)) {
            seen.add(h.login);
            cursor = h.globalSeq;
          }
          if (last) return;
          // SQLite's reads resolve at once: give its group commit (setImmediate) a turn.
          await new Promise((resolve) => setImmediate(resolve));
        }
      })();
      await Promise.all(logins.map((login) => store.chains.append(genesisInput(login))));
      done = true;
      await reader;
      assert.deepEqual([...seen].sort(), [...logins].sort());
    });

    it('nonces: a nonce is accepted once until it is older than the window', async () => {
      const store = await fresh();
      const results = await Promise.all([
        store.nonces.rememberS2sNonce('beta', 'n1', T0, T0 - 1000),
        store.nonces.rememberS2sNonce('beta', 'n1', T0, T0 - 1000),
      ]);
      assert.deepEqual(results.sort(), [false, true]);
      assert.equal(await store.nonces.rememberS2sNonce('gamma', 'n1', T0, T0 - 1000), true, 'per server');
      assert.equal(await store.nonces.rememberS2sNonce('beta', 'n1', T0 + 10, T0 + 1), true, 'pruned');
    });

    it('push: upserts keep the newest per owner, results are recorded, keepMeta keeps the first value', async () => {
      const store = await fresh();
      const sub = (endpoint: string, owner = 'alice', nowMs = T0) => ({
        endpoint,
        ownerLogin: owner,
        deviceId: 'd1',
        p256dh: 'p',
        auth: 'a',
        nowMs,
        maxPerOwner: 2,
      });
      assert.deepEqual(await store.push.upsertSubscription(sub('https://p/1')), { dropped: 0 });
      assert.deepEqual(await store.push.upsertSubscription(sub('https://p/2')), { dropped: 0 });
      assert.deepEqual(await store.push.upsertSubscription(sub('https://p/1', 'alice', T0 + 5)), { dropped: 0 });
      assert.deepEqual(await store.push.upsertSubscription(sub('https://p/3')), { dropped: 1 });
      assert.deepEqual(
        (await store.push.subscriptionsOf('alice')).map((s) => s.endpoint),
        ['https://p/1', 'https://p/3'],
      );
      // Each owner's upserts are ordered among that owner's; an endpoint taken over by bob is his newest.
      await store.push.upsertSubscription(sub('https://b/1', 'bob'));
      await store.push.upsertSubscription(sub('https://b/2', 'bob'));
      assert.deepEqual(await store.push.upsertSubscription(sub('https://p/3', 'bob', T0 + 6)), { dropped: 1 });
      assert.deepEqual(
        (await store.push.subscriptionsOf('bob')).map((s) => s.endpoint),
        ['https://b/2', 'https://p/3'],
      );
      assert.deepEqual(await store.push.upsertSubscription(sub('https://b/2', 'bob', T0 + 7)), { dropped: 0 });
      assert.deepEqual(
        (await store.push.subscriptionsOf('bob')).map((s) => s.endpoint),
        ['https://p/3', 'https://b/2'],
      );
      // Asked for in one turn (PostgreSQL reads them in one statement): each caller gets its owner's own.
      const asked = await Promise.all(['bob', 'carol', 'alice', 'bob'].map((o) => store.push.subscriptionsOf(o)));
      assert.deepEqual(
        asked.map((list) => list.map((x) => `${x.ownerLogin} ${x.endpoint}`)),
        [['bob https://p/3', 'bob https://b/2'], [], ['alice https://p/1'], ['bob https://p/3', 'bob https://b/2']],
      );
      assert.notEqual(asked[0], asked[3]);
      await store.push.recordPushResult('https://p/1', T0 + 6, '410');
      await store.push.recordPushResult('https://p/1', T0 + 7, 'timeout');
      let s = (await store.push.getSubscription('https://p/1'))!;
      assert.deepEqual(
        [s.consecutiveFailures, s.lastError, s.lastErrorAtMs, s.updatedAtMs, s.createdAtMs],
        [2, 'timeout', T0 + 7, T0 + 5, T0],
      );
      await store.push.recordPushResult('https://p/1', T0 + 8, null);
      s = (await store.push.getSubscription('https://p/1'))!;
      assert.deepEqual([s.consecutiveFailures, s.lastSuccessAtMs], [0, T0 + 8]);
      await store.push.recordPushResult('https://gone', T0, null);
      assert.equal(await store.push.deleteSubscription('https://p/1', 'bob'), 0);
      assert.equal(await store.push.deleteSubscription('https://p/1', 'alice'), 1);
      assert.equal(await store.push.deleteSubscription('https://p/3', null), 1);
      assert.equal(await store.push.getSubscription('https://p/3'), null);
      const kept = await Promise.all([store.push.keepMeta('vapid', 'one'), store.push.keepMeta('vapid', 'two')]);
      assert.equal(kept[0], kept[1]);
      assert.equal(await store.meta.getMeta('vapid'), kept[0]);
    });

    it('processes: heartbeats, live processes, exclusive work', async () => {
      const store = await fresh();
      await store.processes.heartbeat({ processId: 'p1', startedAtMs: T0, heartbeatAtMs: T0, redis: true });
      await store.processes.heartbeat({ processId: 'p2', startedAtMs: T0, heartbeatAtMs: T0, redis: false });
      await store.processes.heartbeat({ processId: 'p1', startedAtMs: T0 + 99, heartbeatAtMs: T0 + 10, redis: true });
      assert.deepEqual(await store.processes.liveProcesses(T0 + 5), [
        { processId: 'p1', startedAtMs: T0, heartbeatAtMs: T0 + 10, redis: true },
      ]);
      assert.equal((await store.processes.liveProcesses(T0)).length, 2);
      await store.processes.removeProcess('p1');
      assert.deepEqual(
        (await store.processes.liveProcesses(0)).map((p) => p.processId),
        ['p2'],
      );
      let ran = 0;
      assert.equal(await store.processes.exclusively('sync', async () => void ran++), true);
      assert.equal(ran, 1);
      // The lock is released after fn, also when fn throws.
      await assert.rejects(
        store.processes.exclusively('sync', () => Promise.reject(new Error('boom'))),
        /boom/,
      );
      assert.equal(await store.processes.exclusively('sync', async () => void ran++), true);
      assert.equal(ran, 2);
    });
    it('check: a clean database has no problem; corruption is found by kind; repair fixes what it says', async () => {
      const store = await fresh();
      const q = (sql: string, params: readonly unknown[] = []) => factory.query(store, sql, params);
      const check = (repair: boolean) =>
        checkDatabase({ store, verifier: inlineBulkVerifier(), nowMs: () => T0 + 1_000 }, { repair });
      for (const login of ['alice', 'bob'])
        await store.directory.putUser(
          { ...profile(login, ['here']), signKeyB64: toBase64(publicKeyOf(login)) },
          'local',
          T0,
        );
      await store.directory.putServer(
        { serverLogin: 'here', wsUrl: 'ws://here.invalid/ws', signKeyB64: 'k', signatureB64: 's' },
        'self',
      );
      const specs = [1, 2, 3].map((i) => ({ from: 'alice', to: 'bob', timeMs: T0 + i, nonce: i }));
      for (const spec of specs) await putPair(store, spec);
      await store.devices.touchDevice('bob', 'phone', T0);
      await store.devices.ackForDevice('bob', 'phone', [messageKeyOf(testPair(specs[0]!).incoming)], T0);

      const clean = await check(false);
      assert.deepEqual(
        [clean.containers.checked, clean.problems, clean.remaining, clean.integrity.problems],
        [6, 0, 0, []],
      );
      assert.deepEqual(Object.values(clean.orphans), [0, 0, 0, 0]);

      // A signature byte flipped, a delivery row of no message, an outbox row of no message, an
      // acknowledgement of a device that does not exist.
      const badKey = messageKeyOf(testPair(specs[1]!).incoming);
      const [row] = await q('SELECT blob FROM signed_messages WHERE message_key = ?', [badKey]);
      const blob = Buffer.from(row!.blob as Uint8Array);
      blob[blob.length - 1]! ^= 0x01;
      await q('UPDATE signed_messages SET blob = ? WHERE message_key = ?', [blob, badKey]);
      const ghost = 'alice|bob|99|9|2';
      await q(
        `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
           reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version,
           last_error, updated_at_ms) VALUES (?, 'alice|bob|99|9', 'alice', 'bob', 0, 0, 'accepted', 1, 1, 1, NULL, 1, NULL, 1)`,
        [ghost],
      );
      await q(
        `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms)
         VALUES ('alice', ?, ?, 1, ?, ?, 99)`,
        [ghost, `${ghost}:0:0`, Buffer.from([0, 0, 0, 2, 1, 2]), false],
      );
      await q(
        `INSERT INTO session_deliveries (owner_login, device_id, message_key, revision_time_ms, reencrypted_at_ms,
           acked_at_ms) VALUES ('bob', 'ghost-device', ?, 0, 0, 1)`,
        [messageKeyOf(testPair(specs[2]!).incoming)],
      );

      const found = await check(false);
      assert.equal(found.containers.badSignature, 1);
      assert.deepEqual(found.examples.badSignature, [badKey]);
      assert.deepEqual(found.orphans, {
        deliveryWithoutCopy: 1,
        acksWithoutCopy: 0,
        acksWithoutDevice: 1,
        outboxWithoutCopy: 1,
      });
      assert.deepEqual([found.problems, found.remaining], [3, 3]);
      assert.deepEqual(Object.values(found.repaired), [false, 0, 0, 0, 0, 0]);

      const repaired = await check(true);
      assert.deepEqual(repaired.repaired, {
        indexesRebuilt: false,
        deliveryRowsRemoved: 1,
        acksRemoved: 1,
        outboxRowsRemoved: 1,
        copiesRestored: 0,
        outboxRowsRewritten: 0,
      });
      // The badly signed copy is reported, never deleted.
      assert.deepEqual([repaired.problems, repaired.remaining], [3, 1]);
      assert.ok(await store.messages.getCopy(badKey));
      const after = await check(false);
      assert.deepEqual([after.problems, after.containers.badSignature], [1, 1]);
      assert.deepEqual(Object.values(after.orphans), [0, 0, 0, 0]);
      assert.equal(await store.delivery.getDelivery(ghost), null);

      // A copy lost while its outbox row is left: repair stores it again from the row's signed blobs.
      const lost = messageKeyOf(testPair(specs[0]!).outgoing);
      await q('DELETE FROM signed_messages WHERE message_key = ?', [lost]);
      assert.equal((await check(false)).orphans.outboxWithoutCopy, 1);
      const restored = await check(true);
      assert.equal(restored.repaired.copiesRestored, 1);
      assert.equal((await store.messages.getCopy(lost))?.messageKey, lost);
      assert.equal((await check(false)).orphans.outboxWithoutCopy, 0);

      // An outbox row lost, another left at an older revision: both written again from their copy.
      const [missing, behind] = [
        messageKeyOf(testPair(specs[2]!).incoming),
        messageKeyOf(testPair(specs[2]!).outgoing),
      ];
      await q('DELETE FROM dm_sync_outbox WHERE primary_message_key = ?', [missing]);
      await q('UPDATE dm_sync_outbox SET sync_id = ?, synced = ? WHERE primary_message_key = ?', [
        `${behind}:0:0x`,
        true,
        behind,
      ]);
      const stale = await check(false);
      assert.deepEqual(stale.inconsistencies, { outboxBehindCopy: 1, deliveryAheadOfCopy: 0, outboxMissing: 1 });
      assert.deepEqual(stale.examples.outboxMissing, [`bob|${missing}`]);
      assert.equal((await check(true)).repaired.outboxRowsRewritten, 2);
      const rewritten = await check(false);
      assert.deepEqual([rewritten.inconsistencies.outboxBehindCopy, rewritten.inconsistencies.outboxMissing], [0, 0]);
      const aliceRows = await store.replication.dmSyncPage({
        owner: 'alice',
        ackSyncIds: [],
        afterStoredAtMs: -1,
        afterKey: '',
        limit: 100,
        maxBytes: 1 << 30,
      });
      const rewrittenRow = aliceRows.items.find((i) => i.primaryMessageKey === behind);
      // The pair's outgoing copy carries both blobs again, unsynced.
      assert.deepEqual(rewrittenRow?.syncId, `${behind}:0:0`);
      assert.equal(rewrittenRow?.blobs.length, 2);
    });
  });
}
