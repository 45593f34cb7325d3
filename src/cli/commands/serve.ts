/** `shine serve`: runs a server in this process until SIGINT/SIGTERM, and says where everything is. */
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { CONFIG_DEFAULTS } from '../../server/config/config.js';
import { CONFIG_FILE_VAR, ENV_VARS } from '../../server/config/env.js';
import { examples, out, untilSignal } from '../shared.js';

const kebab = (field: string): string => field.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

function shownDefault(field: string): string {
  const value = (CONFIG_DEFAULTS as Record<string, unknown>)[field];
  if (value === undefined) return '';
  const shown = Array.isArray(value)
    ? value.join(',')
    : typeof value === 'object' && value !== null
      ? Object.values(value).join(',')
      : String(value);
  return ` (default: ${shown})`;
}

export function registerServe(program: Command): void {
  const cmd = program
    .command('serve')
    .summary('run a SHiNE server')
    .description(
      'Runs a SHiNE server until Ctrl-C. Every flag has an environment variable; flags win over the ' +
        'environment, which wins over the config file. Logs go to stderr as JSON lines.',
    )
    .option('--config <file>', `JSON config file with the config object's keys (as ${CONFIG_FILE_VAR})`);
  // No commander defaults here: one would hide the environment variable of the same setting.
  for (const [name, field] of Object.entries(ENV_VARS))
    cmd.option(`--${kebab(field)} <value>`, `as ${name}${shownDefault(field)}`);
  cmd
    .addHelpText(
      'after',
      examples(
        'SHINE_ADMIN_TOKEN=change-me shine serve',
        'shine serve --port 8081 --data-dir ./data-8081',
        'shine serve --server-login alpha --public-ws-url wss://alpha.example/ws --peers beta=wss://beta.example/ws',
      ),
    )
    .action(async (flags: Record<string, string | undefined>) => {
      const input: Record<string, unknown> = {};
      // Commander names each option's value after its camel-cased flag, which is the config field.
      for (const field of Object.values(ENV_VARS)) if (flags[field] !== undefined) input[field] = flags[field];
      await serve(input, flags.config);
    });
}

async function serve(flags: Record<string, unknown>, configFile: string | undefined): Promise<void> {
  const [{ startServer }, { configInputFromEnv }, { SERVER_KEY_FILE }] = await Promise.all([
    import('../../server/app.js'),
    import('../../server/config/env.js'),
    import('../../server/keys.js'),
  ]);
  const env = { ...process.env };
  if (configFile !== undefined) env[CONFIG_FILE_VAR] = configFile;
  const server = await startServer({ ...configInputFromEnv(env), ...flags });
  const c = server.config;
  const key = c.serverKeySeedB64
    ? 'from SHINE_SERVER_KEY_SEED_B64'
    : resolve(c.dataDir, SERVER_KEY_FILE) + " (back it up: it is this server's identity)";
  const admin = c.adminToken
    ? `on: ${server.httpUrl}/admin and /debug with the Bearer token`
    : 'off (set SHINE_ADMIN_TOKEN to enable /admin, /debug, shine sync and shine status --admin-token)';
  const db = c.db.kind === 'sqlite' ? resolve(c.db.path) : c.db.kind;
  const federated = c.serverLogin !== 'local';
  out(
    [
      `shine: serving ${federated ? `as ${c.serverLogin}` : 'a local (not federated) server'} — Ctrl-C stops it`,
      `  web          ${server.httpUrl}/`,
      `  WebSocket    ${server.wsUrl}${c.publicWsUrl !== server.wsUrl ? ` (other servers use ${c.publicWsUrl})` : ''}`,
      `  health       ${server.httpUrl}/healthz, metrics ${server.httpUrl}/metrics`,
      `  data         ${resolve(c.dataDir)} (database ${db})`,
      `  server key   ${key}`,
      `  admin API    ${admin}`,
      'next steps (in another terminal):',
      `  shine identity create --login alice`,
      `  shine register --as alice --server ${server.wsUrl}`,
      `  shine status --server ${server.httpUrl}${c.adminToken ? ' --admin-token …' : ''}`,
    ].join('\n'),
  );
  const signal = await untilSignal();
  out(`shine: ${signal}, shutting down`);
  await server.close();
}
