/** Reading a server's GET /metrics in tests. */
import { scrape } from './prometheus.js';
import { waitUntil } from './wait.js';

/**
 * The sum of a Prometheus series over every label set that includes `labels` (e.g. `shine_ops_total`
 * with `{op: 'ReceiveIncomingMessage'}` sums all statuses unless one is given); 0 when absent. The
 * scrape is parsed strictly, so every test that reads a metric also checks the exposition format.
 */
export async function metricSum(httpUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  let sum = 0;
  for (const family of (await scrape(httpUrl)).values()) {
    for (const s of family.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
    }
  }
  return sum;
}

/** metricSum over several processes (of one server, or the processes a test reads together), added up. */
export async function metricSumOver(
  httpUrls: readonly string[],
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const values = await Promise.all(httpUrls.map((url) => metricSum(url, name, labels)));
  return values.reduce((a, b) => a + b, 0);
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
