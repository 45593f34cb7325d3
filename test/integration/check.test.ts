/**
 * `shine check` and POST /admin/check against a real server's database (SQLite, or PostgreSQL on the
 * second pass): a clean database answers 0, a corrupted one (a signature byte flipped, a delivery row of
 * no message, an outbox row of no message) is reported by kind, and --repair fixes what it says.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { RunningServer } from '../../src/server/app.js';
import type { CheckReport } from '../../src/server/check/service.js';
import { CliHome } from '../helpers/cli.js';
import { sendPair, textPair } from '../helpers/federation.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { ADMIN_TOKEN, adminCall } from '../helpers/replication.js';
import { queryServerDb } from '../helpers/test-db.js';
import { connectUser, makeUser } from '../helpers/users.js';

const GHOST = 'alice|bob|99|9|2';

describe('shine check and POST /admin/check', () => {
  using home = new CliHome();
  let net: TestNetwork;
  let server: RunningServer;
  let dbUrl: string;
  let badKey: string;
  let original: Buffer;

  const adminCheck = (repair: boolean) =>
    adminCall<CheckReport>(server.httpUrl, 'POST', `/admin/check?repair=${repair ? 1 : 0}`);
  const cli = (...args: string[]) => home.run(['check', '--db', dbUrl, ...args]);

  before(async () => {
    net = await startNetwork({
      servers: [{ serverLogin: 'alpha', adminToken: ADMIN_TOKEN, sqliteSync: 'normal' }, { serverLogin: 'open' }],
    });
    server = net.servers[0]!;
    dbUrl = net.dbs[0]!.url;
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    await (await connectUser(server.wsUrl, bob)).close();
    const a = await connectUser(server.wsUrl, alice);
    const pairs = [1, 2].map((i) => textPair(alice, 'bob', { timeMs: Date.now() - i, nonce: i }));
    for (const p of pairs) await sendPair(a, p);
    await a.close();
    badKey = pairs[0]!.incomingKey;
  });
  after(() => net.close());

  it('is behind the admin token: 404 without one configured, 401 with a wrong one, 400 for a bad repair flag', async () => {
    const post = (url: string, token?: string) =>
      fetch(`${url}/admin/check`, { method: 'POST', headers: token ? { authorization: `Bearer ${token}` } : {} });
    assert.equal((await post(net.servers[1]!.httpUrl, ADMIN_TOKEN)).status, 404);
    assert.equal((await post(server.httpUrl)).status, 401);
    assert.equal((await post(server.httpUrl, 'wrong')).status, 401);
    const get = await fetch(`${server.httpUrl}/admin/check`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(get.status, 404);
    const bad = await fetch(`${server.httpUrl}/admin/check?repair=yes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: string }).error, 'BAD_FIELDS');
  });

  it('a clean database: no problem, exit status 0', async () => {
    const report = await adminCheck(false);
    assert.deepEqual([report.containers.checked, report.problems, report.remaining], [4, 0, 0]);
    const run = await cli();
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^messages: 4 checked; 0 bad signature/m);
    assert.match(run.stdout, /^0 problem\(s\) found, 0 remain$/m);
  });

  it('a corrupted database: each kind reported, exit status 3; --repair fixes what it says and keeps the message', async () => {
    const [row] = await queryServerDb(server, 'SELECT blob FROM signed_messages WHERE message_key = ?', [badKey]);
    original = Buffer.from(row!.blob as Uint8Array);
    const flipped = Buffer.from(original);
    flipped[flipped.length - 1]! ^= 0x01;
    await queryServerDb(server, 'UPDATE signed_messages SET blob = ? WHERE message_key = ?', [flipped, badKey]);
    await queryServerDb(
      server,
      `INSERT INTO dm_delivery_state (outgoing_key, base_key, sender_login, recipient_login, revision_time_ms,
         reencrypted_at_ms, state, attempt, accepted_at_ms, next_attempt_at_ms, lease_until_ms, row_version,
         last_error, updated_at_ms) VALUES (?, 'alice|bob|99|9', 'alice', 'bob', 0, 0, 'failed', 1, 1, NULL, NULL, 1, NULL, 1)`,
      [GHOST],
    );
    await queryServerDb(
      server,
      `INSERT INTO dm_sync_outbox (owner_login, primary_message_key, sync_id, stored_at_ms, blobs, synced, time_ms)
       VALUES ('alice', ?, ?, 1, ?, ?, 99)`,
      [GHOST, `${GHOST}:0:0`, Buffer.from([0, 0, 0, 1, 9]), false],
    );

    const report = await adminCheck(false);
    assert.equal(report.containers.badSignature, 1);
    assert.deepEqual(report.examples.badSignature, [badKey]);
    assert.equal(report.orphans.deliveryWithoutCopy, 1);
    assert.equal(report.orphans.outboxWithoutCopy, 1);
    assert.deepEqual([report.problems, report.remaining], [2, 2]);

    const found = await cli();
    assert.equal(found.code, 3, found.stderr);
    assert.match(found.stdout, /1 bad signature/);
    assert.match(found.stdout, /^orphans: 1 outbox row\(s\) without their message, .*1 delivery row\(s\)/m);
    assert.match(found.stderr, /2 problem\(s\) remain \(shine check --repair fixes what it can\)/);

    const repaired = await cli('--repair', '--json');
    assert.equal(repaired.code, 3, repaired.stderr);
    const r = JSON.parse(repaired.stdout) as CheckReport;
    assert.deepEqual([r.repaired.deliveryRowsRemoved, r.repaired.outboxRowsRemoved, r.remaining], [1, 1, 1]);
    // The badly signed message is reported, never deleted; the orphans are gone.
    assert.equal(
      (await queryServerDb(server, 'SELECT 1 FROM signed_messages WHERE message_key = ?', [badKey])).length,
      1,
    );
    const after = await adminCheck(false);
    assert.deepEqual(Object.values(after.orphans), [0, 0, 0, 0]);
    assert.equal(after.remaining, 1);

    await queryServerDb(server, 'UPDATE signed_messages SET blob = ? WHERE message_key = ?', [original, badKey]);
    const through = await home.run(['check', '--server', server.httpUrl], { env: { SHINE_ADMIN_TOKEN: ADMIN_TOKEN } });
    assert.equal(through.code, 0, through.stderr);
    assert.match(through.stdout, /^0 problem\(s\) found, 0 remain$/m);
  });

  it('a database that is not there is a failure (exit 1), not a clean check', async () => {
    const run = await home.run(['check', '--db', `sqlite:${join(home.dir, 'none.sqlite')}`]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /no database at .*none\.sqlite/);
  });
});
