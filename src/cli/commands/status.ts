/** `shine status`: health, queues and peer servers of a running server, from its HTTP side. */
import type { Command } from 'commander';
import { httpCall, httpServerUrl } from '../connection.js';
import { CliError } from '../errors.js';
import { adminOptions, examples, iso, out } from '../shared.js';

/** One row of GET /debug/peers. */
export interface PeerStatus {
  serverLogin: string;
  wsUrl: string;
  connected: boolean;
  /** The last connection failed and no dial has succeeded since: sends are answered without waiting for it. */
  down: boolean;
  /** Connected, but its last call got no answer or a 5xx one: one call at a time goes to it until one succeeds. */
  notAnswering: boolean;
  state: 'up' | 'failing' | 'unknown';
  lastSuccessAtMs: number | null;
  consecutiveFailures: number;
  lastError: string | null;
  dueRows: number;
}

export function registerStatus(program: Command): void {
  adminOptions(program.command('status'), false)
    .summary("show a running server's health, queues and peer servers")
    .description(
      'Reads /healthz, /.well-known/shine-server and /metrics; with the admin token also /debug/peers ' +
        '(per peer server: connected or down, last success, consecutive failures, the last error, rows waiting for it). ' +
        'Exit status 1 when the server is unhealthy or a peer is failing.',
    )
    .addHelpText(
      'after',
      examples('shine status', 'shine status --server http://127.0.0.1:8080 --admin-token change-me'),
    )
    .action(async (flags: { server: string; adminToken?: string }) => {
      const base = httpServerUrl(flags.server);
      const descriptor = serverDescriptor(await httpCall(base, '/.well-known/shine-server'), base);
      const healthy = await httpCall(base, '/healthz').then(
        () => true,
        () => false,
      );
      const metrics = parseMetrics(await httpCall(base, '/metrics'));
      const metric = (name: string, label = ''): number => metrics.get(`${name}${label}`) ?? 0;
      out(
        `server ${descriptor.serverLogin} at ${base.origin}: ${healthy ? 'healthy' : 'UNHEALTHY (database unreachable?)'}`,
      );
      out(`  WebSocket   ${descriptor.wsUrl}`);
      out(`  sessions    ${metric('sessions_open')} open`);
      out(
        `  deliveries  ${metric('delivery_rows', '{state="accepted"}')} accepted, ${metric('delivery_rows', '{state="delivered"}')} delivered, ` +
          `${metric('delivery_rows', '{state="failed"}')} failed (counted every 30 s); ` +
          `${metric('delivery_queue_depth')} due in the queue, ${metric('delivery_attempts_running')} running`,
      );
      let failing = 0;
      if (!flags.adminToken) out('  peers       (pass --admin-token to see them)');
      else {
        const { peers } = JSON.parse(await httpCall(base, '/debug/peers', { token: flags.adminToken })) as {
          peers: PeerStatus[];
        };
        out(`  peers       ${peers.length === 0 ? 'none (a local server, or no peers configured)' : ''}`);
        for (const p of peers) {
          if (p.state === 'failing') failing++;
          out(`    ${describePeer(p)}`);
        }
      }
      if (!healthy) throw new CliError(`${base.origin} is not healthy`);
      if (failing > 0) throw new CliError(`${failing} peer server(s) failing`);
    });
}

/** The descriptor's two fields status shows; anything else means the URL is not a SHiNE server. */
function serverDescriptor(body: string, base: URL): { serverLogin: string; wsUrl: string } {
  let parsed: unknown = null;
  try {
    parsed = JSON.parse(body);
  } catch {
    // not JSON: refused below like any other non-descriptor
  }
  const d = parsed as { serverLogin?: unknown; wsUrl?: unknown } | null;
  if (typeof d?.serverLogin !== 'string' || typeof d.wsUrl !== 'string')
    throw new CliError(`not a SHiNE server: ${base.origin}/.well-known/shine-server is not a server descriptor`);
  return { serverLogin: d.serverLogin, wsUrl: d.wsUrl };
}

/** One peer as `shine status` prints it. */
export function describePeer(p: PeerStatus): string {
  const success = p.lastSuccessAtMs === null ? 'no success yet' : `last success ${iso(p.lastSuccessAtMs)}`;
  const trouble =
    p.state === 'failing' ? `FAILING: ${p.consecutiveFailures} call(s) in a row, last error: ${p.lastError}` : p.state;
  const link = p.down
    ? 'down (its last connection failed)'
    : p.notAnswering
      ? `${p.connected ? 'connected' : 'not connected'} but not answering (one call at a time until one succeeds)`
      : p.connected
        ? 'connected'
        : 'not connected';
  return `${p.serverLogin} ${p.wsUrl}: ${link}, ${trouble}, ${success}, ${p.dueRows} row(s) waiting`;
}

/** Prometheus text → value by `name{labels}`, names without the server's `shine_` prefix. */
function parseMetrics(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^shine_([a-z0-9_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) values.set(m[1]!, Number(m[2]));
  }
  return values;
}
