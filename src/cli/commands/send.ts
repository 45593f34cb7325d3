/** `shine send`: one end-to-end encrypted text, from the arguments, stdin or a file. */
import { readFile } from 'node:fs/promises';
import { text as readStream } from 'node:stream/consumers';
import type { Command } from 'commander';
import type { ClientFlags } from '../connection.js';
import { withClient } from '../connection.js';
import { UsageError, checkLogin } from '../errors.js';
import { clientOptions, examples, out } from '../shared.js';

/** What `send` prints when the recipient's servers did not confirm at once (issue 9 fixes the words). */
export const ACCEPTED_NOTE = 'accepted — retrying for up to 1 h; follow with shine watch';

export function registerSend(program: Command): void {
  clientOptions(program.command('send'))
    .summary('send a text message')
    .description(
      'Encrypts and signs a text for --to and hands it to your server. The text comes from the arguments, ' +
        'from stdin (give - or no text with stdin not a terminal) or from --file; one trailing newline is dropped.',
    )
    .argument('[text...]', 'the text (words are joined with spaces); - reads stdin')
    .requiredOption('--to <login>', 'the recipient')
    .option('--file <file>', 'send the contents of this file (UTF-8)')
    .addHelpText(
      'after',
      examples(
        'shine send --as alice --to bob "hello bob"',
        'echo "hello from a pipe" | shine send --as alice --to bob',
        'shine send --as alice --to bob --file notes.txt',
      ),
    )
    .action(async (words: string[], flags: ClientFlags & { to: string; file?: string }) => {
      const to = checkLogin(flags.to, 'recipient login for --to');
      const text = await messageText(words, flags.file);
      await withClient(flags, async (client, identity) => {
        if (to === identity.login)
          throw new UsageError(`--to ${to} is you: SAME_LOGIN, a message needs another user as recipient`);
        const sent = await client.sendText(to, text);
        // The recipient's copy key is the one their watch and history show; ours is what delivery events name.
        out(
          `${sent.deliveryState === 'accepted' ? ACCEPTED_NOTE : sent.deliveryState}\n` +
            `  ${to} sees message ${sent.incomingKey}; your copy is ${sent.outgoingKey}`,
        );
      });
    });
}

async function messageText(words: string[], file: string | undefined): Promise<string> {
  const fromStdin = (words.length === 1 && words[0] === '-') || (words.length === 0 && !process.stdin.isTTY);
  if (file !== undefined && words.length > 0) throw new UsageError('give the text or --file, not both');
  let text: string;
  if (file !== undefined) text = await readFile(file, 'utf8');
  else if (fromStdin) text = await readStream(process.stdin);
  else if (words.length > 0) text = words.join(' ');
  else throw new UsageError('nothing to send: give the text, - for stdin, or --file FILE');
  text = text.replace(/\r?\n$/, '');
  if (text === '') throw new UsageError('the text is empty: nothing to send');
  return text;
}
