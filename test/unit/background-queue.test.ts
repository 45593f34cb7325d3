import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BackgroundQueue, untilAborted } from '../../src/server/background/queue.js';
import { createLogger } from '../../src/server/log.js';
import { gate } from '../helpers/gate.js';

function setup() {
  const lines: Record<string, unknown>[] = [];
  const queue = new BackgroundQueue(createLogger('debug', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)));
  return { queue, lines };
}

describe('BackgroundQueue', () => {
  it('drain() waits for running tasks and for the tasks they start', async () => {
    const { queue } = setup();
    const first = gate();
    const second = gate();
    const done: string[] = [];
    queue.run('outer', {}, async () => {
      await first.promise;
      queue.run('inner', {}, async () => {
        await second.promise;
        done.push('inner');
      });
      done.push('outer');
    });
    let drained = false;
    const drain = queue.drain().then(() => (drained = true));
    first.open();
    // The outer task ended and started the inner one: drain must still be waiting.
    while (!done.includes('outer')) await Promise.resolve();
    await new Promise((r) => setImmediate(r));
    assert.equal(drained, false, 'drain resolved while a spawned task was running');
    assert.equal(queue.size, 1);
    second.open();
    await drain;
    assert.deepEqual(done, ['outer', 'inner']);
    assert.equal(queue.size, 0);
  });

  it('a task that ends with the shutdown’s abort is not logged as failed; one failing otherwise meanwhile is', async () => {
    const { queue, lines } = setup();
    queue.run('chain push', { partner: 'gamma' }, (signal) => untilAborted(new Promise(() => {}), signal));
    queue.run('cleanup', {}, async (signal) => {
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
      throw new Error('disk on fire');
    });
    // Both are waiting when the shutdown comes.
    await new Promise((r) => setImmediate(r));
    await queue.close();
    const failures = lines.filter((l) => l.level === 'error');
    assert.deepEqual(
      failures.map((l) => l.task),
      ['cleanup'],
      JSON.stringify(lines),
    );
    assert.ok(
      lines.some((l) => l.level === 'debug' && l.task === 'chain push'),
      'the stopped task is logged at debug',
    );
  });

  it('drain() on an idle queue resolves at once', async () => {
    const { queue } = setup();
    await queue.drain();
  });

  it('a failing task is logged once, with its name and context, and does not disturb the others', async () => {
    const { queue, lines } = setup();
    let ok = false;
    queue.run('due-row scan', { peer: 'beta' }, () => Promise.reject(new Error('disk on fire')));
    queue.run('fine', {}, async () => void (ok = true));
    await queue.drain();
    const failures = lines.filter((l) => l.level === 'error');
    assert.equal(failures.length, 1);
    assert.equal(failures[0]!.task, 'due-row scan');
    assert.equal(failures[0]!.peer, 'beta');
    assert.match(JSON.stringify(failures[0]!.err), /disk on fire/);
    assert.ok(ok);
  });

  it('close() aborts the signal of running tasks, waits for them, and starts nothing after', async () => {
    const { queue } = setup();
    let sawAbort = false;
    const started = gate();
    queue.run('long', {}, (signal) => {
      return new Promise<void>((resolve) => {
        signal.addEventListener('abort', () => {
          sawAbort = true;
          resolve();
        });
        started.open();
      });
    });
    await started.promise;
    assert.equal(queue.signal.aborted, false);
    await queue.close();
    assert.ok(sawAbort, 'the running task saw the abort');
    assert.equal(queue.size, 0);
    let late = false;
    queue.run('late', {}, async () => void (late = true));
    await queue.drain();
    assert.equal(late, false, 'no task starts after close');
  });

  it('untilAborted on an aborted signal rejects at once and still observes the promise it was given', async () => {
    const controller = new AbortController();
    controller.abort(new Error('server shutting down'));
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      let failCall!: (err: Error) => void;
      const p = new Promise<never>((_, reject) => (failCall = reject));
      await assert.rejects(untilAborted(p, controller.signal), /server shutting down/);
      // The call fails after the abort (the peers close): nobody awaits it any more, and that is fine.
      failCall(new Error('pool closed'));
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('untilAborted settles as the promise does while the signal stays unaborted', async () => {
    const controller = new AbortController();
    assert.equal(await untilAborted(Promise.resolve(7), controller.signal), 7);
    await assert.rejects(untilAborted(Promise.reject(new Error('peer down')), controller.signal), /peer down/);
  });
});

describe('untilAborted', () => {
  it('rejects at once on an aborted signal, and the abandoned promise failing later goes unnoticed', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      const controller = new AbortController();
      controller.abort(new Error('stopping'));
      let fail!: (err: Error) => void;
      const call = new Promise<never>((_, reject) => (fail = reject));
      await assert.rejects(untilAborted(call, controller.signal), /stopping/);
      fail(new Error('pool closed'));
      // Unhandled rejections are reported after the microtasks of this turn: wait one macrotask.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
