/** `shine watch`: prints decrypted events as they arrive, and reconnects (with backoff) when the connection drops. */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import type {
  DeliveryStateChangedEvent,
  DirectMessageEvent,
  Identity,
  OpenedMessage,
  ShineClient,
} from '../../client/index.js';
import type { ClientFlags } from '../connection.js';
import { openClient } from '../connection.js';
import { CliError, describeError } from '../errors.js';
import { loadIdentity } from '../identities.js';
import { clientOptions, examples, iso, note, out, untilSignal } from '../shared.js';

/** Reconnect delays: doubling from 1 s up to 30 s, back to 1 s after a connection that worked. */
const FIRST_DELAY_MS = 1000;
const MAX_DELAY_MS = 30_000;

export function registerWatch(program: Command): void {
  clientOptions(program.command('watch'))
    .summary('print incoming messages and delivery changes as they happen')
    .description(
      'Logs in and prints each message (decrypted and verified) and each delivery state change, one line each, ' +
        'acknowledging what it printed. When the connection drops it says so and reconnects with backoff ' +
        '(1 s doubling to 30 s); missed messages are replayed on reconnect. Ctrl-C stops it.',
    )
    .addHelpText(
      'after',
      examples('shine watch --as bob', 'shine watch --as bob --server wss://alpha.example/ws --device laptop'),
    )
    .action(async (flags: ClientFlags) => {
      const identity = await loadIdentity(flags);
      const stop = untilSignal().then(() => 'stop' as const);
      let delayMs = FIRST_DELAY_MS;
      for (let connected = false; ;) {
        const outcome = await watchOnce(flags, identity, stop, connected).catch((err: unknown) => {
          // The first connection must work: a wrong URL or identity is not worth retrying.
          if (!connected || !(err instanceof CliError)) throw err;
          return { lost: describeError(err), worked: false };
        });
        if (outcome === 'stop') return;
        connected = true;
        if (outcome.worked) delayMs = FIRST_DELAY_MS;
        note(`connection lost (${outcome.lost}); reconnecting in ${delayMs / 1000} s`);
        if ((await Promise.race([stop, sleep(delayMs)])) === 'stop') return;
        delayMs = Math.min(MAX_DELAY_MS, delayMs * 2);
      }
    });
}

/** One connection: 'stop' on Ctrl-C, otherwise why it ended. */
async function watchOnce(
  flags: ClientFlags,
  identity: Identity,
  stop: Promise<'stop'>,
  again: boolean,
): Promise<'stop' | { lost: string; worked: boolean }> {
  const client = await openClient(flags.server);
  // Events are handled one at a time so lines keep the server's order (opening one may await a profile).
  let queue = Promise.resolve();
  const enqueue = (task: () => Promise<void>): void => {
    queue = queue.then(task).catch((err: unknown) => note(describeError(err)));
  };
  client.on('DirectMessage', (ev: DirectMessageEvent) =>
    enqueue(async () => {
      const line = await client
        .decryptEvent(ev)
        .then(describe, (err: unknown) => `${iso(ev.timeMs)} ${ev.messageKey} unreadable: ${describeError(err)}`);
      out(line);
      await client.ack([ev.messageKey]);
    }),
  );
  client.on('DmDeliveryStateChanged', (ev: DeliveryStateChangedEvent) =>
    enqueue(async () => out(`${iso(Date.now())} ${ev.outgoingKey} delivery ${ev.deliveryState}`)),
  );
  try {
    // Subscribed before login so that the replay right after AuthLogin is printed too.
    await login(client, identity, flags.device);
    out(
      again
        ? `reconnected: watching ${identity.login} on ${flags.server}`
        : `watching ${identity.login} on ${flags.server} as device ${flags.device} (Ctrl-C to stop)`,
    );
    const ended = await Promise.race([stop, client.closed]);
    await queue;
    if (ended === 'stop') return 'stop';
    return { lost: `closed by the server: ${ended.code}${ended.reason ? ` ${ended.reason}` : ''}`, worked: true };
  } finally {
    await client.close();
  }
}

async function login(client: ShineClient, identity: Identity, device: string): Promise<void> {
  try {
    await client.login(identity, device);
  } catch (err) {
    // A connection lost during login is worth another try; a refused login is not.
    if ((err as { code?: string }).code === 'CLOSED' || (err as { code?: string }).code === 'TIMEOUT')
      throw new CliError(describeError(err));
    throw err;
  }
}

/** One line describing a verified copy. */
function describe(m: OpenedMessage): string {
  const c = m.container;
  const head = `${iso(c.timeMs)} ${m.messageKey}`;
  switch (m.kind) {
    case 'text':
      return `${head} message ${c.fromLogin} → ${c.toLogin}${c.revisionTimeMs > 0 ? ' (edited)' : ''}: ${JSON.stringify(m.text)}`;
    case 'receipt':
      return `${head} read ${c.fromLogin} read ${m.targetBaseKey} at ${iso(m.readAtMs)}`;
    case 'deleteMessage':
      return `${head} delete ${c.fromLogin} deleted ${m.targetBaseKey}`;
    case 'deleteConversation':
      return `${head} clear ${c.fromLogin} cleared the dialog ${c.fromLogin}/${c.toLogin} up to ${iso(m.deleteBeforeMs)}`;
  }
}
