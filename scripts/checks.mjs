#!/usr/bin/env node
// The static checks of `npm test` — typecheck, lint, format:check — run side by side (each is mostly one
// core's work, and CI machines have two or more). Each one's output is printed when it ends, whole, so
// the outputs do not interleave. Fails when any of them fails.
import { spawn } from 'node:child_process';

const scripts = ['typecheck', 'lint', 'format:check'];
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

const results = await Promise.all(
  scripts.map(
    (name) =>
      new Promise((resolve) => {
        const t0 = Date.now();
        const child = spawn(npm, ['run', '--silent', name], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        child.once('close', (code, signal) => {
          const status = code ?? (signal ? 1 : 0);
          const seconds = ((Date.now() - t0) / 1000).toFixed(0);
          process.stderr.write(
            `${out}checks.mjs: npm run ${name}: ${status === 0 ? 'ok' : `failed (${status})`} in ${seconds} s\n`,
          );
          resolve(status);
        });
      }),
  ),
);
process.exit(results.some((s) => s !== 0) ? 1 : 0);
