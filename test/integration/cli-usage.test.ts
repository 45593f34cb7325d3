/** The CLI's help, exit codes, login rule and identities folder, without a server. */
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CliHome } from '../helpers/cli.js';

describe('CLI: help and usage errors', () => {
  using home = new CliHome();

  it('every command has its own --help with its options, defaults and an example', async () => {
    for (const [cmd, option] of [
      ['send', '--to <login>'],
      ['serve', '--public-ws-url <value>'],
      ['status', '--admin-token <token>'],
      ['check', '--repair'],
      ['repair', '--owner <login>'],
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
});
