/** The CLI's help, exit codes and error messages (each names the cause), without a SHiNE server. */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CliHome } from '../helpers/cli.js';
import { freePort } from '../helpers/server-process.js';

describe('CLI: help and usage errors', () => {
  using home = new CliHome();

  it('every command has its own --help with its options, defaults and an example', async () => {
    for (const [cmd, option] of [
      ['send', '--to <login>'],
      ['serve', '--public-ws-url <value>'],
      ['history', '--limit <n>'],
      ['status', '--admin-token <token>'],
    ] as const) {
      const r = await home.run([cmd, '--help']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`Usage: shine ${cmd}`));
      assert.ok(r.stdout.includes(option), `${cmd} --help lists ${option}: ${r.stdout}`);
      assert.match(r.stdout, /default/);
      assert.match(r.stdout, /Examples:\n {2}\$ .*shine /);
    }
    assert.match(
      (await home.run(['--help'])).stdout,
      /Exit status: 0 done, 1 the operation failed, 2 the command line/,
    );
  });

  it('an invalid login states the rule and exits 2; an unknown option exits 2', async () => {
    const bad = await home.run(['identity', 'create', '--login', 'Bad Login']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /invalid login "Bad Login": a login is 3 to 32 characters: lowercase letters/);
    const unknown = await home.run(['send', '--to', 'bob', '--bogus']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown option '--bogus'/);
  });

  it('identities go to the XDG folder, private, and are never overwritten', async () => {
    const r = await home.run(['identity', 'create', '--login', 'erin']);
    assert.equal(r.code, 0, r.stderr);
    const dir = join(home.env.XDG_CONFIG_HOME!, 'shine', 'identities');
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    assert.equal(statSync(join(dir, 'erin.identity.json')).mode & 0o777, 0o600);
    const again = await home.run(['identity', 'create', '--login', 'erin']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /erin\.identity\.json exists; refusing to overwrite/);
    assert.match((await home.run(['identity', 'list'])).stdout, /^erin$/m);
  });

  it('a missing identity file is named; an unknown --as says where it looked', async () => {
    const missing = await home.run(['send', '--identity', '/nonexistent/x.identity.json', '--to', 'bob', 'hi']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /\/nonexistent\/x\.identity\.json: no such file or folder/);
    const unknown = await home.run(['send', '--as', 'nobody', '--to', 'bob', 'hi']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /no identity for nobody in .*shine\/identities.*shine identity create --login nobody/);
  });

  it('URLs: http:// and a missing scheme get the ws:// URL suggested (exit 2)', async () => {
    const http = await home.run(['send', '--as', 'erin', '--server', 'http://127.0.0.1:8080', '--to', 'bob', 'x']);
    assert.equal(http.code, 2);
    assert.match(http.stderr, /did you mean ws:\/\/127\.0\.0\.1:8080\/ws\?/);
    const bare = await home.run(['send', '--as', 'erin', '--server', 'localhost:8080', '--to', 'bob', 'x']);
    assert.equal(bare.code, 2);
    assert.match(bare.stderr, /needs a URL with a scheme: did you mean ws:\/\/localhost:8080\/ws\?/);
  });

  it('connection errors name the cause: refused port, unknown host, a web server that is not SHiNE', async () => {
    const port = await freePort();
    const refused = await home.run([
      'send',
      '--as',
      'erin',
      '--server',
      `ws://127.0.0.1:${port}/ws`,
      '--to',
      'bob',
      'x',
    ]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, new RegExp(`nothing listens at 127\\.0\\.0\\.1:${port}`));

    const dns = await home.run([
      'send',
      '--as',
      'erin',
      '--server',
      'ws://no-such-host.invalid/ws',
      '--to',
      'bob',
      'x',
    ]);
    assert.equal(dns.code, 1);
    assert.match(dns.stderr, /host name no-such-host\.invalid does not resolve \(DNS (ENOTFOUND|EAI_AGAIN)\)/);

    const web = createServer((_req, res) => res.end('just a web page'));
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve));
    try {
      const webPort = (web.address() as AddressInfo).port;
      const plain = await home.run([
        'send',
        '--as',
        'erin',
        '--server',
        `ws://127.0.0.1:${webPort}/`,
        '--to',
        'bob',
        'x',
      ]);
      assert.equal(plain.code, 1);
      assert.match(
        plain.stderr,
        new RegExp(`not a SHiNE endpoint: .* answered HTTP 200 .*did you mean ws://127\\.0\\.0\\.1:${webPort}/ws\\?`),
      );
      const status = await home.run(['status', '--server', `http://127.0.0.1:${webPort}`]);
      assert.equal(status.code, 1);
      assert.match(status.stderr, /shine-server answered 200|is not|JSON|Unexpected/);
    } finally {
      await new Promise((resolve) => web.close(resolve));
    }
  });
});
