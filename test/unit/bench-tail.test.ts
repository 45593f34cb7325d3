/**
 * The tail probe of bench/federated-send.ts (BENCH_TAIL=1): a real process with the probe loaded logs a
 * stall it was held for, and the report counts each slow pair against the pauses that overlap it; the idle
 * witness process lives no longer than its bench; and the main thread's wait for a core is read from Linux.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runQueueWaitMs, syscallCounts } from '../../bench/lib/federated-load.js';
import { startTailRecording, tailReport } from '../../bench/lib/tail.js';

const probe = new URL('../../bench/lib/tail-probe.cjs', import.meta.url).pathname;

describe('bench tail probe', () => {
  it('logs an event-loop stall of a process it is loaded into, with its wall-clock time', () => {
    const dir = mkdtempSync(join(tmpdir(), 'shine-tail-test-'));
    // The child lets its 1 ms timer run, holds its event loop for 40 ms, then lets the timer fire again.
    const script = `
      const { writeFileSync } = require('node:fs');
      setTimeout(() => {
        const from = Date.now();
        while (Date.now() - from < 40) {}
        writeFileSync(${JSON.stringify(join(dir, 'held'))}, String(from));
        setTimeout(() => {}, 20);
      }, 20);`;
    const r = spawnSync(process.execPath, ['--require', probe, '-e', script], {
      env: { ...process.env, SHINE_BENCH_TAIL_DIR: dir },
    });
    assert.equal(r.status, 0, String(r.stderr));
    const heldAt = Number(readFileSync(join(dir, 'held'), 'utf8'));
    const stalls = readFileSync(join(dir, `${r.pid}.log`), 'utf8')
      .split('\n')
      .filter((line) => line.startsWith('stall '))
      .map((line) => line.split(' ').map(Number));
    assert.ok(
      stalls.some(([, at, ms]) => ms! >= 35 && Math.abs(at! - heldAt) < 15),
      `a stall of about 40 ms at ${heldAt}: ${JSON.stringify(stalls)}`,
    );
  });

  it('counts each slow pair against the GC pauses and stalls that overlap it', () => {
    const dir = mkdtempSync(join(tmpdir(), 'shine-tail-test-'));
    writeFileSync(join(dir, '100.log'), 'gc 1000.00 4.00\nstall 2000.00 5.00\n');
    writeFileSync(join(dir, '200.log'), 'stall 3000.00 6.00\n');
    // 198 pairs of 1 ms that overlap no pause, and three slow ones: the p99 (9 ms) takes all three.
    const pairs = Array.from({ length: 198 }, (_, i) => ({ sentAtMs: i * 20 + 10, ms: 1 }));
    pairs.push({ sentAtMs: 998, ms: 10 }); // over A's GC pause
    pairs.push({ sentAtMs: 2995, ms: 9 }); // over B's stall
    pairs.push({ sentAtMs: 3500, ms: 9 }); // over nothing
    const report = tailReport(pairs, { A: 100, B: 200 }, dir);
    assert.equal(report.slowPairs, 3);
    assert.equal(report.slowPairsOverNoPause, 1);
    assert.deepEqual(report.byProcess.A, {
      gcPauses: 1,
      gcMs: 4,
      stalls: 1,
      stallMs: 5,
      slowPairsOverGc: 1,
      slowPairsOverStallOnly: 0,
    });
    assert.equal(report.byProcess.B!.slowPairsOverStallOnly, 1);
    assert.equal(report.byProcess.B!.slowPairsOverGc, 0);
    // Without the two paused pairs, one slow pair in 199 is below the p99.
    assert.equal(report.p99WithoutPausedPairsMs, 1);
  });

  it('runs an idle witness process with the probe until stopped, and not past the bench that started it', async () => {
    const alive = (pid: number): boolean => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    const gone = async (pid: number): Promise<void> => {
      for (let i = 0; i < 200 && alive(pid); i++) await sleep(25);
      assert.equal(alive(pid), false, `process ${pid} still runs`);
    };
    const before = process.env.SHINE_BENCH_TAIL_DIR;
    const recording = startTailRecording();
    try {
      assert.equal(alive(recording.idlePid), true);
      recording.stop();
      await gone(recording.idlePid);
    } finally {
      // The probe loaded into this process stops writing once its folder is gone.
      rmSync(recording.dir, { recursive: true, force: true });
      if (before === undefined) delete process.env.SHINE_BENCH_TAIL_DIR;
      else process.env.SHINE_BENCH_TAIL_DIR = before;
    }
    // A bench that exits without stopping it (a crash, an exception) takes its witness with it.
    const tail = new URL('../../bench/lib/tail.ts', import.meta.url).href;
    const r = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `const { startTailRecording } = await import(${JSON.stringify(tail)}); console.log(startTailRecording().idlePid);`,
      ],
      { encoding: 'utf8' },
    );
    assert.equal(r.status, 0, r.stderr);
    await gone(Number(r.stdout.trim()));
  });

  it("reads how long a process's main thread waited for a core: more busy processes than cores wait", async (t) => {
    if (runQueueWaitMs(process.pid) === null) return t.skip('no /proc/<pid>/task/<pid>/schedstat here');
    // One more busy process than there are cores: at every moment one of them is runnable and waiting.
    const busy = Array.from({ length: availableParallelism() + 1 }, () =>
      spawn(process.execPath, ['-e', 'const end = Date.now() + 5000; while (Date.now() < end) {}'], {
        stdio: 'ignore',
      }),
    );
    try {
      await sleep(100);
      const before = busy.map((c) => runQueueWaitMs(c.pid!) ?? 0);
      await sleep(500);
      const waited = busy.reduce((sum, c, i) => sum + (runQueueWaitMs(c.pid!) ?? 0) - before[i]!, 0);
      assert.ok(waited >= 100, `${busy.length} busy processes waited ${waited} ms in all over 500 ms`);
    } finally {
      for (const c of busy) c.kill();
    }
    assert.equal(runQueueWaitMs(2 ** 22 + 1), null); // above Linux's largest pid
  });

  it("counts a process's write syscalls from Linux", (t) => {
    const before = syscallCounts(process.pid);
    if (before === null) return t.skip('no /proc/<pid>/io here');
    const dir = mkdtempSync(join(tmpdir(), 'shine-syscalls-test-'));
    const fd = openSync(join(dir, 'f'), 'w');
    try {
      for (let i = 0; i < 100; i++) writeSync(fd, 'x');
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
    const after = syscallCounts(process.pid)!;
    assert.ok(after.writes - before.writes >= 100, `${after.writes - before.writes} writes counted for 100`);
    assert.ok(Number.isFinite(after.reads) && after.reads >= before.reads);
    assert.equal(syscallCounts(2 ** 22 + 1), null);
  });
});
