/** `shine history`: the dialog with one user, oldest first, texts decrypted. */
import type { Command } from 'commander';
import type { HistoryEntry } from '../../client/index.js';
import type { ClientFlags } from '../connection.js';
import { withClient } from '../connection.js';
import { CliError, checkLogin } from '../errors.js';
import { clientOptions, examples, iso, out, positiveInteger } from '../shared.js';

export function registerHistory(program: Command): void {
  clientOptions(program.command('history'))
    .summary('show the dialog with one user')
    .description(
      'Prints the newest --limit messages exchanged with --with, oldest first, with delivery and read states.',
    )
    .requiredOption('--with <login>', 'the other user of the dialog')
    .option('--limit <n>', 'how many messages', positiveInteger, 20)
    .addHelpText(
      'after',
      examples('shine history --as bob --with alice', 'shine history --as bob --with alice --limit 100'),
    )
    .action(async (flags: ClientFlags & { with: string; limit: number }) => {
      const peer = checkLogin(flags.with, 'login for --with');
      await withClient(flags, async (client) => {
        const page = await client.history(peer, { limit: flags.limit });
        if (page.items.length === 0) {
          // An empty dialog and an unknown user look the same in GetDirectMessages; only one is a mistake.
          const known = await client.getProfile(peer).then(
            () => true,
            (err: unknown) => {
              if ((err as { code?: string }).code === 'USER_NOT_FOUND') return false;
              throw err;
            },
          );
          if (!known) throw new CliError(`USER_NOT_FOUND: no user ${peer} is known to ${flags.server}`);
          out(`no messages with ${peer} yet`);
          return;
        }
        // The server pages newest first; a terminal reads best oldest first.
        for (const item of page.items.reverse()) out(describeHistory(item));
        if (page.hasMore) out('(older messages not shown; raise --limit)');
      });
    });
}

function describeHistory(item: HistoryEntry): string {
  const state = [item.deliveryState, item.readAtMs === null ? null : `read ${iso(item.readAtMs)}`]
    .filter(Boolean)
    .join(', ');
  const body = item.text === null ? `unreadable: ${item.problem}` : JSON.stringify(item.text);
  return `${iso(item.timeMs)} ${item.fromLogin} → ${item.toLogin}${item.revisionTimeMs > 0 ? ' (edited)' : ''}: ${body}${state ? ` [${state}]` : ''}`;
}
