/**
 * Processes of one server on one PostgreSQL database (docs/protocol.md §9.2, decision 27): a process
 * without SHINE_REDIS_URL refuses to start while another live process is registered, and one with
 * Redis refuses beside a live process without it — `shine serve` exits 1 with one line
 * `shine: refusing to start: …`. Processes with Redis run side by side, /debug/processes and
 * shine_processes_live show them, a clean stop removes a process's row, and a process restarted on
 * the port of one killed with SIGKILL is not refused by the dead one's row.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CliHome } from '../helpers/cli.js';
import type { Cluster } from '../helpers/cluster.js';
import { clusterDbKind, startCluster } from '../helpers/cluster.js';
import { metricSum } from '../helpers/metrics.js';
import { freePort } from '../helpers/server-process.js';
import { freshRedisPrefix, testRedisUrl } from '../helpers/test-db.js';

const TOKEN = 'cluster-refusal-token';
const skip = clusterDbKind() !== 'postgres' && 'the refusal is a PostgreSQL rule (SHINE_CLUSTER_DB=sqlite)';

/** Runs one more `shine serve` of the cluster's server to its end (it is expected to refuse). */
async function serveOnce(
  cluster: Cluster,
  env: Record<string, string>,
): Promise<{ code: number | null; lines: string[] }> {
  using home = new CliHome();
  const dataDir = mkdtempSync(join(tmpdir(), 'shine-refused-'));
  try {
    const r = await home.run(['serve'], {
      env: {
        ...cluster.env,
        SHINE_HOST: '127.0.0.1',
        SHINE_PORT: String(await freePort()),
        SHINE_DATA_DIR: dataDir,
        SHINE_LOG_LEVEL: 'silent',
        ...env,
      },
    });
    return { code: r.code, lines: r.stderr.split('\n').filter((l) => l !== '') };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

interface ProcessesView {
  self: string;
  processes: { processId: string; redis: boolean; self: boolean }[];
}

async function debugProcesses(httpUrl: string): Promise<ProcessesView> {
  const res = await fetch(`${httpUrl}/debug/processes`, { headers: { authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200);
  return (await res.json()) as ProcessesView;
}

describe('several processes of one server on PostgreSQL', { skip }, () => {
  it('a process without Redis refuses to start beside a live one, and a process with Redis refuses beside it', async () => {
    await using cluster = await startCluster({
      processes: 1,
      redis: null,
      env: { SHINE_ADMIN_TOKEN: TOKEN, SHINE_LOG_LEVEL: 'error' },
    });
    const [first] = cluster.processes;
    const alone = await serveOnce(cluster, {});
    assert.equal(alone.code, 1);
    assert.equal(alone.lines.length, 1, `one line: ${alone.lines.join(' | ')}`);
    assert.match(
      alone.lines[0]!,
      /^shine: refusing to start: another process of this server is live .*SHINE_REDIS_URL/,
    );

    const withRedis = await serveOnce(cluster, {
      SHINE_REDIS_URL: testRedisUrl(),
      SHINE_REDIS_PREFIX: freshRedisPrefix(),
    });
    assert.equal(withRedis.code, 1);
    assert.deepEqual(withRedis.lines.length, 1, `one line: ${withRedis.lines.join(' | ')}`);
    assert.match(
      withRedis.lines[0]!,
      /^shine: refusing to start: a process of this server without SHINE_REDIS_URL is live/,
    );

    const view = await debugProcesses(first!.httpUrl);
    assert.deepEqual(
      view.processes.map((p) => [p.processId, p.redis, p.self]),
      [[view.self, false, true]],
      'the refused processes left no row',
    );

    // SIGKILL leaves the row live; the process restarted on the same port is not refused by it.
    await first!.kill('SIGKILL');
    await first!.restart();
    const after = await debugProcesses(first!.httpUrl);
    assert.deepEqual(
      after.processes.map((p) => p.processId),
      [after.self],
      'the dead process row is gone',
    );
    assert.notEqual(after.self, view.self);
  });

  it('processes with Redis run side by side; a clean stop removes the row', async () => {
    await using cluster = await startCluster({
      processes: 2,
      env: { SHINE_ADMIN_TOKEN: TOKEN, SHINE_LOG_LEVEL: 'error' },
    });
    const [a, b] = cluster.processes as [(typeof cluster.processes)[0], (typeof cluster.processes)[0]];
    const view = await debugProcesses(a.httpUrl);
    assert.equal(view.processes.length, 2);
    assert.ok(view.processes.every((p) => p.redis));
    assert.equal(await metricSum(b.httpUrl, 'shine_processes_live'), 2);

    const refused = await serveOnce(cluster, { SHINE_REDIS_URL: '' });
    assert.equal(refused.code, 1);
    assert.match(refused.lines.join('\n'), /^shine: refusing to start: another process of this server is live/);

    await b.kill('SIGTERM');
    const left = await debugProcesses(a.httpUrl);
    assert.deepEqual(
      left.processes.map((p) => p.processId),
      [left.self],
      'a stopped process removes its row',
    );
  });
});
