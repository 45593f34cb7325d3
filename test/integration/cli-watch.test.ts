/** `shine watch` across a server restart: it says the connection dropped and reconnects by itself. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CliHome } from '../helpers/cli.js';
import { startNetwork } from '../helpers/network.js';

describe('CLI watch', () => {
  using home = new CliHome();

  it('watch says when the connection drops and reconnects by itself', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    const alpha = net.servers[0]!.wsUrl;
    for (const login of ['alice', 'bob']) await home.addUser(login, alpha);
    const watch = await home.start(['watch', '--as', 'bob', '--server', alpha]);
    try {
      await watch.waitFor(/watching bob/);
      await net.stop(0);
      await watch.waitFor(/connection lost \(closed by the server: \d+.*\); reconnecting in 1 s/, 'stderr');
      await net.start(0);
      await watch.waitFor(/reconnected: watching bob/);
      assert.equal(
        (await home.run(['send', '--as', 'alice', '--server', alpha, '--to', 'bob', 'after restart'])).code,
        0,
      );
      await watch.waitFor(/message alice → bob: "after restart"/);
    } finally {
      assert.equal((await watch.stop()).code, 0);
    }
  });
});
