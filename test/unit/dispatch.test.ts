import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { z } from 'zod';
import { ShineError } from '../../src/protocol/errors.js';
import { op, OpRegistry } from '../../src/server/api/registry.js';
import { createLogger } from '../../src/server/log.js';
import { Metrics } from '../../src/server/metrics.js';
import type { Session } from '../../src/server/sessions.js';
import { Dispatcher } from '../../src/server/transport/dispatch.js';
import { assertError } from '../helpers/assert.js';

function fakeSession(patch: Partial<Session> = {}): Session {
  return { id: 's1', login: null, deviceId: null, serverLogin: null, challenge: null, send: () => true, ...patch };
}

function setup(serverLogin = 'alpha') {
  const lines: string[] = [];
  const metrics = new Metrics();
  const registry = new OpRegistry().add({
    Echo: op({ auth: 'none', schema: z.object({ n: z.number() }), handle: async ({ n }) => ({ n }) }),
    Mine: op({ auth: 'user', schema: z.object({}), handle: async (_p, s) => ({ login: s.login }) }),
    Peer: op({ auth: 'server', schema: z.object({}), handle: async (_p, s) => ({ from: s.serverLogin }) }),
    Boom: op({ auth: 'none', schema: z.object({}), handle: () => Promise.reject(new Error('secret database detail')) }),
    Nope: op({
      auth: 'none',
      schema: z.object({}),
      handle: () => Promise.reject(new ShineError('FORBIDDEN', 'not you')),
    }),
    Later: op({
      auth: 'none',
      schema: z.object({}),
      handle: async (_p, _s, call) => {
        call.afterAnswer(async () => undefined);
        return undefined;
      },
    }),
  });
  const dispatcher = new Dispatcher(
    registry,
    createLogger('debug', (l) => lines.push(l)),
    metrics,
    { serverLogin, s2sAuth: 'required' },
  );
  const send = (session: Session, payload: unknown, opName = 'Echo') =>
    dispatcher.dispatch(session, JSON.stringify({ op: opName, requestId: 'r1', payload }));
  return { dispatcher, lines, metrics, send };
}

describe('Dispatcher', () => {
  it('validates the payload with the op schema and answers the handler result', async () => {
    const { send } = setup();
    const ok = await send(fakeSession(), { n: 5, extra: true });
    assert.deepEqual(ok.response, { op: 'Echo', requestId: 'r1', status: 200, ok: true, payload: { n: 5 } });
    const bad = await send(fakeSession(), { n: 'five' });
    assertError(bad.response, 400, 'BAD_FIELDS', { op: 'Echo', requestId: 'r1' });
    assert.match((bad.response as { error: { message: string } }).error.message, /payload\.n/);
  });

  it('gates user ops on login and server ops on serverLogin', async () => {
    const { send } = setup();
    assertError((await send(fakeSession(), {}, 'Mine')).response, 401, 'NOT_AUTHENTICATED');
    assertError((await send(fakeSession(), {}, 'Peer')).response, 401, 'NOT_AUTHENTICATED');
    assertError((await send(fakeSession({ login: 'alice' }), {}, 'Peer')).response, 401, 'NOT_AUTHENTICATED');
    assert.deepEqual((await send(fakeSession({ login: 'alice' }), {}, 'Mine')).response.ok, true);
    const peer = await send(fakeSession({ serverLogin: 'beta' }), {}, 'Peer');
    assert.deepEqual(peer.response.ok && peer.response.payload, { from: 'beta' });
  });

  it('answers LOCAL_SERVER_NOT_CONFIGURED to server ops while the server is the unfederated `local`', async () => {
    const { send } = setup('local');
    assertError(
      (await send(fakeSession({ serverLogin: 'beta' }), {}, 'Peer')).response,
      500,
      'LOCAL_SERVER_NOT_CONFIGURED',
    );
    assertError((await send(fakeSession(), {}, 'Peer')).response, 500, 'LOCAL_SERVER_NOT_CONFIGURED');
    assert.equal((await send(fakeSession(), { n: 1 })).response.ok, true);
  });

  it('turns unexpected errors into INTERNAL without detail, logging the detail', async () => {
    const { send, lines } = setup();
    const { response } = await send(fakeSession(), {}, 'Boom');
    assertError(response, 500, 'INTERNAL');
    assert.doesNotMatch(JSON.stringify(response), /secret/);
    assert.ok(lines.some((l) => l.includes('secret database detail') && l.includes('"level":"error"')));
    assertError((await send(fakeSession(), {}, 'Nope')).response, 403, 'FORBIDDEN');
  });

  it('answers a transport rejection with the ids it could read', async () => {
    const { dispatcher } = setup();
    const { response } = await dispatcher.dispatch(
      fakeSession(),
      '{"op":"Echo","requestId":"r9","payload":{"n":1}}',
      new ShineError('RATE_LIMITED'),
    );
    assertError(response, 429, 'RATE_LIMITED', { op: 'Echo', requestId: 'r9' });
    assertError(
      (await dispatcher.dispatch(fakeSession(), 'nope', new ShineError('TOO_LARGE'))).response,
      413,
      'TOO_LARGE',
      { requestId: '' },
    );
  });

  it('collects after-answer work and answers {} for an empty result', async () => {
    const { send } = setup();
    const r = await send(fakeSession(), {}, 'Later');
    assert.deepEqual(r.response.ok && r.response.payload, {});
    assert.equal(r.afterAnswer.length, 1);
  });

  it('counts ops by name and status, never by an unregistered name', async () => {
    const { send, metrics } = setup();
    await send(fakeSession(), { n: 1 });
    await send(fakeSession(), {}, 'Whatever-attacker-chose');
    const text = await metrics.render();
    assert.match(text, /^shine_ops_total\{op="Echo",status="200"\} 1$/m);
    assert.match(text, /^shine_ops_total\{op="_unknown",status="404"\} 1$/m);
    assert.doesNotMatch(text, /attacker/);
  });
});
