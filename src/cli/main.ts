/** The `shine` command line: runs a server, or acts as a thin SHiNE client over the SDK. */
import { readFile, writeFile } from 'node:fs/promises';
import type { ParseArgsConfig } from 'node:util';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import type {
  DeliveryStateChangedEvent,
  DirectMessageEvent,
  HistoryEntry,
  Identity,
  OpenedMessage,
} from '../client/index.js';
import {
  ShineClient,
  createIdentity,
  fetchServerDescriptor,
  identityFromJson,
  identityToJson,
  makeProfile,
} from '../client/index.js';
import type { SyncCycleSummary } from '../protocol/ops.js';

const USAGE = `usage:
  shine serve [--config FILE] [--host H] [--port P] [--server-login L] [--data-dir D] [...]
                                  (every SHINE_* variable has a flag: SHINE_PUBLIC_WS_URL → --public-ws-url)
  shine identity create --login L [--out FILE]
  shine register --identity FILE --server WS_URL [--access-servers a,b]
  shine send     --identity FILE --server WS_URL [--device ID] --to LOGIN TEXT...
  shine watch    --identity FILE --server WS_URL [--device ID]
  shine history  --identity FILE --server WS_URL [--device ID] --with LOGIN [--limit N]
  shine sync     --server HTTP_URL [--admin-token T] [--json]
                                  (one replication cycle now; the token may come from SHINE_ADMIN_TOKEN)`;

/** A mistake in the command line: printed with the usage, exit status 2. */
class UsageError extends Error {}

type Options = NonNullable<ParseArgsConfig['options']>;

function parse<O extends Options>(args: string[], options: O) {
  return parseArgs({ args, options, allowPositionals: true, strict: true });
}

function required(value: string | undefined, flag: string): string {
  if (value === undefined || value === '') throw new UsageError(`--${flag} is required`);
  return value;
}

const iso = (ms: number): string => new Date(ms).toISOString();
const out = (line: string): void => void process.stdout.write(line + '\n');

const CLIENT_OPTIONS = {
  identity: { type: 'string' },
  server: { type: 'string' },
  device: { type: 'string', default: 'cli' },
} as const satisfies Options;

async function loadIdentity(path: string): Promise<Identity> {
  return identityFromJson(await readFile(path, 'utf8'));
}

/** Connects and, unless only the socket is wanted, logs in. */
async function connect(
  values: { identity?: string; server?: string; device?: string },
  login = true,
): Promise<{ client: ShineClient; identity: Identity }> {
  const identity = await loadIdentity(required(values.identity, 'identity'));
  const client = await ShineClient.connect(required(values.server, 'server'), { WebSocket });
  if (login) {
    try {
      await client.login(identity, values.device ?? 'cli');
    } catch (err) {
      await client.close();
      throw err;
    }
  }
  return { client, identity };
}

/** Runs fn with a logged-in client and always closes it. */
async function withClient(
  values: { identity?: string; server?: string; device?: string },
  fn: (client: ShineClient, identity: Identity) => Promise<void>,
  login = true,
): Promise<void> {
  const { client, identity } = await connect(values, login);
  try {
    await fn(client, identity);
  } finally {
    await client.close();
  }
}

