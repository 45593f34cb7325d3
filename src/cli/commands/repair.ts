/** `shine repair`: anti-entropy now (POST /admin/repair, docs/protocol.md §7 "Anti-entropy", §8). */
import type { Command } from 'commander';
import type { RepairSummary } from '../../protocol/ops.js';
import { httpCall, httpServerUrl } from '../connection.js';
import { CliError, UsageError } from '../errors.js';
import { adminOptions, examples, out } from '../shared.js';

export function registerRepair(program: Command): void {
  adminOptions(program.command('repair'), true)
    .summary("compare a server's copy of its users' histories with their other server's and fetch what it lacks")
    .description(
      'Asks the server to compare, by digests, the message history of one user (or of every user it shares ' +
        'with another server) with the other server of that user, and to fetch every message it lacks or holds ' +
        'in an older version — for a server restored from a backup. Nothing is sent again to anyone. ' +
        'Needs the admin token; exit status 1 when an exchange with a peer server failed.',
    )
    .option('--owner <login>', 'only this user (default: every user shared with a peer server)')
    .option('--json', 'print the summary as JSON', false)
    .addHelpText(
      'after',
      examples(
        'shine repair --server http://127.0.0.1:8080 --admin-token change-me --owner alice',
        'SHINE_ADMIN_TOKEN=change-me shine repair --json',
      ),
    )
    .action(async (flags: { server: string; adminToken?: string; owner?: string; json: boolean }) => {
      const base = httpServerUrl(flags.server);
      if (!flags.adminToken) throw new UsageError('--admin-token (or SHINE_ADMIN_TOKEN) is required');
      const query = flags.owner ? `?owner=${encodeURIComponent(flags.owner)}` : '';
      const body = await httpCall(base, `/admin/repair${query}`, { method: 'POST', token: flags.adminToken });
      const s = JSON.parse(body) as RepairSummary;
      if (flags.json) out(body);
      else
        out(
          `repair done in ${s.durationMs} ms: ${s.owners} user(s) with ${s.peers} peer server(s); ` +
            `${s.rangesCompared} range(s) compared in ${s.roundTrips} request(s); ${s.differences} copy(ies) missing or older here, ` +
            `${s.copiesRepaired} repaired; ${s.peerBehind} copy(ies) the peer lacks (its own repair fetches them); ${s.errors} error(s)` +
            (s.owners === 0 ? ' — nothing to compare: no such user is shared with another server' : ''),
        );
      if (s.errors > 0) throw new CliError(`${s.errors} repair(s) failed; see the server log`);
    });
}
