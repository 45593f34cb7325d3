/**
 * Runs README.md's "Trying it with the CLI" block line by line, as a new user would paste it, so the
 * README cannot drift from the program. The only change: port 8080 becomes a free port (tests run
 * side by side), and HOME, XDG_CONFIG_HOME and SHINE_DATA_DIR point into a temporary folder.
 */
// test.mjs: no store (its server keeps the README's default store, SQLite under SHINE_DATA_DIR, whatever SHINE_TEST_DB says: the PostgreSQL pass would run the same thing again)
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freePort } from '../helpers/server-process.js';
import { waitUntil } from '../helpers/wait.js';

/** The shell lines of the first ```sh block under the heading. */
export function walkthroughLines(readme: string, heading = '## Trying it with the CLI'): string[] {
  const section = readme.slice(readme.indexOf(heading));
  const block = /```sh\n([\s\S]*?)```/.exec(section);
  assert.ok(block, `no sh block under ${heading}`);
  return block[1]!.split('\n').filter((line) => line.trim() !== '');
}

interface Shell {
  child: ChildProcess;
  out: string;
  err: string;
  done: Promise<number | null>;
}

function shell(line: string, env: NodeJS.ProcessEnv): Shell {
  // Its own process group, so that stopping a background line stops what the shell started too.
  const child = spawn('bash', ['-c', line], { env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const s: Shell = { child, out: '', err: '', done: new Promise((r) => child.once('close', r)) };
  child.stdout!.on('data', (d: Buffer) => (s.out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (s.err += d.toString()));
  return s;
}

describe('README walkthrough', () => {
  it('every line of "Trying it with the CLI" works as written', async () => {
    const lines = walkthroughLines(readFileSync('README.md', 'utf8'));
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'shine-readme-'));
    const env = {
      ...process.env,
      HOME: dir,
      XDG_CONFIG_HOME: join(dir, 'config'),
      SHINE_DATA_DIR: join(dir, 'data'),
      SHINE_PORT: String(port),
      SHINE_LOG_LEVEL: 'warn',
      SHINE_ADMIN_TOKEN: '',
    };
    const background: Shell[] = [];
    try {
      for (const raw of lines) {
        const line = raw.replaceAll(':8080', `:${port}`);
        // A line whose command ends in `&` keeps running: the next line waits for its first output.
        const bg = /&\s*(#.*)?$/.test(line);
        const s = shell(bg ? line.replace(/&\s*(#.*)?$/, '') : line, env);
        if (bg) {
          background.push(s);
          await waitUntil(() => s.out.length > 0 || s.child.exitCode !== null, 60_000, `output of: ${raw}`);
          assert.equal(s.child.exitCode, null, `${raw} stopped: ${s.out}${s.err}`);
        } else {
          const code = await s.done;
          assert.equal(code, 0, `${raw} exited ${code}:\n${s.out}${s.err}`);
        }
      }
      const [serve, watch] = background;
      assert.match(serve!.out, /next steps/);
      await waitUntil(
        () => /"hello bob"/.test(watch!.out) && /"a longer text, from a pipe or a file"/.test(watch!.out),
        15_000,
        `watch to print both messages (so far: ${watch!.out})`,
      );
    } finally {
      for (const s of background.reverse()) {
        if (s.child.exitCode === null) process.kill(-s.child.pid!, 'SIGTERM');
        await s.done;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
