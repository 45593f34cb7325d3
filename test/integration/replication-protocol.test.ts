/**
 * The replication protocol (docs/protocol.md §7, §8) against real in-process servers, driven both by the servers'
 * own puller (POST /admin/sync, `shine sync`) and by a test socket that authenticates as alpha2 with
 * alpha2's key, so a test can stop between the steps of a cycle: fetch a page, change the data, ACK.
 * alpha1 and alpha2 are the access servers of alice, erin and fay; carol is on alpha1 only, dave on bravo.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { fromBase64, toBase64, utf8 } from '../../src/protocol/bytes.js';
import { MAX_FRAME } from '../../src/protocol/envelope.js';
import type { OpResults } from '../../src/protocol/ops.js';
import { assertError } from '../helpers/assert.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import type { Pair } from '../helpers/replication.js';
import {
  ADMIN_TOKEN,
  adminCall,
  connectAsServer,
  dmSnapshot,
  fullHistory,
  metricValue,
  outboxCounts,
  pairOf,
  replicationServer,
  seedFor,
  sendAll,
  syncNow,
} from '../helpers/replication.js';
import { connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

type DmPage = OpResults['DmSyncBatch'];
type SettingsPage = OpResults['UserSettingsSyncBatch'];

const A1 = 0;
const A2 = 1;
const B = 2;
const both = ['alpha1', 'alpha2'];
const [alice, erin, fay] = ['alice', 'erin', 'fay'].map((login) => makeUser(login, both, seedFor(login))) as [
  ReturnType<typeof makeUser>,
  ReturnType<typeof makeUser>,
  ReturnType<typeof makeUser>,
];
const carol = makeUser('carol', ['alpha1'], seedFor('carol'));
const dave = makeUser('dave', ['bravo'], seedFor('dave'));

const rowBytes = (p: Pair): number => p.incoming.bytes.length + p.outgoing.bytes.length;
const keysOf = (page: DmPage): string[] => page.items.map((i) => i.primaryMessageKey);
const cursorAfter = (page: DmPage) => ({ afterStoredAtMs: page.nextStoredAtMs, afterMessageKey: page.nextMessageKey });

describe('replication protocol', () => {
  let net: TestNetwork;
  const srv = (i: number) => net.servers[i]!;
  let carolA1: RawClient;

  before(async () => {
    // These tests authenticate as alpha2 at alpha1 again and again, and a peer that authenticates again
    // starts a cycle with it soon after (sync on return). Such a cycle, landing in a later test while that
    // test runs its own cycles, would move rows the test counts; here cycles run only when a test asks.
    const quiet = { syncOnReturnMs: 600_000 };
    net = await startNetwork({
      federate: true,
      servers: [
        replicationServer('alpha1', quiet),
        replicationServer('alpha2', quiet),
        replicationServer('bravo', quiet),
      ],
    });
    for (const user of [alice, erin, fay]) {
      for (const i of [A1, A2]) await (await connectUser(srv(i).wsUrl, user, `${user.login}-${i}`)).close();
    }
    await (await connectUser(srv(B).wsUrl, dave, 'dave-b')).close();
    carolA1 = await connectUser(srv(A1).wsUrl, carol, 'carol-a1');
  });
  after(async () => {
    await carolA1?.close();
    await net?.close();
  });

  it('honours limit and maxBytes (a row larger than maxBytes comes alone) on both batch ops', async () => {
    await using erinA1 = await connectUser(srv(A1).wsUrl, erin, 'erin-a1');
    const t = Date.now() - 60_000;
    const [s1, s2, s3, big, s4] = [20, 20, 20, 40_000, 20].map((bodyBytes, i) =>
      pairOf({ from: 'erin', to: 'carol', timeMs: t + i, nonce: i }, { kind: 'text', bodyBytes }),
    );
    for (const p of [s1!, s2!, s3!, big!, s4!]) await sendAll(erinA1, [{ pair: p }]);
    await erinA1.call('SetUserSetting', { key: 'a', valueB64: toBase64(utf8('first')), updatedAtMs: t });
    await erinA1.call('SetUserSetting', { key: 'b', valueB64: toBase64(utf8('second')), updatedAtMs: t });
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    const dm = (extra: object) =>
      asA2.call<DmPage>('DmSyncBatch', { ownerLogin: 'erin', afterStoredAtMs: 0, afterMessageKey: '', ...extra });

    const limited = await dm({ limit: 2 });
    assert.deepEqual(keysOf(limited), [s1!.outgoingKey, s2!.outgoingKey]);
    assert.equal(limited.hasMore, true);
    assert.equal(limited.nextMessageKey, s2!.outgoingKey);
    assert.equal(limited.items[0]!.syncId, `${s1!.outgoingKey}:0:0`);
    assert.deepEqual(keysOf(await dm({ limit: 2, ...cursorAfter(limited) })), [s3!.outgoingKey, big!.outgoingKey]);

    const maxBytes = rowBytes(s1!) + rowBytes(s2!) + rowBytes(s3!);
    const p1 = await dm({ maxBytes });
    assert.deepEqual([keysOf(p1), p1.hasMore], [[s1!.outgoingKey, s2!.outgoingKey, s3!.outgoingKey], true]);
    const p2 = await dm({ maxBytes, ...cursorAfter(p1) });
    assert.deepEqual([keysOf(p2), p2.hasMore], [[big!.outgoingKey], true]);
    assert.deepEqual(
      p2.items[0]!.blobsB64.map((b) => fromBase64(b)!.length),
      [big!.incoming.bytes.length, big!.outgoing.bytes.length],
      'a pair row carries the incoming then the outgoing copy',
    );
    const p3 = await dm({ maxBytes, ...cursorAfter(p2) });
    assert.deepEqual([keysOf(p3), p3.hasMore], [[s4!.outgoingKey], false]);
    const p4 = await dm({ maxBytes, ...cursorAfter(p3) });
    assert.deepEqual(
      [p4.items, p4.hasMore, p4.nextStoredAtMs, p4.nextMessageKey],
      [[], false, p3.nextStoredAtMs, p3.nextMessageKey],
    );
    assert.deepEqual(keysOf(await dm({ maxBytes: 1 })), [s1!.outgoingKey]);

    const settings = (extra: object) =>
      asA2.call<SettingsPage>('UserSettingsSyncBatch', {
        ownerLogin: 'erin',
        afterStoredAtMs: 0,
        afterKey: '',
        ...extra,
      });
    const one = await settings({ limit: 1 });
    assert.deepEqual([one.items.map((i) => [i.key, i.syncId]), one.hasMore], [[['a', `a:${t}`]], true]);
    assert.deepEqual(
      (await settings({ maxBytes: 1 })).items.map((i) => i.key),
      ['a'],
    );
    const rest = await settings({ afterStoredAtMs: one.nextStoredAtMs, afterKey: one.nextKey });
    assert.deepEqual([rest.items.map((i) => i.key), rest.hasMore], [['b'], false]);
    // Pages without ACKs change nothing.
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'erin'), { owner: 'erin', synced: 0, unsynced: 5 });
  });

  it('refuses other servers (NOT_PEER), bad owners and unauthenticated callers, changing nothing', async () => {
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    const pending = (await asA2.call<DmPage>('DmSyncBatch', { ownerLogin: 'erin' })).items.map((i) => i.syncId);
    await using asBravo = await connectAsServer(srv(A1).wsUrl, 'bravo', 'alpha1');
    for (const op of ['DmSyncBatch', 'UserSettingsSyncBatch', 'MarkAllUserSettingsUnsynced']) {
      assertError(await asBravo.request(op, { ownerLogin: 'erin', ackSyncIds: pending }), 403, 'NOT_PEER', { op });
    }
    for (const op of ['DmSyncBatch', 'UserSettingsSyncBatch']) {
      assertError(await asA2.request(op, { ownerLogin: '' }), 400, 'EMPTY_OWNER_LOGIN');
      assertError(await asA2.request(op, {}), 400, 'EMPTY_OWNER_LOGIN');
      // carol has only alpha1: alpha2 is not her peer.
      assertError(await asA2.request(op, { ownerLogin: 'carol' }), 403, 'NOT_PEER');
      // dave is unknown to alpha1, then known (imported when carol writes to him) but not its user.
      assertError(await asA2.request(op, { ownerLogin: 'dave' }), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
      assertError(
        await asA2.request(op, { ownerLogin: 'erin', sourceServerLogin: 'bravo', ackSyncIds: pending }),
        403,
        'SOURCE_MISMATCH',
      );
    }
    await sendAll(carolA1, [{ pair: pairOf({ from: 'carol', to: 'dave', timeMs: Date.now(), nonce: 1 }) }]);
    assertError(await asA2.request('DmSyncBatch', { ownerLogin: 'dave' }), 403, 'LOCAL_SERVER_NOT_ACCESS_SERVER');
    assertError(await asA2.request('MarkAllUserSettingsUnsynced', {}), 403, 'FORBIDDEN');
    await using bare = await connectRaw(srv(A1).wsUrl);
    assertError(
      await bare.request('DmSyncBatch', { ownerLogin: 'erin', ackSyncIds: pending }),
      401,
      'NOT_AUTHENTICATED',
    );
    assertError(
      await carolA1.request('MarkAllUserSettingsUnsynced', { ownerLogin: 'carol' }),
      401,
      'NOT_AUTHENTICATED',
    );
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'erin'), { owner: 'erin', synced: 0, unsynced: 5 });

    // A server that is not federated answers every server op with LOCAL_SERVER_NOT_CONFIGURED.
    await using local = await startNetwork({ servers: [{ serverLogin: 'local' }] });
    await using c = await connectRaw(local.servers[0]!.wsUrl);
    assertError(await c.request('DmSyncBatch', { ownerLogin: 'erin' }), 500, 'LOCAL_SERVER_NOT_CONFIGURED');
  });

  it('MarkAllUserSettingsUnsynced from the other access server and POST /admin/mark-unsynced answer {updated, dmUpdated}', async () => {
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    // ACK everything, page by page, as a puller does (the last ACK rides on the request that comes back empty).
    for (const op of ['DmSyncBatch', 'UserSettingsSyncBatch']) {
      let next: Record<string, unknown> = { afterStoredAtMs: 0 };
      for (;;) {
        const got = await asA2.call<DmPage & SettingsPage>(op, { ownerLogin: 'erin', limit: 2, ...next });
        if (got.items.length === 0) break;
        next = {
          afterStoredAtMs: got.nextStoredAtMs,
          afterMessageKey: got.nextMessageKey,
          afterKey: got.nextKey,
          ackSyncIds: got.items.map((i) => i.syncId),
        };
      }
    }
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'erin'), { owner: 'erin', synced: 5, unsynced: 0 });
    assert.deepEqual(await asA2.call('MarkAllUserSettingsUnsynced', { ownerLogin: 'erin' }), {
      updated: 2,
      dmUpdated: 5,
    });
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'erin'), { owner: 'erin', synced: 0, unsynced: 5 });
    assert.equal((await asA2.call<SettingsPage>('UserSettingsSyncBatch', { ownerLogin: 'erin' })).items.length, 2);

    // The admin route: rows that were already unsynced are not counted again.
    assert.deepEqual(await adminCall(srv(A1).httpUrl, 'POST', '/admin/mark-unsynced?owner=erin'), {
      updated: 0,
      dmUpdated: 0,
    });
    const wrong = await fetch(`${srv(A1).httpUrl}/admin/mark-unsynced?owner=erin`, {
      method: 'POST',
      headers: { authorization: 'Bearer nope' },
    });
    assert.equal(wrong.status, 401);
  });

  it('an edit made during a cycle is not lost to the ACK of its older revision', async () => {
    await net.stop(A2);
    await using aliceA1 = await connectUser(srv(A1).wsUrl, alice, 'alice-a1');
    const t = Date.now() - 60_000;
    const m = pairOf({ from: 'alice', to: 'carol', timeMs: t, nonce: 7 }, { kind: 'text', text: 'first version' });
    await sendAll(aliceA1, [{ pair: m }]);

    // A cycle fetches the page with revision 0 ...
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    const page1 = await asA2.call<DmPage>('DmSyncBatch', {
      ownerLogin: 'alice',
      afterStoredAtMs: 0,
      afterMessageKey: '',
    });
    assert.deepEqual(
      page1.items.map((i) => i.syncId),
      [`${m.outgoingKey}:0:0`],
    );
    // ... alice edits the message before the page's ACK arrives ...
    const editAt = Date.now();
    const edit = pairOf(
      { from: 'alice', to: 'carol', timeMs: t, nonce: 7, revisionTimeMs: editAt },
      { kind: 'text', text: 'second version' },
    );
    await sendAll(aliceA1, [{ pair: edit }]);
    // ... and the ACK of revision 0 leaves revision editAt unsynced: the same cycle's next page has it.
    const page2 = await asA2.call<DmPage>('DmSyncBatch', {
      ownerLogin: 'alice',
      ...cursorAfter(page1),
      ackSyncIds: page1.items.map((i) => i.syncId),
    });
    assert.deepEqual(
      page2.items.map((i) => [i.syncId, i.blobsB64]),
      [[`${m.outgoingKey}:${editAt}:0`, [edit.incomingBlobB64, edit.outgoingBlobB64]]],
    );
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'alice'), { owner: 'alice', synced: 0, unsynced: 1 });
    // That cycle dies here, without acking the edit. alpha2's own next cycle (at start-up) delivers it.
    await asA2.close();

    await net.start(A2);
    await syncNow(srv(A2).httpUrl);
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'alice'), { owner: 'alice', synced: 1, unsynced: 0 });
    await using aliceA2 = await connectUser(srv(A2).wsUrl, alice, 'alice-a2');
    const [item] = await fullHistory(aliceA2, 'carol');
    assert.deepEqual(
      [item?.messageKey, item?.revisionTimeMs, item?.blobB64],
      [m.outgoingKey, editAt, edit.outgoingBlobB64],
    );
  });

  it('a row committed behind the cursor while a cycle runs still arrives in that cycle (a second pass from the start)', async () => {
    const gus = makeUser('gus', both, seedFor('gus'));
    for (const i of [A1, A2]) await (await connectUser(srv(i).wsUrl, gus, `gus-${i}`)).close();
    await using gusA1 = await connectUser(srv(A1).wsUrl, gus, 'gus-a1');
    const t = Date.now() - 60_000;
    await sendAll(
      gusA1,
      [0, 1, 2].map((i) => ({ pair: pairOf({ from: 'gus', to: 'carol', timeMs: t + i, nonce: i }) })),
    );
    // The race, made certain: right after alpha1 reads gus's first page, a pair commits with a storedAtMs
    // before that page's first row (as when its time was taken just before the read, in the same
    // millisecond). The cursor has passed it.
    const store = srv(A1).ctx.store;
    const outboxes = store.replication;
    const readPage = outboxes.dmSyncPage.bind(outboxes);
    const late = pairOf({ from: 'gus', to: 'carol', timeMs: t + 10, nonce: 10 });
    let injected = false;
    outboxes.dmSyncPage = async (q) => {
      const page = await readPage(q);
      if (!injected && q.owner === 'gus' && page.items.length > 0) {
        injected = true;
        const nowMs = page.items[0]!.storedAtMs - 1;
        await store.messages.storePair({
          incoming: late.incoming,
          outgoing: late.outgoing,
          nowMs,
          outbox: { owners: new Map([['gus', false]]) },
          delivery: null,
        });
      }
      return page;
    };
    try {
      const summary = await syncNow(srv(A2).httpUrl);
      assert.ok(injected);
      assert.equal(summary.errors, 0);
      assert.deepEqual(
        await outboxCounts(srv(A1).httpUrl, 'gus'),
        { owner: 'gus', synced: 4, unsynced: 0 },
        'the late row was pulled and acked too',
      );
      assert.ok((await dmSnapshot(srv(A2), 'gus')).copies.some((c) => c.key === late.outgoingKey));
    } finally {
      outboxes.dmSyncPage = readPage;
    }
  });

  it('the puller asks for the pages ahead while it stores one, and stores each once', async () => {
    const hal = makeUser('hal', both, seedFor('hal'));
    for (const i of [A1, A2]) await (await connectUser(srv(i).wsUrl, hal, `hal-${i}`)).close();
    // Three pages (500, 500, 1) of hal's at alpha1, stored there directly.
    const N = 1001;
    const t = Date.now() - 120_000;
    const source = srv(A1).ctx.store;
    await Promise.all(
      Array.from({ length: N }, (_, i) => {
        const p = pairOf({ from: 'hal', to: 'carol', timeMs: t + i, nonce: i });
        return source.messages.storePair({
          incoming: p.incoming,
          outgoing: p.outgoing,
          nowMs: t + i,
          outbox: { owners: new Map([['hal', false]]) },
          delivery: null,
        });
      }),
    );
    // alpha1 counts the pages it serves hal; alpha2 holds hal's first stored pair until the test lets it go.
    const outboxes = source.replication;
    const readPage = outboxes.dmSyncPage.bind(outboxes);
    let served = 0;
    outboxes.dmSyncPage = async (q) => {
      const page = await readPage(q);
      if (q.owner === 'hal' && page.items.length > 0) served++;
      return page;
    };
    const messages = srv(A2).ctx.store.messages;
    const storePair = messages.storePair.bind(messages);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let held = false;
    let stores = 0;
    messages.storePair = async (input) => {
      if (input.outgoing.fromLogin === 'hal') stores++;
      if (!held && input.outgoing.fromLogin === 'hal') {
        held = true;
        await gate;
      }
      return storePair(input);
    };
    try {
      const cycle = syncNow(srv(A2).httpUrl);
      // While page 1 cannot be stored, pages 2 and 3 are asked for all the same (a request goes as a page arrives).
      await waitUntil(() => served >= 3, 10_000, 'pages 2 and 3 served while page 1 cannot be stored');
      release();
      const summary = await cycle;
      assert.ok(held, 'page 1 waited for the test');
      assert.equal(summary.errors, 0);
      assert.deepEqual(await outboxCounts(srv(A1).httpUrl, 'hal'), { owner: 'hal', synced: N, unsynced: 0 });
      assert.equal(stores, N, 'each pair stored once');
      assert.equal((await dmSnapshot(srv(A2), 'hal')).copies.length, N);
    } finally {
      release();
      outboxes.dmSyncPage = readPage;
      messages.storePair = storePair;
    }
  });

  it('a cycle pulls several owners at once: an owner whose pull waits holds up no other', async () => {
    // yan and zed sort after every other shared user, so a cycle that pulled one owner after another would
    // reach them only after the owner held below. zed has one row at alpha1, yan two.
    const source = srv(A1).ctx.store;
    for (const [login, rows] of [
      ['yan', 2],
      ['zed', 1],
    ] as const) {
      const user = makeUser(login, both, seedFor(login));
      for (const i of [A1, A2]) await (await connectUser(srv(i).wsUrl, user, `${login}-${i}`)).close();
      for (let n = 0; n < rows; n++) {
        const p = pairOf({ from: login, to: 'carol', timeMs: Date.now() - 60_000 + n, nonce: n });
        await source.messages.storePair({
          incoming: p.incoming,
          outgoing: p.outgoing,
          nowMs: Date.now(),
          outbox: { owners: new Map([[login, false]]) },
          delivery: null,
        });
      }
    }
    // Every row waiting at alpha1 for alpha2, all owners together: what the cycle must count (the tests before
    // leave none refused, which would stay unsynced and uncounted).
    const shared = await srv(A2).ctx.store.directory.sharedUsers('alpha2', 'alpha1');
    let waiting = 0;
    for (const owner of shared) waiting += (await outboxCounts(srv(A1).httpUrl, owner)).unsynced;
    // The first other owner whose messages alpha2 asks for gets no page until the test lets it go.
    const outboxes = source.replication;
    const readPage = outboxes.dmSyncPage.bind(outboxes);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let heldOwner: string | null = null;
    outboxes.dmSyncPage = async (q) => {
      if (heldOwner === null && q.owner !== 'zed' && q.owner !== 'yan') heldOwner = q.owner;
      if (q.owner === heldOwner) await gate;
      return readPage(q);
    };
    try {
      const cycle = syncNow(srv(A2).httpUrl);
      await waitUntil(
        async () => (await outboxCounts(srv(A1).httpUrl, 'zed')).unsynced === 0,
        10_000,
        "zed's row pulled and acked while another owner's pull waits",
      );
      assert.notEqual(heldOwner, null, 'an owner was held');
      release();
      const summary = await cycle;
      assert.equal(summary.errors, 0);
      // The owners' counts, added as their pulls end in any order, lose none.
      assert.equal(summary.dmRows, waiting, 'every row pulled is counted once');
      assert.equal((await dmSnapshot(srv(A2), 'zed')).copies.length, 1);
      assert.equal((await dmSnapshot(srv(A2), 'yan')).copies.length, 2);
    } finally {
      release();
      outboxes.dmSyncPage = readPage;
    }
  });

  it('settings changed on both servers while they did not sync: after a cycle each way both hold the newer value', async () => {
    // Settings travel only by sync, so with no cycle running the two servers cannot exchange them.
    await using fayA1 = await connectUser(srv(A1).wsUrl, fay, 'fay-a1');
    await using fayA2 = await connectUser(srv(A2).wsUrl, fay, 'fay-a2');
    const set = (c: RawClient, key: string, value: string, updatedAtMs: number) =>
      c.call('SetUserSetting', { key, valueB64: toBase64(utf8(value)), updatedAtMs });
    const t = 1_774_700_000_000;
    await set(fayA1, 'k1', 'a1 newer', t + 2000);
    await set(fayA2, 'k1', 'a2 older', t + 1000);
    await set(fayA1, 'k2', 'a1 older', t + 1000);
    await set(fayA2, 'k2', 'a2 newer', t + 2000);
    await set(fayA1, 'k3', 'only on a1', t);
    await set(fayA2, 'k4', 'only on a2', t);
    await set(fayA1, 'k5', 'deleted later on a2', t + 1000);
    await set(fayA2, 'k5', '', t + 3000);
    // Same updatedAtMs: the larger value wins on both sides.
    await set(fayA1, 'k6', 'aaa', t + 5000);
    await set(fayA2, 'k6', 'bbb', t + 5000);

    const fromA1 = await syncNow(srv(A2).httpUrl);
    const fromA2 = await syncNow(srv(A1).httpUrl);
    assert.deepEqual([fromA1.errors, fromA2.errors], [0, 0]);
    const expected = [
      ['k1', 'a1 newer', t + 2000],
      ['k2', 'a2 newer', t + 2000],
      ['k3', 'only on a1', t],
      ['k4', 'only on a2', t],
      ['k6', 'bbb', t + 5000],
    ];
    for (const c of [fayA1, fayA2]) {
      const { items } = await c.call<OpResults['GetUserSettings']>('GetUserSettings', {});
      assert.deepEqual(
        items.map((i) => [i.key, Buffer.from(fromBase64(i.valueB64)!).toString(), i.updatedAtMs]),
        expected,
      );
    }
    // The deletion (an empty value) replicated too, and the rows are equal, not just the answers.
    assert.deepEqual((await dmSnapshot(srv(A1), 'fay')).settings, (await dmSnapshot(srv(A2), 'fay')).settings);
    // Everything was acked both ways: another round moves no setting.
    const again = [await syncNow(srv(A2).httpUrl), await syncNow(srv(A1).httpUrl)];
    assert.deepEqual(
      again.map((s) => s.settingsRows),
      [0, 0],
    );

    // /metrics shows the last cycle.
    const url = srv(A1).httpUrl;
    assert.equal(await metricValue(url, 'sync_last_cycle_rows', 'kind="settings"'), 0);
    assert.equal(await metricValue(url, 'sync_cycle_running'), 0);
    assert.ok((await metricValue(url, 'sync_cycles_total', 'result="ok"')) >= 2);
    assert.ok((await metricValue(url, 'sync_last_cycle_timestamp_seconds')) > t / 1000);
    assert.ok((await metricValue(url, 'sync_rows_pulled_total', 'kind="settings"')) >= 3);
  });

  it('a full page at the default limits (500 rows, 3 000 000 bytes, longest logins) fits in one frame of a puller', async () => {
    const owner = 'long-owner-'.padEnd(32, 'o');
    const peer = 'long-peer-'.padEnd(32, 'p');
    const user = makeUser(owner, both, seedFor(owner));
    await (await connectUser(srv(A2).wsUrl, user, 'd')).close();
    await (await connectUser(srv(A1).wsUrl, makeUser(peer, ['alpha1'], seedFor(peer)), 'd')).close();
    await using ownerA1 = await connectUser(srv(A1).wsUrl, user, 'd');
    // 172 bytes of container around each body: 500 rows of exactly 6 000 bytes make 3 000 000.
    const t = Date.now() - 60_000;
    const pairs = Array.from({ length: 500 }, (_, i) =>
      pairOf(
        { from: owner, to: peer, timeMs: t + i, nonce: 4_294_967_295 - i, revisionTimeMs: t + 1000 + i },
        { kind: 'text', bodyBytes: 2828 },
      ),
    );
    assert.equal(rowBytes(pairs[0]!), 6000);
    await sendAll(
      ownerA1,
      pairs.map((pair) => ({ pair })),
    );
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    const answer = await asA2.request<DmPage>('DmSyncBatch', { ownerLogin: owner });
    assert.equal(answer.ok && answer.payload.items.length, 500);
    const frameBytes = Buffer.byteLength(JSON.stringify(answer));
    assert.ok(frameBytes < MAX_FRAME, `${frameBytes} bytes`);
    const summary = await syncNow(srv(A2).httpUrl);
    assert.deepEqual([summary.dmRows >= 500, summary.errors], [true, 0]);
    assert.deepEqual(await outboxCounts(srv(A1).httpUrl, owner), { owner, synced: 500, unsynced: 0 });
  });

  it('a maxBytes above the default gets the default, and a page at the default fits in one frame however its keys are escaped', async () => {
    const gil = makeUser('gil', both, seedFor('gil'));
    for (const i of [A1, A2]) await (await connectUser(srv(i).wsUrl, gil, `gil-${i}`)).close();
    // 40 pairs of 60 000-byte bodies: 4.8 MB of copies, 6.4 MB as base64.
    const t = Date.now() - 60_000;
    for (let i = 0; i < 40; i++) {
      const p = pairOf({ from: 'gil', to: 'dave', timeMs: t + i, nonce: i }, { kind: 'text', bodyBytes: 60_000 });
      await srv(A1).ctx.store.messages.storePair({
        incoming: p.incoming,
        outgoing: p.outgoing,
        nowMs: Date.now(),
        outbox: { owners: new Map([['gil', false]]) },
        delivery: null,
      });
    }
    await using asA2 = await connectAsServer(srv(A1).wsUrl, 'alpha2', 'alpha1');
    const answer = await asA2.request<DmPage>('DmSyncBatch', { ownerLogin: 'gil', maxBytes: 100_000_000 });
    assert.ok(answer.ok);
    const raw = answer.payload.items.reduce((n, i) => n + i.blobsB64.reduce((m, b) => m + fromBase64(b)!.length, 0), 0);
    assert.ok(raw <= 3_000_000 && raw > 2_500_000, `${raw} bytes of copies`);
    assert.equal(answer.payload.hasMore, true);
    const frameBytes = Buffer.byteLength(JSON.stringify(answer));
    assert.ok(frameBytes < MAX_FRAME, `${frameBytes} bytes`);

    // Settings whose keys JSON escapes (128 control characters: 768 bytes each, twice a row): a page at the
    // default maxBytes still fits in a frame.
    for (let i = 0; i < 500; i++) {
      await srv(A1).ctx.store.settings.setSetting({
        owner: 'gil',
        key: String.fromCharCode(1).repeat(124) + String(i).padStart(4, '0'),
        value: new Uint8Array(5_800).fill(i % 256),
        updatedAtMs: t,
        nowMs: Date.now(),
        synced: false,
      });
    }
    const page = await asA2.request<SettingsPage>('UserSettingsSyncBatch', { ownerLogin: 'gil' });
    assert.ok(page.ok, JSON.stringify(!page.ok && page.error));
    const settingsFrame = Buffer.byteLength(JSON.stringify(page));
    assert.ok(
      page.payload.hasMore && settingsFrame < MAX_FRAME,
      `${page.payload.items.length} rows, ${settingsFrame} bytes`,
    );
  });

  it('`shine sync` runs a cycle through POST /admin/sync and prints its summary', async () => {
    const ok = await cli(['sync', '--server', srv(A2).httpUrl, '--admin-token', ADMIN_TOKEN]);
    assert.equal(ok.code, 0, ok.stderr);
    const shared = (await srv(A2).ctx.store.directory.sharedUsers('alpha2', 'alpha1')).length;
    assert.ok(shared >= 4);
    assert.match(
      ok.stdout,
      new RegExp(
        `^sync done in \\d+ ms: 1 peer server\\(s\\), ${shared} shared user\\(s\\); pulled \\d+ message row\\(s\\) and \\d+ setting row\\(s\\); repaired 0 copy\\(ies\\); pulled 0 chain block\\(s\\), resynced 0 chain\\(s\\); 0 error\\(s\\)\n$`,
      ),
    );
    const json = await cli(['sync', '--server', srv(A2).wsUrl, '--json'], { SHINE_ADMIN_TOKEN: ADMIN_TOKEN });
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(Object.keys(JSON.parse(json.stdout) as object).sort(), [
      'chainBlocksPulled',
      'chainResyncs',
      'dmRows',
      'durationMs',
      'errors',
      'peers',
      'repairedCopies',
      'settingsRows',
      'users',
    ]);
    const denied = await cli(['sync', '--server', srv(A2).httpUrl, '--admin-token', 'wrong']);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /answered 401/);
    assert.equal((await cli(['sync', '--server', srv(A2).httpUrl], { SHINE_ADMIN_TOKEN: '' })).code, 2);
  });
});

/** Runs the CLI as a user would (TypeScript through tsx). */
function cli(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += String(d)));
  child.stderr.on('data', (d: Buffer) => (stderr += String(d)));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}
