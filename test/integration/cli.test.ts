/** The CLI against real servers: stdin and files, unknown users, accepted-and-retrying, reconnects, status. */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ACCEPTED_NOTE } from '../../src/cli/commands/send.js';
import { CliHome } from '../helpers/cli.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';

describe('CLI against real servers', () => {
  using home = new CliHome();
  let net: TestNetwork;
  let alpha: string;

  before(async () => {
    net = await startNetwork({
      servers: [{ serverLogin: 'alpha', adminToken: 'tok' }, { serverLogin: 'beta' }],
      federate: true,
    });
    alpha = net.servers[0]!.wsUrl;
    for (const login of ['alice', 'bob']) {
      assert.equal((await home.run(['identity', 'create', '--login', login])).code, 0);
      const r = await home.run(['register', '--as', login, '--server', alpha]);
      assert.match(r.stdout, new RegExp(`registered ${login} on alpha`), r.stderr);
    }
  });
  after(() => net.close());

  it('sending to oneself is a usage error that says so; an unknown --with is unknown (exit 1)', async () => {
    const self = await home.run(['send', '--as', 'alice', '--server', alpha, '--to', 'alice', 'hi']);
    assert.equal(self.code, 2);
    assert.match(self.stderr, /--to alice is you: SAME_LOGIN/);
    const unknown = await home.run(['history', '--as', 'alice', '--server', alpha, '--with', 'carol']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /USER_NOT_FOUND: no user carol is known to/);
    assert.equal(unknown.stdout, '');
  });

  it('send reads the text from stdin and from --file; a missing --file is named', async () => {
    const long = 'x'.repeat(200_000 / 4) + ' end';
    const piped = await home.run(['send', '--as', 'alice', '--server', alpha, '--to', 'bob'], { input: `${long}\n` });
    assert.equal(piped.code, 0, piped.stderr);
    assert.match(piped.stdout, /^delivered\n {2}bob sees message alice\|bob\|\d+\|\d+\|1; your copy is .*\|2$/m);
    const file = join(home.dir, 'note.txt');
    writeFileSync(file, 'from a file\n');
    assert.equal((await home.run(['send', '--as', 'alice', '--server', alpha, '--to', 'bob', '--file', file])).code, 0);
    const missing = await home.run([
      'send',
      '--as',
      'alice',
      '--server',
      alpha,
      '--to',
      'bob',
      '--file',
      `${file}.gone`,
    ]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /note\.txt\.gone: no such file or folder/);
    const history = await home.run(['history', '--as', 'bob', '--server', alpha, '--with', 'alice']);
    assert.match(history.stdout, / end"/);
    assert.match(history.stdout, /"from a file"/);
  });

  it('register with two access servers says which one was not contacted; a down recipient server gets "accepted — retrying"', async () => {
    assert.equal((await home.run(['identity', 'create', '--login', 'carol'])).code, 0);
    const reg = await home.run(['register', '--as', 'carol', '--server', alpha, '--access-servers', 'beta']);
    assert.equal(reg.code, 2);
    assert.match(reg.stderr, /the server at .* is alpha, which --access-servers does not name/);
    assert.equal((await home.run(['identity', 'create', '--login', 'dave'])).code, 0);
    const betaReg = await home.run(['register', '--as', 'dave', '--server', net.servers[1]!.wsUrl]);
    assert.match(betaReg.stdout, /registered dave on beta/);
    const two = await home.run(['register', '--as', 'carol', '--server', alpha, '--access-servers', 'alpha,beta']);
    assert.equal(two.code, 0, two.stderr);
    assert.match(
      two.stdout,
      /registered carol on alpha \(profile version 1, access servers alpha,beta\)\nbeta was not contacted/,
    );

    // alpha learns dave's profile from beta while beta is up (an empty dialog makes history look dave up).
    const known = await home.run(['history', '--as', 'alice', '--server', alpha, '--with', 'dave']);
    assert.equal(known.stdout, 'no messages with dave yet\n', known.stderr);
    await net.stop(1);
    const sent = await home.run(['send', '--as', 'alice', '--server', alpha, '--to', 'dave', 'are you there?']);
    assert.equal(sent.code, 0, sent.stderr);
    assert.ok(sent.stdout.startsWith(`${ACCEPTED_NOTE}\n`), sent.stdout);
    const status = await home.run(['status', '--server', net.servers[0]!.httpUrl, '--admin-token', 'tok']);
    assert.equal(status.code, 1, status.stdout);
    assert.match(
      status.stdout,
      /beta ws:\/\/\S+: not connected, FAILING: \d+ call\(s\) in a row, last error: .*ECONNREFUSED/,
    );
    assert.match(status.stdout, /1 row\(s\) waiting/);
    assert.match(status.stderr, /1 peer server\(s\) failing/);
    await net.start(1);
  });

  it('status shows health, queues and peers (with the admin token); sync without a server token explains', async () => {
    const httpUrl = net.servers[0]!.httpUrl;
    // Exit status 0 or 1 depending on whether beta has answered a call since its restart; the text is the point here.
    const status = await home.run(['status', '--server', httpUrl, '--admin-token', 'tok']);
    assert.match(status.stdout, /^server alpha at http:\/\/127\.0\.0\.1:\d+: healthy/);
    assert.match(status.stdout, /deliveries +\d+ accepted/);
    assert.match(status.stdout, /beta ws:\/\/127\.0\.0\.1:\d+\/ws: (connected|not connected)/);
    const sync = await home.run(['sync', '--server', net.servers[1]!.httpUrl, '--admin-token', 'tok']);
    assert.equal(sync.code, 1);
    assert.match(sync.stderr, /answered 404 \(the server has no admin token: start it with SHINE_ADMIN_TOKEN set/);
  });
});
