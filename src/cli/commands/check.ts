/**
 * `shine check [--repair]`: verifies a database (docs/operations.md) — by opening it, or through a running
 * server's POST /admin/check with --server.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { Option } from 'commander';
import type { CheckReport } from '../../server/check/service.js';
import { CONFIG_FILE_VAR } from '../../server/config/env.js';
import { httpCall, httpServerUrl } from '../connection.js';
import { CliError, ProblemsFoundError, UsageError } from '../errors.js';
import { examples, out } from '../shared.js';

interface CheckFlags {
  db?: string;
  dataDir?: string;
  config?: string;
  server?: string;
  adminToken?: string;
  repair: boolean;
  json: boolean;
}

export function registerCheck(program: Command): void {
  program
    .command('check')
    .summary('verify a database: signatures, orphan rows, outbox and delivery rows, indexes')
    .description(
      "Re-verifies every stored message (decoding and the sender's Ed25519 signature), finds rows that refer " +
        'to a message or device that does not exist and outbox or delivery rows that disagree with their ' +
        "message, and runs the database's own integrity check; prints the counts. With --repair it also fixes " +
        'what has one safe fix (removes orphan rows, stores a message again from its outbox row, writes ' +
        'outbox rows again from their message, rebuilds indexes) and says what it did; it never deletes a validly signed message. Opens the database the ' +
        'server would (SHINE_DB, SHINE_DATA_DIR, --db), which may be in use by a running server; with --server ' +
        'it asks a running server instead (POST /admin/check, needs the admin token).\n\n' +
        'Exit status: 0 no problem left, 3 problems found that remain (without --repair: any problem), ' +
        '1 the check could not run, 2 the command line is wrong. Rows that deletes leave behind (delivery ' +
        'rows and device acknowledgements of a deleted message) are reported and repaired but are not problems.',
    )
    .option('--db <db>', 'sqlite:PATH or postgres://… (as SHINE_DB; default sqlite:$SHINE_DATA_DIR/shine.sqlite)')
    .option('--data-dir <dir>', 'the data folder (as SHINE_DATA_DIR; default ./data)')
    .option('--config <file>', `JSON config file, as for shine serve (as ${CONFIG_FILE_VAR})`)
    .option('--server <http-url>', 'check a running server through POST /admin/check instead of opening the database')
    .addOption(
      new Option('--admin-token <token>', "the server's SHINE_ADMIN_TOKEN (with --server)").env('SHINE_ADMIN_TOKEN'),
    )
    .option('--repair', 'also fix what can be fixed safely', false)
    .option('--json', 'print the report as JSON', false)
    .addHelpText(
      'after',
      examples(
        'shine check',
        'shine check --repair --db sqlite:./data/shine.sqlite',
        'SHINE_DB=postgres://shine@localhost/shine shine check --json',
        'shine check --server http://127.0.0.1:8080 --admin-token change-me',
      ),
    )
    .action(async (flags: CheckFlags) => {
      const report = flags.server !== undefined ? await checkThroughServer(flags) : await checkDatabaseHere(flags);
      if (flags.json) out(JSON.stringify(report));
      else printReport(report);
      if (report.remaining > 0)
        throw new ProblemsFoundError(
          `${report.remaining} problem(s) remain` + (report.repair ? '' : ' (shine check --repair fixes what it can)'),
        );
    });
}

async function checkThroughServer(flags: CheckFlags): Promise<CheckReport> {
  if (flags.db !== undefined || flags.dataDir !== undefined || flags.config !== undefined)
    throw new UsageError('--server checks the database of that server: leave out --db, --data-dir and --config');
  if (!flags.adminToken) throw new UsageError('--admin-token (or SHINE_ADMIN_TOKEN) is required with --server');
  const body = await httpCall(httpServerUrl(flags.server!), `/admin/check?repair=${flags.repair ? 1 : 0}`, {
    method: 'POST',
    token: flags.adminToken,
  });
  return JSON.parse(body) as CheckReport;
}

async function checkDatabaseHere(flags: CheckFlags): Promise<CheckReport> {
  if (flags.adminToken !== undefined && process.env.SHINE_ADMIN_TOKEN !== flags.adminToken)
    throw new UsageError('--admin-token goes with --server');
  const [{ resolveConfig }, { configInputFromEnv }, { openStore }, { checkDatabase }, { bulkVerifier }] =
    await Promise.all([
      import('../../server/config/config.js'),
      import('../../server/config/env.js'),
      import('../../server/store/open.js'),
      import('../../server/check/service.js'),
      import('../../server/crypto/verify-pool.js'),
    ]);
  const env = { ...process.env };
  if (flags.config !== undefined) env[CONFIG_FILE_VAR] = flags.config;
  const input = { ...configInputFromEnv(env) };
  if (flags.db !== undefined) input.db = flags.db;
  if (flags.dataDir !== undefined) input.dataDir = flags.dataDir;
  const config = resolveConfig(input);
  // Opening a missing SQLite file would create an empty database and find it clean.
  if (config.db.kind === 'sqlite' && !existsSync(config.db.path))
    throw new CliError(`no database at ${resolve(config.db.path)} (give --db or --data-dir)`);
  const store = await openStore(config);
  // The signatures on the server's verify threads (SHINE_VERIFY_THREADS), beside the reads.
  const verifier = bulkVerifier(config.verifyThreads);
  try {
    return await checkDatabase({ store, verifier, nowMs: () => Date.now() }, { repair: flags.repair });
  } finally {
    await verifier.close();
    await store.close();
  }
}

function printReport(r: CheckReport): void {
  const c = r.containers;
  const o = r.orphans;
  const i = r.inconsistencies;
  const lines = [
    `database (${r.dialect}): ${r.integrity.method}: ${r.integrity.problems.length === 0 ? 'ok' : r.integrity.problems.join('; ')}`,
    `messages: ${c.checked} checked; ${c.badSignature} bad signature(s), ${c.undecodable} undecodable, ` +
      `${c.unknownSender} of an unknown sender, ${c.columnsMismatch} whose columns disagree with the blob`,
    `orphans: ${o.outboxWithoutCopy} outbox row(s) without their message, ${o.acksWithoutDevice} acknowledgement(s) ` +
      `of an unknown device; left behind by deletes: ${o.deliveryWithoutCopy} delivery row(s), ` +
      `${o.acksWithoutCopy} acknowledgement(s)`,
    `inconsistencies: ${i.outboxBehindCopy} outbox row(s) of another revision than their message, ` +
      `${i.outboxMissing} message(s) of a user of this server without an outbox row, ` +
      `${i.deliveryAheadOfCopy} delivery row(s) newer than their message`,
  ];
  if (r.repair) {
    const f = r.repaired;
    lines.push(
      `repaired: ${f.indexesRebuilt ? 'indexes rebuilt; ' : ''}${f.copiesRestored} message(s) stored again from the outbox, ` +
        `${f.outboxRowsRewritten} outbox row(s) written again from their message; ` +
        `${f.outboxRowsRemoved} outbox row(s), ${f.deliveryRowsRemoved} delivery row(s) and ${f.acksRemoved} ` +
        'acknowledgement(s) removed',
    );
  }
  for (const [kind, keys] of Object.entries(r.examples)) lines.push(`  ${kind}: ${keys.join(', ')}`);
  lines.push(`${r.problems} problem(s) found, ${r.remaining} remain`);
  for (const l of lines) out(l);
}
