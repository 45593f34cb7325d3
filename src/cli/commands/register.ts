/** `shine register`: publishes the identity's signed profile on a server. */
import type { Command } from 'commander';
import { fetchServerDescriptor, makeProfile } from '../../client/index.js';
import type { ClientFlags } from '../connection.js';
import { withClient } from '../connection.js';
import { UsageError, checkLogin } from '../errors.js';
import { clientOptions, examples, out } from '../shared.js';

export function registerRegister(program: Command): void {
  clientOptions(program.command('register'))
    .summary('publish your profile (public keys and access servers) on a server')
    .description(
      'Registers the identity on the server given by --server. A profile names one or two access servers; ' +
        'this command talks to one of them only: register on the other one with a second call.',
    )
    .option('--access-servers <a,b>', "one or two serverLogins (default: the server's own)")
    .addHelpText(
      'after',
      examples(
        'shine register --as alice --server ws://127.0.0.1:8080/ws',
        'shine register --as carol --server wss://alpha.example/ws --access-servers alpha,beta',
      ),
    )
    .action(async (flags: ClientFlags & { accessServers?: string }) => {
      const wanted = flags.accessServers
        ?.split(',')
        .map((s) => checkLogin(s.trim(), 'serverLogin in --access-servers'));
      if (wanted && (wanted.length < 1 || wanted.length > 2 || wanted[0] === wanted[1]))
        throw new UsageError('--access-servers takes one or two different serverLogins, e.g. alpha,beta');
      await withClient(
        flags,
        async (client, identity) => {
          const here = (await fetchServerDescriptor(flags.server)).serverLogin;
          const accessServers = wanted ?? [here];
          if (!accessServers.includes(here))
            throw new UsageError(
              `the server at ${flags.server} is ${here}, which --access-servers does not name: register on one of ${accessServers.join(', ')}`,
            );
          const existing = await client.getProfile(identity.login).catch((err: unknown) => {
            if ((err as { code?: string }).code === 'USER_NOT_FOUND') return null;
            throw err;
          });
          const others = accessServers.filter((s) => s !== here);
          const also =
            others.length > 0
              ? `\n${others[0]} was not contacted: to register there too, run this command with --server set to ${others[0]}'s WebSocket URL`
              : '';
          const fresh = makeProfile(identity, accessServers, (existing?.version ?? 0) + 1, Date.now());
          if (
            existing &&
            existing.signKeyB64 === fresh.signKeyB64 &&
            existing.encKeyB64 === fresh.encKeyB64 &&
            existing.accessServers.join() === accessServers.join()
          ) {
            out(
              `${identity.login} is already registered on ${here} (profile version ${existing.version}, access servers ${accessServers.join(',')})${also}`,
            );
            return;
          }
          const profile = await client.register(fresh);
          out(
            `registered ${profile.login} on ${here} (profile version ${profile.version}, access servers ${profile.accessServers.join(',')})${also}`,
          );
        },
        false,
      );
    });
}
