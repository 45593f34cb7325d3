import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_FRAME } from '../../src/protocol/envelope.js';
import { ShineError } from '../../src/protocol/errors.js';
import type { UserProfile } from '../../src/protocol/identity.js';
import { OpRegistry } from '../../src/server/api/registry.js';
import { createLogger } from '../../src/server/log.js';
import { Metrics } from '../../src/server/metrics.js';
import type { Session } from '../../src/server/sessions.js';
import { Dispatcher } from '../../src/server/transport/dispatch.js';
import { assertError } from '../helpers/assert.js';

function fakeSession(patch: Partial<Session> = {}): Session {
  return {
    id: 's1',
    remoteAddress: '127.0.0.1',
    login: null,
    deviceId: null,
    serverLogin: null,
    challenge: null,
    send: () => true,
    sendPaced: async () => true,
    ...patch,
  };
}

const PROFILE: UserProfile = {
  login: '',
  signKeyB64: 'k',
  encKeyB64: 'e',
  accessServers: [],
  version: 1,
  updatedAtMs: 0,
  signatureB64: 's',
};

function setup(serverLogin = 'alpha') {
  const lines: string[] = [];
  const metrics = new Metrics();
  // Real op names (the registry takes no other) with stand-in handlers.
  const registry = new OpRegistry()
    .add('GetUserProfile', { auth: 'none', handle: async ({ login }) => ({ profile: { ...PROFILE, login } }) })
    .add('GetConversations', {
      auth: 'user',
      handle: async (_p, s) => ({
        items: [{ peerLogin: s.login, lastTimeMs: 0, lastMessageKey: s.deviceId, unreadCount: 0 }],
      }),
    })
    .add('GetDmDeliveryStatus', {
      auth: 'server',
      handle: async (_p, s) => ({ messageKey: s.serverLogin ?? '', known: false, delivered: false }),
    })
    .add('GetUserSettings', {
      auth: 'none',
      // As many settings as asked for, each a 64 KiB value (as base64).
      handle: async ({ keys }) => ({
        items: (keys ?? []).map((key) => ({ key, valueB64: 'A'.repeat(87_384), updatedAtMs: 0 })),
      }),
    })
    .add('AuthChallenge', { auth: 'none', handle: () => Promise.reject(new Error('secret database detail')) })
    .add('RegisterUser', { auth: 'none', handle: () => Promise.reject(new ShineError('FORBIDDEN', 'not you')) })
    .add('AuthLogin', {
      auth: 'none',
      handle: async (p, _s, call) => {
        call.afterAnswer(async () => undefined);
        return { login: p.login, deviceId: p.deviceId, sessionId: 's1' };
      },
    });
  const dispatcher = new Dispatcher(
    registry,
    createLogger('debug', (l) => lines.push(l)),
    metrics,
    { serverLogin, s2sAuth: 'required' },
  );
  const send = (session: Session, payload: unknown, opName = 'GetUserProfile') =>
    dispatcher.dispatch(session, JSON.stringify({ op: opName, requestId: 'r1', payload }));
  return { dispatcher, lines, metrics, send };
}

