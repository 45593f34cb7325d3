/**
 * A peer that breaks the pull protocol must not stop replication: a cursor that does not move, or
 * pages without end, ends that owner's pull with a logged error while the other owners and later
 * cycles still run, and shutdown ends a running cycle promptly. A synced setting dated too far in the
 * future is refused like a client's. The peer is a stand-in WebSocket server on loopback that
 * accepts ServerAuth and answers the sync ops as the test scripts it.
 */
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { WebSocketServer } from 'ws';
import { toBase64 } from '../../src/protocol/bytes.js';
import { createLogger } from '../../src/server/log.js';
import { splitRange } from '../../src/server/replication/anti-entropy.js';
import type { TimeRange } from '../../src/server/store/types.js';
import { fakeServer } from '../helpers/federation.js';
import { startNetwork } from '../helpers/network.js';
import { metricValue, replicationServer, syncNow } from '../helpers/replication.js';
import { makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';
import { allSettings } from '../helpers/store-contract.js';

interface SettingItem {
  syncId: string;
  key: string;
  valueB64: string;
  updatedAtMs: number;
  storedAtMs: number;
}

/** How the stand-in peer answers UserSettingsSyncBatch for one owner, given the request's cursor. */
type Script = (after: { storedAtMs: number; key: string }, acked: ReadonlySet<string>) => SettingItem[];

const setting = (key: string, storedAtMs: number, updatedAtMs = Date.now() - 1_000): SettingItem => ({
  syncId: `${key}:${storedAtMs}`,
  key,
  valueB64: toBase64(new TextEncoder().encode(key)),
  updatedAtMs,
  storedAtMs,
});

/** Pages whose cursor never moves: always the same row, whatever was asked. */
const stuck: Script = () => [setting('again', 5)];
/** A new row after every cursor, for ever. */
const endless: Script = (after) => [setting(`k${after.storedAtMs + 1}`, after.storedAtMs + 1)];

async function startHostilePeer(scripts: Record<string, Script>) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
  const requests = new Map<string, number>();
  const acked = new Map<string, Set<string>>();
  wss.on('connection', (ws) => {
    ws.on('message', (data) => {
      const req = JSON.parse(String(data)) as { op: string; requestId: string; payload: Record<string, unknown> };
      const reply = (payload: object) =>
        ws.send(JSON.stringify({ op: req.op, requestId: req.requestId, status: 200, ok: true, payload }));
      const p = req.payload;
      const owner = String(p.ownerLogin);
      if (req.op === 'ServerAuth') return reply({ serverLogin: 'alpha1', targetServerLogin: p.serverLogin });
      if (req.op === 'DmSyncBatch')
        return reply({ ownerLogin: owner, items: [], hasMore: false, nextStoredAtMs: 0, nextMessageKey: '' });
      // Anti-entropy after the pulls: it holds no message, so every bucket is empty.
      if (req.op === 'DmDigest') {
        const empty = { count: 0, xorSha256B64: toBase64(new Uint8Array(32)) };
        const ranges = splitRange(p as unknown as TimeRange, Number(p.buckets));
        return reply({ items: ranges.map((r) => ({ ...r, ...empty })) });
      }
      if (req.op !== 'UserSettingsSyncBatch') return reply({});
      requests.set(owner, (requests.get(owner) ?? 0) + 1);
      const done = acked.get(owner) ?? new Set<string>();
      acked.set(owner, done);
      for (const id of (p.ackSyncIds as string[]) ?? []) done.add(id);
      const after = { storedAtMs: Number(p.afterStoredAtMs ?? 0), key: String(p.afterKey ?? '') };
      const items = (scripts[owner] ?? (() => []))(after, done);
      const last = items.at(-1);
      reply({
        ownerLogin: owner,
        items,
        hasMore: items.length > 0,
        // A well-behaved peer moves the cursor to its last row; `stuck` answers with the cursor it got.
        nextStoredAtMs: scripts[owner] === stuck ? after.storedAtMs : (last?.storedAtMs ?? after.storedAtMs),
        nextKey: scripts[owner] === stuck ? after.key : (last?.key ?? after.key),
      });
    });
  });
  const url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/ws`;
  const close = () =>
    new Promise<void>((resolve) => {
      for (const ws of wss.clients) ws.terminate();
      wss.close(() => resolve());
    });
  return { url, requests, close, [Symbol.asyncDispose]: close };
}

/** alpha2 with the stand-in as alpha1, and owners shared by both. */
async function setup(scripts: Record<string, Script>, syncMaxPages: number) {
  const peer = await startHostilePeer(scripts);
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('warn', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
  const net = await startNetwork({ servers: [replicationServer('alpha2', { syncMaxPages, log })] });
  const a2 = net.servers[0]!;
  // The start-up cycle ends before the peer and users exist (on PostgreSQL it may still be taking its
  // lock): what the tests' own cycles pull is theirs alone.
  await syncNow(a2.httpUrl);
  await a2.ctx.store.directory.putServer(fakeServer('alpha1', peer.url).descriptor, 'static');
  for (const owner of Object.keys(scripts))
    await a2.ctx.store.directory.putUser(makeUser(owner, ['alpha1', 'alpha2']).profile, 'local', Date.now());
  const close = async () => {
    await net.close();
    await peer.close();
  };
  return { peer, a2, lines, net, close, [Symbol.asyncDispose]: close };
}

/** A well-behaved owner: a current setting and one dated an hour ahead, served until acked. */
const fineRows = () => [setting('theme', 1), setting('future', 2, Date.now() + 3_600_000)];
const fine: Script = (after, acked) =>
  fineRows().filter(
    (r) =>
      !acked.has(r.syncId) &&
      (r.storedAtMs > after.storedAtMs || (r.storedAtMs === after.storedAtMs && r.key > after.key)),
  );

describe('replication: a peer that breaks the pull protocol', () => {
  it(
    'a cursor that does not move, or pages without end, ends that owner’s pull; other owners and later cycles run',
    { timeout: 60_000 },
    async () => {
      await using t = await setup({ stuck, endless, fine }, 20);
      for (let cycle = 1; cycle <= 2; cycle++) {
        const summary = await syncNow(t.a2.httpUrl);
        assert.equal(summary.users, 3, `cycle ${cycle} went through every owner`);
        assert.equal(summary.errors, 2, `cycle ${cycle}: the two broken pulls`);
        assert.equal(summary.settingsRows, cycle === 1 ? 1 : 0, 'the good owner’s setting is stored once');
      }
      assert.ok(t.peer.requests.get('stuck')! <= 2 * 2, `stuck asked ${t.peer.requests.get('stuck')} times`);
      assert.ok(t.peer.requests.get('endless')! <= 2 * 21, `endless asked ${t.peer.requests.get('endless')} times`);
      assert.ok(t.peer.requests.get('fine')! >= 2 * 2);
      const broken = t.lines.filter((l) => l.level === 'error' && l.msg === 'sync with peer broken off');
      assert.deepEqual(broken.map((l) => l.owner).sort(), ['endless', 'endless', 'stuck', 'stuck']);
      assert.match(String(broken.find((l) => l.owner === 'stuck')!.err), /cursor did not advance/);
      assert.match(String(broken.find((l) => l.owner === 'endless')!.err), /after 20 pages/);
    },
  );

  it(
    'a synced setting dated beyond maxTimeSkewMs is refused like a client’s: not stored, not acked, logged, counted',
    { timeout: 60_000 },
    async () => {
      await using t = await setup({ fine }, 20);
      const summary = await syncNow(t.a2.httpUrl);
      assert.equal(summary.errors, 0);
      assert.equal(summary.settingsRows, 1);
      const stored = await allSettings(t.a2.ctx.store, 'fine', ['theme', 'future']);
      assert.deepEqual(
        stored.map((r) => r.key),
        ['theme'],
      );
      const refused = t.lines.filter((l) => l.msg === 'sync row refused');
      assert.deepEqual(
        refused.map((l) => [l.owner, l.key]),
        [['fine', 'future']],
      );
      assert.match(String(refused[0]!.err), /future/);
      assert.equal(await metricValue(t.a2.httpUrl, 'sync_errors_total', 'peer="alpha1"'), 1);
      // Left unsynced at the peer: it is offered again, and refused again, until its time has come.
      await syncNow(t.a2.httpUrl);
      assert.equal((await allSettings(t.a2.ctx.store, 'fine', ['future'])).length, 0);
    },
  );

  it('shutdown ends a running cycle promptly', { timeout: 60_000 }, async () => {
    await using t = await setup({ endless }, 1_000_000_000);
    const cycle = syncNow(t.a2.httpUrl).catch((err: unknown) => err);
    await waitUntil(() => (t.peer.requests.get('endless') ?? 0) >= 30, 20_000, 'the endless pull is running');
    const started = Date.now();
    await t.net.stop(0);
    const tookMs = Date.now() - started;
    assert.ok(tookMs < 3_000, `close took ${tookMs} ms`);
    await cycle;
    const asked = t.peer.requests.get('endless');
    // The stopped server asks nothing more: one more request from the stand-in's side proves the order.
    await new Promise((r) => setImmediate(r));
    assert.equal(t.peer.requests.get('endless'), asked);
  });
});
