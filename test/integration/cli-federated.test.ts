/** The CLI with two federated servers: register on two access servers, accepted-and-retrying, status and sync. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ACCEPTED_NOTE } from '../../src/cli/commands/send.js';
import { CliHome, useAlphaBeta } from '../helpers/cli.js';

describe('CLI with federated servers', () => {
  using home = new CliHome();
  const servers = useAlphaBeta(home);

  it('register with two access servers says which one was not contacted; a down recipient server gets "accepted — retrying"', async () => {
    assert.equal((await home.run(['identity', 'create', '--login', 'carol'])).code, 0);
    const reg = await home.run(['register', '--as', 'carol', '--server', servers.alpha(), '--access-servers', 'beta']);
    assert.equal(reg.code, 2);
    assert.match(reg.stderr, /the server at .* is alpha, which --access-servers does not name/);
    assert.equal((await home.run(['identity', 'create', '--login', 'dave'])).code, 0);
    const betaReg = await home.run(['register', '--as', 'dave', '--server', servers.net().servers[1]!.wsUrl]);
    assert.match(betaReg.stdout, /registered dave on beta/);
    const two = await home.run([
      'register',
      '--as',
      'carol',
      '--server',
      servers.alpha(),
      '--access-servers',
      'alpha,beta',
    ]);
    assert.equal(two.code, 0, two.stderr);
    assert.match(
      two.stdout,
      /registered carol on alpha \(profile version 1, access servers alpha,beta\)\nbeta was not contacted/,
    );

    // servers.alpha() learns dave's profile from beta while beta is up (an empty dialog makes history look dave up).
    const known = await home.run(['history', '--as', 'alice', '--server', servers.alpha(), '--with', 'dave']);
    assert.equal(known.stdout, 'no messages with dave yet\n', known.stderr);
    await servers.net().stop(1);
    const sent = await home.run([
      'send',
      '--as',
      'alice',
      '--server',
      servers.alpha(),
      '--to',
      'dave',
      'are you there?',
    ]);
    assert.equal(sent.code, 0, sent.stderr);
    assert.ok(sent.stdout.startsWith(`${ACCEPTED_NOTE}\n`), sent.stdout);
    const status = await home.run(['status', '--server', servers.net().servers[0]!.httpUrl, '--admin-token', 'tok']);
    assert.equal(status.code, 1, status.stdout);
    assert.match(
      status.stdout,
      /beta ws:\/\/\S+: down \(its last connection failed\), FAILING: \d+ call\(s\) in a row, last error: .*ECONNREFUSED/,
    );
    assert.match(status.stdout, /1 row\(s\) waiting/);
    assert.match(status.stderr, /1 peer server\(s\) failing/);
    await servers.net().start(1);
  });

  it('status shows health, queues and peers (with the admin token); sync without a server token explains', async () => {
    const httpUrl = servers.net().servers[0]!.httpUrl;
    // Exit status 0 or 1 depending on whether beta has answered a call since its restart; the text is the point here.
    const status = await home.run(['status', '--server', httpUrl, '--admin-token', 'tok']);
    assert.match(status.stdout, /^server alpha at http:\/\/127\.0\.0\.1:\d+: healthy/);
    assert.match(status.stdout, /deliveries +\d+ accepted/);
    assert.match(
      status.stdout,
      /beta ws:\/\/127\.0\.0\.1:\d+\/ws: (connected|not connected|down \(its last connection failed\))/,
    );
    const sync = await home.run(['sync', '--server', servers.net().servers[1]!.httpUrl, '--admin-token', 'tok']);
    assert.equal(sync.code, 1);
    assert.match(sync.stderr, /answered 404 \(the server has no admin token: start it with SHINE_ADMIN_TOKEN set/);
  });
});
