#!/usr/bin/env node
// Runs every test file under test/ with Node's test runner (TypeScript through tsx).
// Usage: node scripts/test.mjs [substring filters...]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function walk(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith('.test.ts')) out.push(p);
  }
  return out;
}

const filters = process.argv.slice(2);
const files = walk('test')
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error('no test files matched');
  process.exit(1);
}
// The browser tests serve the built client: build it once here, before test files run in parallel.
if (files.some((f) => f.startsWith(join('test', 'web')))) {
  const b = spawnSync(process.execPath, ['--import', 'tsx', 'test/helpers/web-build.ts'], { stdio: 'inherit' });
  if (b.status !== 0) process.exit(b.status ?? 1);
}
const r = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-timeout=120000', ...files],
  { stdio: 'inherit' },
);
process.exit(r.status ?? 1);
