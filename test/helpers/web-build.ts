/**
 * Builds the web client into dist/web unless it was built from exactly the current sources (a hash of
 * them is kept next to it). scripts/test.mjs calls it once before the browser tests start, so test files
 * running in parallel never build at the same time.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = process.cwd();
const STAMP = join(ROOT, 'dist', 'web-build.stamp');

function filesUnder(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const p = join(dir, name);
      return statSync(p).isDirectory() ? filesUnder(p) : [p];
    })
    .sort();
}

/** Builds dist/web unless it was built from exactly the current sources (a hash of them is kept). */
export function ensureWebBuilt(): void {
  const hash = createHash('sha256');
  for (const f of [
    ...filesUnder(join(ROOT, 'web')),
    ...filesUnder(join(ROOT, 'src', 'client')),
    ...filesUnder(join(ROOT, 'src', 'protocol')),
    join(ROOT, 'package-lock.json'),
  ])
    hash.update(f).update(readFileSync(f));
  const digest = hash.digest('hex');
  if (
    existsSync(join(ROOT, 'dist', 'web', 'index.html')) &&
    existsSync(STAMP) &&
    readFileSync(STAMP, 'utf8') === digest
  )
    return;
  const r = spawnSync(
    process.execPath,
    [
      join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js'),
      'build',
      '--config',
      'web/vite.config.ts',
      '--logLevel',
      'warn',
    ],
    { cwd: ROOT, stdio: 'inherit' },
  );
  if (r.status !== 0) throw new Error(`building the web client failed (exit ${r.status})`);
  writeFileSync(STAMP, digest);
}

// `node --import tsx test/helpers/web-build.ts` builds when stale (used by scripts/test.mjs).
if (import.meta.url === `file://${process.argv[1]}`) ensureWebBuilt();
