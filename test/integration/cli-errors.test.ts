/** The CLI's error messages name the cause: missing files, wrong URLs, refused ports, DNS, a web server that is not SHiNE. */
// test.mjs: no store (it starts no SHiNE server, so the PostgreSQL pass skips it)
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { before, describe, it } from 'node:test';
import { CliHome } from '../helpers/cli.js';
import { freePort } from '../helpers/server-process.js';

describe('CLI: errors name the cause', () => {
  using home = new CliHome();
  before(async () => assert.equal((await home.run(['identity', 'create', '--login', 'erin'])).code, 0));

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
      assert.match(status.stderr, /not a SHiNE server: .*\/\.well-known\/shine-server is not a server descriptor/);
    } finally {
      await new Promise((resolve) => web.close(resolve));
    }
  });
});
