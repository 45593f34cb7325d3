/**
 * Transport rules of docs/protocol.md §5 and §8 against a real server: every rejected frame gets its code, changes
 * nothing, and leaves other sessions (and the rejected socket, unless the rule closes it) working.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { toBase64 } from '../../src/protocol/bytes.js';
import type { ErrorResponse } from '../../src/protocol/envelope.js';
import { MAX_CLIENT_FRAME, MAX_FRAME } from '../../src/protocol/envelope.js';
import type { ServerDescriptor } from '../../src/protocol/identity.js';
import { verifyDescriptor } from '../../src/protocol/identity.js';
import type { RunningServer } from '../../src/server/app.js';
import { ManualClock } from '../../src/server/clock.js';
import { assertError } from '../helpers/assert.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import { assertSessionWorks, connectUser, login, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const ADMIN_TOKEN = 'test-admin-token-0123456789';

/** Settings of the session's user; empty means a rejected SetUserSetting left no trace. */
async function settingKeys(client: RawClient): Promise<string[]> {
  const { items } = await client.call<{ items: { key: string }[] }>('GetUserSettings', {});
  return items.map((i) => i.key);
}

const setting = (key: string, valueB64 = toBase64(new Uint8Array([1, 2, 3]))) => ({
  key,
  valueB64,
  updatedAtMs: 1_774_700_000_000,
});

