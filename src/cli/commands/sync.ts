/** `shine sync`: one replication cycle now (POST /admin/sync, docs/protocol.md §8). */
import type { Command } from 'commander';
import type { SyncCycleSummary } from '../../protocol/ops.js';
import { httpCall, httpServerUrl } from '../connection.js';
import { CliError, UsageError } from '../errors.js';
import { adminOptions, examples, out } from '../shared.js';

export function registerSync(program: Command): void {
  adminOptions(program.command('sync'), true)
    .summary("run one replication cycle between a server and its users' other servers")
    .description(
      'Asks the server for one replication cycle now and prints its summary. Needs the admin token; ' +
        'exit status 1 when an exchange with a peer server failed. A local (not federated) server has no peers.',
    )
    .option('--json', 'print the summary as JSON', false)
    .addHelpText(
      'after',
      examples(
        'shine sync --server http://127.0.0.1:8080 --admin-token change-me',
        'SHINE_ADMIN_TOKEN=change-me shine sync --json',
      ),
    )
    .action(async (flags: { server: string; adminToken?: string; json: boolean }) => {
      const base = httpServerUrl(flags.server);
      if (!flags.adminToken) throw new UsageError('--admin-token (or SHINE_ADMIN_TOKEN) is required');
      const body = await httpCall(base, '/admin/sync', { method: 'POST', token: flags.adminToken });
      const s = JSON.parse(body) as SyncCycleSummary;
      if (flags.json) out(body);
      else
        out(
          `sync done in ${s.durationMs} ms: ${s.peers} peer server(s), ${s.users} shared user(s); pulled ${s.dmRows} message row(s) and ${s.settingsRows} setting row(s); repaired ${s.repairedCopies} copy(ies); pulled ${s.chainBlocksPulled} chain block(s), resynced ${s.chainResyncs} chain(s); ${s.errors} error(s)` +
            (s.peers === 0 ? ' — nothing to replicate: the server is local or shares no user with another server' : ''),
        );
      if (s.errors > 0) throw new CliError(`${s.errors} exchange(s) with peer servers failed; see the server log`);
    });
}
