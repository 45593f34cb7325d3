/** The `shine` command line: runs a server, or acts as a thin SHiNE client over the SDK. */
import { Command, CommanderError } from 'commander';
import { registerChain } from './commands/chain.js';
import { registerCheck } from './commands/check.js';
import { registerHistory } from './commands/history.js';
import { registerIdentity } from './commands/identity.js';
import { registerRegister } from './commands/register.js';
import { registerRepair } from './commands/repair.js';
import { registerSend } from './commands/send.js';
import { registerServe } from './commands/serve.js';
import { registerStatus } from './commands/status.js';
import { registerSync } from './commands/sync.js';
import { registerWatch } from './commands/watch.js';
import { EXIT, ProblemsFoundError, UsageError, describeError } from './errors.js';

function program(): Command {
  const shine = new Command('shine')
    .description('SHiNE: a federated, end-to-end encrypted messenger — server and command-line client.')
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .addHelpText(
      'after',
      '\nExit status: 0 done, 1 the operation failed, 2 the command line is wrong,\n' +
        '3 shine check found problems it did not repair, or shine chain show found a broken chain.\n' +
        'Every command has its own help: shine <command> --help',
    );
  registerServe(shine);
  registerIdentity(shine);
  registerRegister(shine);
  registerSend(shine);
  registerWatch(shine);
  registerHistory(shine);
  registerChain(shine);
  registerSync(shine);
  registerRepair(shine);
  registerStatus(shine);
  registerCheck(shine);
  return shine;
}

async function main(argv: string[]): Promise<number> {
  try {
    await program().parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    // Commander has printed its own message (or the help) already.
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    if (err instanceof ProblemsFoundError) {
      process.stderr.write(`shine: ${err.message}\n`);
      return EXIT.problems;
    }
    if (err instanceof UsageError) {
      process.stderr.write(`shine: ${err.message}\n(add --help for usage)\n`);
      return EXIT.usage;
    }
    process.stderr.write(`shine: ${describeError(err)}\n`);
    return EXIT.failure;
  }
}

process.exitCode = await main(process.argv.slice(2));
