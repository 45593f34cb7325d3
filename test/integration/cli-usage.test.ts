/** The CLI's help, exit codes, login rule and identities folder, without a server. */
// test.mjs: no store (it starts no SHiNE server, so the PostgreSQL pass skips it)
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
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
    for (const [sub, option] of [
      ['add', '--kind <n>'],
      ['show', '--json'],
    ] as const) {
      const r = await home.run(['chain', sub, '--help']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`Usage: shine chain ${sub}`));
      assert.ok(r.stdout.includes(option), `chain ${sub} --help lists ${option}: ${r.stdout}`);
      assert.match(r.stdout, /default/);
      assert.match(r.stdout, /Examples:\n {2}\$ shine chain /);
    }
    const chain = await home.run(['chain', '--help']);
    assert.match(chain.stdout, /add \[options\] +append a signed block to your chain/);
    assert.match(chain.stdout, /show \[options\] <login> +show a user's chain, every block verified/);
    const top = (await home.run(['--help'])).stdout;
    assert.match(top, /Exit status: 0 done, 1 the operation failed, 2 the command line/);
    assert.match(top, /or shine chain show found a broken chain/);
    assert.match(top, /chain +add to your public chain/);
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

  it('the installed `shine` runs Node.js with a 32 MiB young generation', async () => {
    // bin/shine.js run as a program (as npm's bin link runs it), beside a stand-in for the built CLI that
    // prints the flags its Node.js got.
    const dir = mkdtempSync(join(tmpdir(), 'shine-bin-'));
    try {
      mkdirSync(join(dir, 'bin'));
      mkdirSync(join(dir, 'dist', 'cli'), { recursive: true });
      copyFileSync('bin/shine.js', join(dir, 'bin', 'shine.js'));
      writeFileSync(join(dir, 'package.json'), '{"type":"module"}');
      writeFileSync(join(dir, 'dist', 'cli', 'main.js'), 'console.log(JSON.stringify(process.execArgv));');
      const env = { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}` };
      const { stdout } = await promisify(execFile)(join(dir, 'bin', 'shine.js'), ['serve'], { env });
      assert.deepEqual(JSON.parse(stdout), ['--max-semi-space-size=32']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
