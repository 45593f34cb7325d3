/**
 * The outgoing server-to-server channel against a stand-in peer (a real WebSocket server on a free
 * loopback port): ServerAuth first, answers matched by requestId, error answers as ShineError, and
 * frames that are no answer — including `null`, arrays and garbage — ignored without harm.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { WebSocketServer } from 'ws';
import type { UserProfile } from '../../src/protocol/identity.js';
import { ManualClock, systemClock } from '../../src/server/clock.js';
import { PeerPool } from '../../src/server/federation/peer-client.js';
import { createLogger } from '../../src/server/log.js';
import { waitUntil } from '../helpers/wait.js';

const PROFILE: UserProfile = {
  login: '',
  signKeyB64: 'k',
  encKeyB64: 'e',
  accessServers: ['beta'],
  version: 1,
  updatedAtMs: 0,
  signatureB64: 's',
};

describe('PeerPool', () => {
  let wss: WebSocketServer;
  let url: string;
  const seen: { op: string; payload: Record<string, unknown> }[] = [];

  before(async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise((r) => wss.once('listening', r));
    url = `ws://127.0.0.1:${(wss.address() as { port: number }).port}/ws`;
    wss.on('connection', (ws) => {
      ws.on('message', (data) => {
        const req = JSON.parse(String(data)) as { op: string; requestId: string; payload: { login?: string } };
        seen.push(req);
        if (req.op === 'ServerAuth') {
          ws.send(JSON.stringify({ op: req.op, requestId: req.requestId, status: 200, ok: true, payload: {} }));
          return;
        }
        // Junk first: none of it may crash the caller or settle the call.
        for (const junk of [
          'null',
          '[]',
          '42',
          '"text"',
          '{"requestId": 7}',
          'not json',
          JSON.stringify({ requestId: req.requestId + 'x', ok: true }),
        ])
          ws.send(junk);
        const login = req.payload.login;
        if (login === 'fail')
          ws.send(
            JSON.stringify({
              op: req.op,
              requestId: req.requestId,
              status: 403,
              ok: false,
              error: { code: 'NOT_PEER', message: 'no' },
            }),
          );
        else
          ws.send(
            JSON.stringify({
              op: req.op,
              requestId: req.requestId,
              status: 200,
              ok: true,
              payload: login === 'malformed' ? { profile: { login } } : { profile: { ...PROFILE, login } },
            }),
          );
      });
    });
  });
  after(() => new Promise<void>((r) => wss.close(() => r())));

  const pool = () =>
    new PeerPool({
      serverLogin: 'alpha',
      sign: () => 'c2lnbmF0dXJl',
      clock: systemClock,
      log: createLogger('silent'),
      resolveUrl: async (s) => (s === 'beta' ? url : null),
      timeoutMs: 2_000,
    });

  it('authenticates once, then answers calls by requestId despite junk frames', async () => {
    const p = pool();
    try {
      const [a, b] = await Promise.all([
        p.call('beta', 'GetUserProfile', { login: 'alice' }),
        p.call('beta', 'GetUserProfile', { login: 'bob' }),
      ]);
      assert.deepEqual(
        [a, b],
        [{ profile: { ...PROFILE, login: 'alice' } }, { profile: { ...PROFILE, login: 'bob' } }],
      );
      assert.equal(seen.filter((s) => s.op === 'ServerAuth').length, 1);
      assert.deepEqual(seen.find((s) => s.op === 'ServerAuth')?.payload.targetServerLogin, 'beta');
    } finally {
      await p.close();
    }
  });

  it('turns an error answer into a ShineError with its code, and an unknown peer into unavailability', async () => {
    const p = pool();
    try {
      await assert.rejects(
        p.call('beta', 'GetUserProfile', { login: 'fail' }),
        (err: { code?: string }) => err.code === 'NOT_PEER',
      );
      await assert.rejects(
        p.call('gamma', 'GetUserProfile', { login: 'alice' }),
        (err: Error) => err.name === 'PeerUnavailableError',
      );
    } finally {
      await p.close();
    }
  });

  it('checks an answer against the op’s answer schema: a malformed one fails the call', async () => {
    const p = pool();
    try {
      await assert.rejects(
        p.call('beta', 'GetUserProfile', { login: 'malformed' }),
        (err: { code?: string; message: string }) =>
          err.code === 'INTERNAL' && /malformed GetUserProfile answer/.test(err.message),
      );
    } finally {
      await p.close();
    }
  });

  it('bounds a whole call by one timeout: the time spent connecting and authenticating counts', async () => {
    // A peer that holds ServerAuth and every request until the test lets them through.
    const slow = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise((r) => slow.once('listening', r));
    const held: { op: string; answer(): void }[] = [];
    slow.on('connection', (ws) => {
      ws.on('message', (data) => {
        const req = JSON.parse(String(data)) as { op: string; requestId: string };
        held.push({
          op: req.op,
          answer: () =>
            ws.send(JSON.stringify({ op: req.op, requestId: req.requestId, status: 200, ok: true, payload: {} })),
        });
      });
    });
    const clock = new ManualClock();
    const p = new PeerPool({
      serverLogin: 'alpha',
      sign: () => 'c2lnbmF0dXJl',
      clock,
      log: createLogger('silent'),
      resolveUrl: async () => `ws://127.0.0.1:${(slow.address() as { port: number }).port}/ws`,
      timeoutMs: 1_000,
    });
    try {
      let settled: string | null = null;
      const call = p.call('slow', 'GetUserProfile', { login: 'alice' }).then(
        () => (settled = 'answered'),
        (err: Error) => (settled = err.message),
      );
      await waitUntil(() => held.length === 1, 5_000, 'ServerAuth sent');
      clock.advance(600); // authentication took 600 of the call's 1000 ms
      held.shift()!.answer();
      await waitUntil(() => held.length === 1, 5_000, 'the request sent');
      assert.equal(held[0]!.op, 'GetUserProfile');
      clock.advance(399);
      await new Promise((r) => setImmediate(r));
      assert.equal(settled, null, 'still within the call’s timeout');
      clock.advance(1);
      await call;
      assert.match(settled ?? '', /timed out/, 'the timeout counts from the start of the call, not from the request');
    } finally {
      await p.close();
      await new Promise<void>((r) => slow.close(() => r()));
    }
  });
});
