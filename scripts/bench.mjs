#!/usr/bin/env node
// Runs every bench/*.ts one after another (never in parallel: they measure the machine) and passes
// through the one JSON line each prints. Usage: node scripts/bench.mjs [substring filters...]
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

const filters = process.argv.slice(2);
const files = readdirSync('bench')
  .filter((name) => name.endsWith('.ts') && !name.endsWith('.d.ts'))
  .map((name) => join('bench', name))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error('no bench files matched');
  process.exit(1);
}
let failed = 0;
for (const file of files) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', file], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) {
    failed++;
    console.error(`${file} exited with ${r.status ?? r.signal}`);
  }
}
process.exit(failed === 0 ? 0 : 1);