function untilSignal(): Promise<string> {
  return new Promise((resolve) => {
    const onSignal = (signal: string): void => {
      // A second signal while shutting down means "now".
      process.once(signal, () => process.exit(130));
      resolve(signal);
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}

const kebab = (field: string): string => field.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

async function serve(args: string[]): Promise<void> {
  const [{ startServer }, { ENV_VARS, CONFIG_FILE_VAR, configInputFromEnv }] = await Promise.all([
    import('../server/app.js'),
    import('../server/config/env.js'),
  ]);
  const fields: string[] = Object.values(ENV_VARS);
  const options: Options = { config: { type: 'string' } };
  for (const field of fields) options[kebab(field)] = { type: 'string' };
  const { values, positionals } = parse(args, options);
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`);
  const env = { ...process.env };
  if (typeof values.config === 'string') env[CONFIG_FILE_VAR] = values.config;
  // Flags win over the environment and the config file.
  const input: Record<string, unknown> = { ...configInputFromEnv(env) };
  for (const field of fields) {
    const value = values[kebab(field)];
    if (typeof value === 'string') input[field] = value;
  }
  const server = await startServer(input);
  out(`shine: serving on ${server.httpUrl} (WebSocket ${server.wsUrl})`);
  const signal = await untilSignal();
  out(`shine: ${signal}, shutting down`);
  await server.close();
}

async function identityCreate(args: string[]): Promise<void> {
  const { values } = parse(args, { login: { type: 'string' }, out: { type: 'string' } });
  const identity = createIdentity(required(values.login, 'login'));
  const path = values.out ?? `./${identity.login}.identity.json`;
  try {
    await writeFile(path, identityToJson(identity), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST')
      throw new UsageError(`${path} exists; refusing to overwrite an identity`);
    throw err;
  }
  out(`created identity ${identity.login} in ${path}`);
}

async function register(args: string[]): Promise<void> {
  const { values } = parse(args, { ...CLIENT_OPTIONS, 'access-servers': { type: 'string' } });
  const server = required(values.server, 'server');
  await withClient(
    values,
    async (client, identity) => {
      const accessServers = values['access-servers']
        ?.split(',')
        .map((s) => s.trim())
        .filter(Boolean) ?? [(await fetchServerDescriptor(server)).serverLogin];
      const existing = await client.getProfile(identity.login).catch((err: unknown) => {
        if ((err as { code?: string }).code === 'USER_NOT_FOUND') return null;
        throw err;
      });
      const fresh = makeProfile(identity, accessServers, (existing?.version ?? 0) + 1, Date.now());
      if (
        existing &&
        existing.signKeyB64 === fresh.signKeyB64 &&
        existing.encKeyB64 === fresh.encKeyB64 &&
        existing.accessServers.join() === accessServers.join()
      ) {
        out(
          `${identity.login} is already registered on ${accessServers.join(',')} (profile version ${existing.version})`,
        );
        return;
      }
      const profile = await client.register(fresh);
      out(`registered ${profile.login} on ${profile.accessServers.join(',')} (profile version ${profile.version})`);
    },
    false,
  );
}

async function send(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, { ...CLIENT_OPTIONS, to: { type: 'string' } });
  const to = required(values.to, 'to');
  if (positionals.length === 0) throw new UsageError('nothing to send: give the text after the options');
  await withClient(values, async (client) => {
    const sent = await client.sendText(to, positionals.join(' '));
    out(`sent ${sent.messageKey} ${sent.deliveryState}`);
  });
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

async function watch(args: string[]): Promise<void> {
  const { values } = parse(args, CLIENT_OPTIONS);
  const { client, identity } = await connect(values, false);
  // Events are handled one at a time so lines keep the server's order (opening one may await a profile).
  let queue = Promise.resolve();
  const enqueue = (task: () => Promise<void>): void => {
    queue = queue.then(task).catch((err: unknown) => void process.stderr.write(`shine: ${String(err)}\n`));
  };
  client.on('DirectMessage', (ev: DirectMessageEvent) =>
    enqueue(async () => {
      const line = await client
        .decryptEvent(ev)
        .then(describe, (err: unknown) => `${iso(ev.timeMs)} ${ev.messageKey} unreadable: ${(err as Error).message}`);
      out(line);
      await client.ack([ev.messageKey]);
    }),
  );
  client.on('DmDeliveryStateChanged', (ev: DeliveryStateChangedEvent) =>
    enqueue(async () => out(`${iso(Date.now())} ${ev.outgoingKey} delivery ${ev.deliveryState}`)),
  );
  // Subscribed before login so that the replay right after AuthLogin is printed too.
  await client.login(identity, values.device);
  out(`watching ${identity.login} on ${values.server} as device ${values.device} (Ctrl-C to stop)`);
  const ended = await Promise.race([untilSignal().then(() => null), client.closed]);
  await queue;
  await client.close();
  if (ended) throw new Error(`connection closed by the server (${ended.code} ${ended.reason})`);
}

function describeHistory(item: HistoryEntry): string {
  const state = [item.deliveryState, item.readAtMs === null ? null : `read ${iso(item.readAtMs)}`]
    .filter(Boolean)
    .join(', ');
  const body = item.text === null ? `unreadable: ${item.problem}` : JSON.stringify(item.text);
  return `${iso(item.timeMs)} ${item.fromLogin} → ${item.toLogin}${item.revisionTimeMs > 0 ? ' (edited)' : ''}: ${body}${state ? ` [${state}]` : ''}`;
}

async function history(args: string[]): Promise<void> {
  const { values } = parse(args, {
    ...CLIENT_OPTIONS,
    with: { type: 'string' },
    limit: { type: 'string', default: '20' },
  });
  const peer = required(values.with, 'with');
  const limit = Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit must be a positive integer');
  await withClient(values, async (client) => {
    const page = await client.history(peer, { limit });
    // The server pages newest first; a terminal reads best oldest first.
    for (const item of page.items.reverse()) out(describeHistory(item));
    if (page.hasMore) out('(older messages not shown; raise --limit)');
  });
}

/** POST /admin/sync on a server (SPEC §8) and prints the cycle's summary; exit status 1 if an exchange failed. */
async function sync(args: string[]): Promise<void> {
  const { values, positionals } = parse(args, {
    server: { type: 'string' },
    'admin-token': { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`);
  const token = values['admin-token'] ?? process.env.SHINE_ADMIN_TOKEN;
  if (!token) throw new UsageError('--admin-token (or SHINE_ADMIN_TOKEN) is required');
  let url: URL;
  try {
    url = new URL(required(values.server, 'server'));
  } catch {
    throw new UsageError('--server must be a URL such as http://127.0.0.1:8080');
  }
  // The server's WebSocket URL names the same port, so it is accepted too.
  if (url.protocol === 'ws:' || url.protocol === 'wss:') url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError('--server must be an http:// or https:// URL');
  url = new URL('/admin/sync', url);
  const res = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
  const body = await res.text();
  if (res.status !== 200) {
    const hint =
      res.status === 404
        ? ' (is SHINE_ADMIN_TOKEN set on the server?)'
        : res.status === 401
          ? ' (wrong admin token)'
          : '';
    throw new Error(`POST ${url.href} answered ${res.status}${hint}: ${body.slice(0, 500)}`);
  }
  const s = JSON.parse(body) as SyncCycleSummary;
  if (values.json) out(body);
  else {
    out(
      `sync done in ${s.durationMs} ms: ${s.peers} peer server(s), ${s.users} shared user(s); pulled ${s.dmRows} message row(s) and ${s.settingsRows} setting row(s); ${s.errors} error(s)`,
    );
  }
  if (s.errors > 0) throw new Error(`${s.errors} exchange(s) with peer servers failed; see the server log`);
}

const COMMANDS: Record<string, (args: string[]) => Promise<void>> = {
  serve,
  'identity create': identityCreate,
  register,
  send,
  watch,
  history,
  sync,
};

async function main(argv: string[]): Promise<number> {
  const name = argv[0] === 'identity' ? `identity ${argv[1] ?? ''}` : (argv[0] ?? '');
  const command = COMMANDS[name];
  const helpWanted = name === '' || name === 'help' || argv.includes('--help') || argv.includes('-h');
  if (helpWanted || !command) {
    if (helpWanted) out(USAGE);
    else
      process.stderr.write(
        `shine: unknown command ${JSON.stringify(argv.slice(0, name.split(' ').length).join(' '))}\n${USAGE}\n`,
      );
    return helpWanted ? 0 : 2;
  }
  try {
    await command(argv.slice(name.split(' ').length));
    return 0;
  } catch (err) {
    const e = err as Error & { code?: string; status?: number };
    if (err instanceof UsageError || e.code?.startsWith('ERR_PARSE_ARGS')) {
      process.stderr.write(`shine: ${e.message}\n${USAGE}\n`);
      return 2;
    }
    const code = e.code && !e.message.startsWith(e.code) ? `${e.code}${e.status ? ` ${e.status}` : ''}: ` : '';
    process.stderr.write(`shine: ${code}${e.message}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