describe('transport: frames and envelopes', () => {
  let net: TestNetwork;
  let server: RunningServer;
  let bystander: RawClient;

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha', adminToken: ADMIN_TOKEN }] });
    server = net.servers[0]!;
    bystander = await connectUser(server.wsUrl, makeUser('bystander', ['alpha']));
  });
  after(async () => {
    await bystander.close();
    await net.close();
  });

  it('answers BAD_JSON to text that is not JSON and keeps the socket', async () => {
    await using c = await connectRaw(server.wsUrl);
    c.sendText('{"op": "GetUserProfile", "requestId": ');
    assertError(await c.waitFor((f) => f.ok === false), 400, 'BAD_JSON', { op: '', requestId: '' });
    assertError(await c.request('GetUserProfile', { login: 'nobody' }), 404, 'USER_NOT_FOUND');
    await assertSessionWorks(bystander);
  });

  it('answers BAD_FIELDS to a bad envelope, echoing what it could read', async () => {
    await using c = await connectRaw(server.wsUrl);
    const cases: [string, { op?: string; requestId?: string }][] = [
      ['[1,2,3]', { op: '', requestId: '' }],
      ['"just a string"', { op: '', requestId: '' }],
      ['{"requestId":"r-no-op","payload":{}}', { op: '', requestId: 'r-no-op' }],
      ['{"op":"GetUserProfile","payload":{"login":"x"}}', { op: 'GetUserProfile', requestId: '' }],
      ['{"op":"GetUserProfile","requestId":"r-arr","payload":[1]}', { op: 'GetUserProfile', requestId: 'r-arr' }],
      ['{"op":"GetUserProfile","requestId":"r-null","payload":null}', { op: 'GetUserProfile', requestId: 'r-null' }],
    ];
    for (const [text, ids] of cases) {
      const seen = c.frames.length;
      c.sendText(text);
      await c.waitFor(() => c.frames.length > seen);
      assertError(c.frames[seen]!, 400, 'BAD_FIELDS', ids);
    }
    await assertSessionWorks(bystander);
  });

  it('answers BAD_FIELDS to a requestId outside 1..128 characters', async () => {
    await using c = await connectRaw(server.wsUrl);
    for (const requestId of ['', 'r'.repeat(129)]) {
      const seen = c.frames.length;
      c.sendText(JSON.stringify({ op: 'GetUserProfile', requestId, payload: { login: 'nobody' } }));
      await c.waitFor(() => c.frames.length > seen);
      assertError(c.frames[seen]!, 400, 'BAD_FIELDS', { op: 'GetUserProfile' });
      assert.match((c.frames[seen] as ErrorResponse).error.message, /requestId/);
    }
    const longest = 'r'.repeat(128);
    assertError(await c.request('GetUserProfile', { login: 'nobody' }, { requestId: longest }), 404, 'USER_NOT_FOUND', {
      requestId: longest,
    });
    await assertSessionWorks(bystander);
  });

  it('answers BAD_FIELDS to a payload its op schema rejects, naming the field, and stores nothing', async () => {
    const user = makeUser('badfields', ['alpha']);
    await using c = await connectUser(server.wsUrl, user);
    const answer = await c.request('SetUserSetting', { key: 'theme', valueB64: 'AQID', updatedAtMs: -5 });
    assertError(answer, 400, 'BAD_FIELDS', { op: 'SetUserSetting' });
    assert.match((answer as ErrorResponse).error.message, /payload\.updatedAtMs/);
    assertError(await c.request('GetUserProfile', { login: 42 }), 400, 'BAD_FIELDS');
    assert.deepEqual(await settingKeys(c), []);
    await assertSessionWorks(c);
    await assertSessionWorks(bystander);
  });

  it('answers UNKNOWN_OP (404) to an op nobody registered', async () => {
    await using c = await connectRaw(server.wsUrl);
    assertError(await c.request('NoSuchOp', {}, { requestId: 'r-unknown' }), 404, 'UNKNOWN_OP', {
      op: 'NoSuchOp',
      requestId: 'r-unknown',
    });
    // A name longer than any op's is unknown too; the answer echoes its first 128 characters.
    const long = 'X'.repeat(300);
    assertError(await c.request(long, {}, { requestId: 'r-long' }), 404, 'UNKNOWN_OP', {
      op: long.slice(0, 128),
      requestId: 'r-long',
    });
    assertError(await c.request('GetUserProfile', { login: 'nobody' }), 404, 'USER_NOT_FOUND');
    await assertSessionWorks(bystander);
  });

  it('answers NOT_AUTHENTICATED to user ops before AuthLogin and applies nothing', async () => {
    const user = makeUser('early', ['alpha']);
    await using c = await connectRaw(server.wsUrl);
    await c.call('RegisterUser', { profile: user.profile });
    assertError(await c.request('SetUserSetting', setting('theme')), 401, 'NOT_AUTHENTICATED', {
      op: 'SetUserSetting',
    });
    assertError(await c.request('GetConversations', {}), 401, 'NOT_AUTHENTICATED');
    assert.equal((await login(c, user)).status, 200);
    assert.deepEqual(await settingKeys(c), []);
    await assertSessionWorks(bystander);
  });

  it('answers TOO_LARGE (413) to a request over 1 MiB without closing, and applies nothing', async () => {
    const user = makeUser('bigsender', ['alpha']);
    await using c = await connectUser(server.wsUrl, user);
    const big = setting('huge', 'A'.repeat(MAX_CLIENT_FRAME));
    assertError(await c.request('SetUserSetting', big, { requestId: 'r-big' }), 413, 'TOO_LARGE', {
      op: 'SetUserSetting',
      requestId: 'r-big',
    });
    // Just under the limit passes the size check (the unknown field is dropped by the schema).
    const frame = (pad: string) =>
      JSON.stringify({ op: 'GetUserProfile', requestId: 'r-edge', payload: { login: 'nobody', pad } });
    const pad = 'x'.repeat(MAX_CLIENT_FRAME - frame('').length);
    assert.equal(Buffer.byteLength(frame(pad)), MAX_CLIENT_FRAME);
    c.sendText(frame(pad));
    assertError(await c.waitFor((f) => f.requestId === 'r-edge'), 404, 'USER_NOT_FOUND');
    assert.deepEqual(await settingKeys(c), []);
    await assertSessionWorks(c);
    await assertSessionWorks(bystander);
  });

  it('closes only the offending socket (1009) for a frame over 4 MiB', async () => {
    await using c = await connectRaw(server.wsUrl);
    c.sendText('x'.repeat(MAX_FRAME + 1));
    assert.equal((await c.closed).code, 1009);
    await assertSessionWorks(bystander);
  });

  it('closes a socket that sends a binary frame with 1003; other sessions live on', async () => {
    const user = makeUser('binsender', ['alpha']);
    const c = await connectUser(server.wsUrl, user);
    c.sendBinary(new Uint8Array([1, 2, 3]));
    assert.equal((await c.closed).code, 1003);
    await assertSessionWorks(bystander);
    await using again = await connectUser(server.wsUrl, user, 'device-2');
    await assertSessionWorks(again);
  });

  it('answers pipelined requests independently', async () => {
    await using c = await connectRaw(server.wsUrl);
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => c.request('GetUserProfile', { login: i % 2 ? 'bystander' : 'nobody' })),
    );
    answers.forEach((a, i) => assert.equal(a.status, i % 2 ? 200 : 404));
  });

  it('removes a closed socket from the session hub', async () => {
    const user = makeUser('leaver', ['alpha']);
    const c = await connectUser(server.wsUrl, user);
    assert.equal(server.ctx.hub.sessionsOf('leaver').length, 1);
    const before = server.ctx.hub.size;
    await c.close();
    await waitUntil(
      () => server.ctx.hub.sessionsOf('leaver').length === 0 && server.ctx.hub.size === before - 1,
      5_000,
      'session removed',
    );
    await assertSessionWorks(bystander);
  });

  it('refuses WebSocket upgrades outside /ws', async () => {
    await assert.rejects(connectRaw(server.wsUrl.replace(/\/ws$/, '/other')));
    await assertSessionWorks(bystander);
  });
});

