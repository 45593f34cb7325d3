/** Reading a server's GET /metrics in tests. */
import { waitUntil } from './wait.js';

/**
 * The sum of a Prometheus series over every label set that includes `labels` (e.g. `shine_ops_total`
 * with `{op: 'ReceiveIncomingMessage'}` sums all statuses unless one is given); 0 when absent.
 */
export async function metricSum(httpUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${httpUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = new Map([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
    if (Object.entries(labels).every(([k, v]) => have.get(k) === v)) sum += Number(m[3]);
  }
  return sum;
}

/**
 * Waits until a server has no server-to-server call to `peer` open (waiting for a connection
 * included), so that no call made earlier can reach the peer when it comes back.
 */
export async function callsToPeerEnded(httpUrl: string, peer: string, timeoutMs = 30_000): Promise<void> {
  await waitUntil(
    async () => (await metricSum(httpUrl, 'shine_s2s_calls_open', { peer })) === 0,
    timeoutMs,
    `calls to ${peer} ended`,
  );
}