describe('Dispatcher', () => {
  it('validates the payload with the op schema and answers the handler result', async () => {
    const { send } = setup();
    const ok = await send(fakeSession(), { login: 'alice', extra: true });
    assert.deepEqual(ok.response, {
      op: 'GetUserProfile',
      requestId: 'r1',
      status: 200,
      ok: true,
      payload: { profile: { ...PROFILE, login: 'alice' } },
    });
    const bad = await send(fakeSession(), { login: 5 });
    assertError(bad.response, 400, 'BAD_FIELDS', { op: 'GetUserProfile', requestId: 'r1' });
    assert.match((bad.response as { error: { message: string } }).error.message, /payload\.login/);
  });

  it('gates user ops on login and server ops on serverLogin', async () => {
    const { send } = setup();
    const user = { login: 'alice', deviceId: 'phone' };
    assertError((await send(fakeSession(), {}, 'GetConversations')).response, 401, 'NOT_AUTHENTICATED');
    assertError((await send(fakeSession(), {}, 'GetDmDeliveryStatus')).response, 401, 'NOT_AUTHENTICATED');
    assertError((await send(fakeSession(user), {}, 'GetDmDeliveryStatus')).response, 401, 'NOT_AUTHENTICATED');
    const mine = await send(fakeSession(user), {}, 'GetConversations');
    assert.deepEqual(mine.response.ok && mine.response.payload, {
      items: [{ peerLogin: 'alice', lastTimeMs: 0, lastMessageKey: 'phone', unreadCount: 0 }],
    });
    const peer = await send(fakeSession({ serverLogin: 'beta' }), {}, 'GetDmDeliveryStatus');
    assert.deepEqual(peer.response.ok && peer.response.payload, { messageKey: 'beta', known: false, delivered: false });
  });

  it('answers LOCAL_SERVER_NOT_CONFIGURED to server ops while the server is the unfederated `local`', async () => {
    const { send } = setup('local');
    assertError(
      (await send(fakeSession({ serverLogin: 'beta' }), {}, 'GetDmDeliveryStatus')).response,
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assertError((await send(fakeSession(), {}, 'GetDmDeliveryStatus')).response, 500, 'LOCAL_SERVER_NOT_CONFIGURED');
    assert.equal((await send(fakeSession(), { login: 'alice' })).response.ok, true);
  });

  it('turns unexpected errors into INTERNAL without detail, logging the detail', async () => {
    const { send, lines } = setup();
    const { response } = await send(fakeSession(), {}, 'AuthChallenge');
    assertError(response, 500, 'INTERNAL');
    assert.doesNotMatch(JSON.stringify(response), /secret/);
    assert.ok(lines.some((l) => l.includes('secret database detail') && l.includes('"level":"error"')));
    assertError((await send(fakeSession(), { profile: PROFILE }, 'RegisterUser')).response, 403, 'FORBIDDEN');
  });

  it('answers a transport rejection with the ids it could read', async () => {
    const { dispatcher } = setup();
    const { response } = await dispatcher.dispatch(
      fakeSession(),
      '{"op":"GetUserProfile","requestId":"r9","payload":{"login":"alice"}}',
      new ShineError('RATE_LIMITED'),
    );
    assertError(response, 429, 'RATE_LIMITED', { op: 'GetUserProfile', requestId: 'r9' });
    assertError(
      (await dispatcher.dispatch(fakeSession(), 'nope', new ShineError('TOO_LARGE'))).response,
      413,
      'TOO_LARGE',
      { requestId: '' },
    );
  });

  it('answers 413 TOO_LARGE instead of an answer that would pass a frame (4 MiB), and counts it so', async () => {
    const { send, lines, metrics } = setup();
    const keys = (n: number) => ({ keys: Array.from({ length: n }, (_, i) => `k${i}`) });
    const fits = await send(fakeSession(), keys(47), 'GetUserSettings');
    assert.equal(fits.response.status, 200);
    assert.equal(fits.text, JSON.stringify(fits.response));
    assert.ok(Buffer.byteLength(fits.text) < MAX_FRAME, `${fits.text.length} bytes`);
    const over = await send(fakeSession(), keys(49), 'GetUserSettings');
    assertError(over.response, 413, 'TOO_LARGE', { op: 'GetUserSettings', requestId: 'r1' });
    assert.equal(over.text, JSON.stringify(over.response));
    assert.ok(lines.some((l) => l.includes('answer larger than a frame')));
    assert.match(await metrics.render(), /shine_ops_total\{op="GetUserSettings",status="413"\} 1/);
  });

  it('collects after-answer work', async () => {
    const { send } = setup();
    const r = await send(fakeSession(), { login: 'alice', deviceId: 'phone', signatureB64: 'x' }, 'AuthLogin');
    assert.deepEqual(r.response.ok && r.response.payload, {
      login: 'alice',
      deviceId: 'phone',
      sessionId: 's1',
    });
    assert.equal(r.afterAnswer.length, 1);
  });

  it('counts ops by name and status, never by an unregistered name', async () => {
    const { send, metrics } = setup();
    await send(fakeSession(), { login: 'alice' });
    await send(fakeSession(), {}, 'Whatever-attacker-chose');
    const text = await metrics.render();
    assert.match(text, /^shine_ops_total\{op="GetUserProfile",status="200"\} 1$/m);
    assert.match(text, /^shine_ops_total\{op="_unknown",status="404"\} 1$/m);
    assert.doesNotMatch(text, /attacker/);
  });
});
