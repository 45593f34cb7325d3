/** `shine identity create|list`: key pairs kept in the per-user identities folder. */
import type { Command } from 'commander';
import { DEFAULT_WS_URL } from '../connection.js';
import { identitiesDir, storedLogins, createIdentityFile } from '../identities.js';
import { examples, out } from '../shared.js';

export function registerIdentity(program: Command): void {
  const identity = program
    .command('identity')
    .summary('create and list identities (your login and secret keys)')
    .description(
      `Identities hold secret keys. By default they live in ${identitiesDir()}\n` +
        '($XDG_CONFIG_HOME/shine/identities or ~/.config/shine/identities; folder 0700, files 0600), ' +
        'and other commands pick one with --as LOGIN.',
    );
  identity
    .command('create')
    .description('Creates a new identity (fresh signing and encryption keys) for a login; never overwrites one.')
    .requiredOption('--login <login>', '3..32 of a-z 0-9 _ . - (starting with a letter or digit)')
    .option('--out <file>', 'write it to this file instead of the identities folder')
    .addHelpText(
      'after',
      examples('shine identity create --login alice', 'shine identity create --login bob --out bob.identity.json'),
    )
    .action(async (flags: { login: string; out?: string }) => {
      const { identity: created, path } = await createIdentityFile(flags.login, flags.out);
      out(`created identity ${created.login} in ${path} (secret keys: keep this file private)`);
      const who = flags.out === undefined ? `--as ${created.login}` : `--identity ${path}`;
      out(`next: shine register ${who} --server ${DEFAULT_WS_URL}`);
    });
  identity
    .command('list')
    .description('Lists the identities in the identities folder.')
    .addHelpText('after', examples('shine identity list'))
    .action(async () => {
      const logins = await storedLogins();
      if (logins.length === 0) out(`no identities in ${identitiesDir()}`);
      for (const login of logins) out(login);
    });
}
