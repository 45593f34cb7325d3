/** Pieces every command uses: output, the client options and number parsing. */
import type { Command } from 'commander';
import { InvalidArgumentError, Option } from 'commander';
import { DEFAULT_HTTP_URL, DEFAULT_WS_URL } from './connection.js';

export const out = (line: string): void => void process.stdout.write(line + '\n');
export const note = (line: string): void => void process.stderr.write(`shine: ${line}\n`);
export const iso = (ms: number): string => new Date(ms).toISOString();

/** --as / --identity / --server / --device, the same on every command that talks to a server as a user. */
export function clientOptions(cmd: Command): Command {
  return cmd
    .option('--as <login>', 'act as this identity from the identities folder (see shine identity --help)')
    .option('--identity <file>', 'act as the identity in this file instead')
    .option('--server <ws-url>', "the server's WebSocket URL", DEFAULT_WS_URL)
    .option('--device <id>', 'device id of this session (1..64 of A-Z a-z 0-9 _ -)', 'cli');
}

/** --server and --admin-token for the HTTP admin side; the token may come from the environment. */
export function adminOptions(cmd: Command, tokenRequired: boolean): Command {
  return cmd
    .option('--server <http-url>', "the server's HTTP URL (its ws:// URL works too)", DEFAULT_HTTP_URL)
    .addOption(
      new Option(
        '--admin-token <token>',
        `the server's SHINE_ADMIN_TOKEN${tokenRequired ? '' : ' (shows peers and queues too)'}`,
      ).env('SHINE_ADMIN_TOKEN'),
    );
}

/** A commander parser for whole numbers ≥ 1. */
export function positiveInteger(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number of at least 1');
  return n;
}

/** The example block at the end of a command's --help. */
export const examples = (...lines: string[]): string => `\nExamples:\n${lines.map((l) => `  $ ${l}`).join('\n')}\n`;

/** Resolves with the name of the first SIGINT/SIGTERM; a second one exits at once. */
export function untilSignal(): Promise<string> {
  return new Promise((resolve) => {
    const onSignal = (signal: string): void => {
      process.once(signal, () => process.exit(130));
      resolve(signal);
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}
