#!/usr/bin/env node
// Runs every test file under test/ with Node's test runner (TypeScript through tsx), then the
// integration tests (test/integration/) a second time on PostgreSQL (SHINE_TEST_DB=postgres), unless
// SHINE_TEST_SKIP_PG=1 or the first pass already ran on PostgreSQL; files with a line
// `// test.mjs: no store` (no server of theirs uses the test database) run once. Either pass failing fails the run.
// Every PostgreSQL database the run makes is named shine_t_<run>_… (SHINE_TEST_RUN); whatever of them is
// left at the end (a test that crashed before dropping its own) is dropped here.
// Usage: node scripts/test.mjs [substring filters...]
// SHINE_TEST_TIMEOUT_MS (default 120000) is the time each test file gets (npm run chaos needs more).
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

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

const run = randomBytes(4).toString('hex');
const env = { ...process.env, SHINE_TEST_RUN: run };
const pgFiles =
  process.env.SHINE_TEST_SKIP_PG === '1' || process.env.SHINE_TEST_DB === 'postgres'
    ? []
    : files.filter(
        (f) =>
          f.startsWith(join('test', 'integration') + '/') &&
          // startCluster picks its database itself (PostgreSQL unless SHINE_CLUSTER_DB=sqlite), whatever
          // SHINE_TEST_DB says: the cluster tests ran on PostgreSQL in the first pass already.
          !f.startsWith(join('test', 'integration', 'cluster-')) &&
          // A file none of whose servers uses the test database (it says so in a line of its own) would run the
          // same thing again on PostgreSQL.
          !/^\/\/ test\.mjs: no store\b/m.test(readFileSync(f, 'utf8')),
      );

let child = null;
let interrupted = null;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    interrupted = signal;
    child?.kill(signal);
  });
}

/** Runs the files in one node --test process; resolves with its exit status. */
function runTests(list, extraEnv) {
  return new Promise((resolve) => {
    child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--test',
        '--test-concurrency=2',
        `--test-timeout=${process.env.SHINE_TEST_TIMEOUT_MS ?? 120000}`,
        ...list,
      ],
      { stdio: 'inherit', env: { ...env, ...extraEnv } },
    );
    child.once('close', (code, signal) => {
      child = null;
      resolve(code ?? (signal ? 1 : 0));
    });
  });
}

/** Drops every database of this run still there. */
async function dropLeftovers() {
  const client = new pg.Client({
    connectionString: process.env.SHINE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  });
  try {
    await client.connect();
  } catch (err) {
    // No PostgreSQL here: then this run made no database on it either.
    if (pgFiles.length > 0) console.error(`test.mjs: cannot reach PostgreSQL to clean up: ${err.message}`);
    return;
  }
  try {
    const { rows } = await client.query('SELECT datname FROM pg_database WHERE datname LIKE $1', [
      `shine\\_t\\_${run}\\_%`,
    ]);
    for (const { datname } of rows) await client.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`);
    if (rows.length > 0) console.error(`test.mjs: dropped ${rows.length} database(s) the tests left behind`);
  } finally {
    await client.end();
  }
}

const seconds = (since) => ((Date.now() - since) / 1000).toFixed(0);
let status = 0;
try {
  // The browser tests serve the built client: build it once here, before test files run in parallel.
  if (files.some((f) => f.startsWith(join('test', 'web')))) {
    const b = spawnSync(process.execPath, ['--import', 'tsx', 'test/helpers/web-build.ts'], { stdio: 'inherit' });
    if (b.status !== 0) process.exit(b.status ?? 1);
  }
  const t0 = Date.now();
  const first = await runTests(files, {});
  console.error(`test.mjs: ${files.length} file(s) on ${process.env.SHINE_TEST_DB ?? 'sqlite'}: ${seconds(t0)} s`);
  if (first !== 0) status = first;
  if (pgFiles.length > 0 && interrupted === null) {
    const t1 = Date.now();
    const second = await runTests(pgFiles, { SHINE_TEST_DB: 'postgres' });
    console.error(`test.mjs: ${pgFiles.length} integration file(s) on postgres: ${seconds(t1)} s`);
    if (second !== 0) status = second;
  }
} finally {
  // The ports the run's files claimed (test/helpers/server-process.ts, freePort).
  rmSync(join(tmpdir(), `shine-test-ports-${run}`), { recursive: true, force: true });
  await dropLeftovers();
}
process.exit(interrupted ? 130 : status);