describe('transport: per-connection rate limit', () => {
  const clock = new ManualClock();
  let net: TestNetwork;
  let server: RunningServer;
  let bystander: RawClient;

  before(async () => {
    // Register + challenge + login take 3 tokens of the 6.
    net = await startNetwork({ clock, servers: [{ serverLogin: 'alpha', rateLimit: { perSecond: 1, burst: 6 } }] });
    server = net.servers[0]!;
    bystander = await connectUser(server.wsUrl, makeUser('bystander', ['alpha']));
  });
  after(async () => {
    await bystander.close();
    await net.close();
  });

  it('answers RATE_LIMITED (429) past the burst, applies nothing, and refills with time', async () => {
    const user = makeUser('chatty', ['alpha']);
    await using c = await connectUser(server.wsUrl, user);
    for (let i = 0; i < 3; i++) assert.equal((await c.request('GetUserProfile', { login: 'chatty' })).status, 200);
    assertError(await c.request('SetUserSetting', setting('theme'), { requestId: 'r-limited' }), 429, 'RATE_LIMITED', {
      op: 'SetUserSetting',
      requestId: 'r-limited',
    });
    assertError(await c.request('GetUserProfile', { login: 'chatty' }), 429, 'RATE_LIMITED');
    assert.ok(c.isOpen);
    // The limit is per connection: the bystander has its own bucket.
    await assertSessionWorks(bystander);
    clock.advance(1_000);
    assert.deepEqual(await settingKeys(c), []);
  });
});

describe('transport: HTTP', () => {
  let net: TestNetwork;
  let open: RunningServer;
  let gated: RunningServer;

  before(async () => {
    net = await startNetwork({
      servers: [{ serverLogin: 'open1' }, { serverLogin: 'gated', adminToken: ADMIN_TOKEN }],
    });
    [open, gated] = net.servers as [RunningServer, RunningServer];
  });
  after(() => net.close());

  it('GET /healthz is 200 {ok:true} while the database answers', async () => {
    const res = await fetch(`${open.httpUrl}/healthz`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { ok: true });
  });

  it('GET /.well-known/shine-server is the signed descriptor', async () => {
    const res = await fetch(`${gated.httpUrl}/.well-known/shine-server`);
    assert.equal(res.status, 200);
    const d = (await res.json()) as ServerDescriptor;
    assert.equal(d.serverLogin, 'gated');
    assert.equal(d.wsUrl, gated.config.publicWsUrl);
    assert.equal(d.wsUrl, gated.wsUrl);
    assert.equal(d.signKeyB64, gated.ctx.serverKey.publicKeyB64);
    assert.ok(verifyDescriptor(d));
    assert.ok(!verifyDescriptor({ ...d, wsUrl: 'ws://evil.example/ws' }));
  });

  it('GET /metrics shows open sessions and ops by op and status', async () => {
    await using c = await connectRaw(open.wsUrl);
    await c.request('GetUserProfile', { login: 'nobody' });
    await c.request('Bogus', {});
    const res = await fetch(`${open.httpUrl}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
    const text = await res.text();
    assert.match(text, /^shine_sessions_open 1$/m);
    assert.match(text, /^shine_ops_total\{op="GetUserProfile",status="404"\} 1$/m);
    assert.match(text, /^shine_ops_total\{op="_unknown",status="404"\} 1$/m);
  });

  it('/admin and /debug are 404 without a configured token', async () => {
    for (const path of ['/admin', '/admin/sync', '/debug/delivery']) {
      const res = await fetch(`${open.httpUrl}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      assert.equal(res.status, 404, path);
    }
  });

  it('/admin and /debug are 401 with a missing or wrong token, and pass the gate with the right one', async () => {
    for (const [path, past] of [
      ['/admin', 404],
      ['/debug/delivery', 200],
    ] as const) {
      assert.equal((await fetch(`${gated.httpUrl}${path}`)).status, 401, path);
      assert.equal(
        (await fetch(`${gated.httpUrl}${path}`, { headers: { authorization: 'Bearer wrong' } })).status,
        401,
        path,
      );
      assert.equal(
        (await fetch(`${gated.httpUrl}${path}`, { headers: { authorization: ADMIN_TOKEN } })).status,
        401,
        path,
      );
      // Past the gate: a real route answers, a path that is no route is 404.
      const ok = await fetch(`${gated.httpUrl}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      assert.equal(ok.status, past, path);
    }
  });

  it('GET / is the web client placeholder; anything else is 404', async () => {
    const root = await fetch(`${open.httpUrl}/`);
    assert.equal(root.status, 200);
    assert.match(await root.text(), /SHiNE/);
    assert.equal((await fetch(`${open.httpUrl}/nope`)).status, 404);
    assert.equal((await fetch(`${open.httpUrl}/healthz`, { method: 'POST' })).status, 405);
  });
});

describe('transport: lifecycle', () => {
  it('GET /healthz is 503 when the database is gone', async () => {
    await using net = await startNetwork({ servers: [{}] });
    const server = net.servers[0]!;
    await server.ctx.store.close();
    const res = await fetch(`${server.httpUrl}/healthz`);
    assert.equal(res.status, 503);
    assert.deepEqual(await res.json(), { ok: false });
  });

  it('close() lets the socket go with 1001 and frees the port', async () => {
    const net = await startNetwork({ servers: [{}] });
    const server = net.servers[0]!;
    const c = await connectRaw(server.wsUrl);
    await net.close();
    assert.equal((await c.closed).code, 1001);
    await assert.rejects(fetch(`${server.httpUrl}/healthz`));
  });
});
