import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import type { LogLevel } from '../../src/server/log.js';
import { createLogger, REDACTED_FIELDS } from '../../src/server/log.js';

function capture(level: LogLevel = 'debug') {
  const lines: string[] = [];
  const log = createLogger(level, (l) => lines.push(l), { self: 'alpha' });
  return { log, lines, entries: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe('logger (pino adapter)', () => {
  it('writes one JSON object per line with an ISO time, the level name, base and child fields', () => {
    const { log, entries } = capture();
    log.child({ requestId: 'r1', op: 'SendMessagePair', sessionId: 's1' }).info('sent', { n: 2 });
    const [e] = entries();
    assert.equal(e!.level, 'info');
    assert.equal(e!.msg, 'sent');
    assert.match(String(e!.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.deepEqual([e!.self, e!.requestId, e!.op, e!.sessionId, e!.n], ['alpha', 'r1', 'SendMessagePair', 's1', 2]);
  });

  it("a child's child carries both bindings; a child drops entries below the level like its parent", () => {
    const { log, entries } = capture('info');
    const child = log.child({ requestId: 'r2', op: 'AuthLogin' });
    child.debug('hidden');
    child.child({ attempt: 3 }).warn('retry', { n: 1 });
    child.info('once more');
    assert.deepEqual(
      entries().map((e) => [e.msg, e.requestId, e.op, e.attempt, e.self]),
      [
        ['retry', 'r2', 'AuthLogin', 3, 'alpha'],
        ['once more', 'r2', 'AuthLogin', undefined, 'alpha'],
      ],
    );
  });

  it('drops entries below the level; silent writes nothing', () => {
    const info = capture('info');
    info.log.debug('hidden');
    info.log.warn('shown');
    assert.deepEqual(
      info.entries().map((e) => e.msg),
      ['shown'],
    );
    const silent = capture('silent');
    silent.log.error('nothing');
    assert.deepEqual(silent.lines, []);
  });

  it('serialises errors with type, message, stack and code', () => {
    const { log, entries } = capture();
    log.error('failed', { err: Object.assign(new Error('disk full'), { code: 'ENOSPC' }) });
    const err = entries()[0]!.err as Record<string, unknown>;
    assert.equal(err.type, 'Error');
    assert.equal(err.message, 'disk full');
    assert.equal(err.code, 'ENOSPC');
    assert.match(String(err.stack), /disk full\n\s+at /);
  });

  it('never writes message content, keys or push credentials, at any of the first four levels', () => {
    const { log, lines } = capture();
    const secrets: string[] = [];
    const secret = () => {
      secrets.push(`SECRET-${secrets.length}-${Math.random().toString(36).slice(2)}`);
      return secrets.at(-1)!;
    };
    for (const field of REDACTED_FIELDS) {
      log.warn('top', { [field]: secret() });
      log.warn('nested', { payload: { [field]: secret() } });
      log.warn('in a list', { payload: { items: [{ [field]: secret() }] } });
      log.child({ requestId: 'r' }).warn('child', { a: { b: { [field]: secret() } } });
    }
    assert.equal(lines.length, REDACTED_FIELDS.length * 4);
    const all = lines.join('\n');
    for (const s of secrets) assert.ok(!all.includes(s), `${s} is in the log`);
    assert.equal(all.match(/\[redacted\]/g)?.length, secrets.length);
  });

  it('writes to a stream given as destination', () => {
    const chunks: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _enc, done) {
        chunks.push(String(chunk));
        done();
      },
    });
    createLogger('info', stream).info('to the stream', { endpoint: 'https://push.example/abc' });
    assert.equal(chunks.length, 1);
    assert.match(chunks[0]!, /"msg":"to the stream".*\n$/);
    assert.doesNotMatch(chunks[0]!, /push\.example/);
  });
});
