/** The CLI against a real server: sending to oneself, unknown users, text from stdin and files. */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { CliHome, useAlphaBeta } from '../helpers/cli.js';

describe('CLI against real servers', () => {
  using home = new CliHome();
  const servers = useAlphaBeta(home);

  it('sending to oneself is a usage error that says so; an unknown --with is unknown (exit 1)', async () => {
    const self = await home.run(['send', '--as', 'alice', '--server', servers.alpha(), '--to', 'alice', 'hi']);
    assert.equal(self.code, 2);
    assert.match(self.stderr, /--to alice is you: SAME_LOGIN/);
    const unknown = await home.run(['history', '--as', 'alice', '--server', servers.alpha(), '--with', 'carol']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /USER_NOT_FOUND: no user carol is known to/);
    assert.equal(unknown.stdout, '');
  });

  it('send reads the text from stdin and from --file; a missing --file is named', async () => {
    const long = 'x'.repeat(200_000 / 4) + ' end';
    const piped = await home.run(['send', '--as', 'alice', '--server', servers.alpha(), '--to', 'bob'], {
      input: `${long}\n`,
    });
    assert.equal(piped.code, 0, piped.stderr);
    assert.match(piped.stdout, /^delivered\n {2}bob sees message alice\|bob\|\d+\|\d+\|1; your copy is .*\|2$/m);
    const file = join(home.dir, 'note.txt');
    writeFileSync(file, 'from a file\n');
    assert.equal(
      (await home.run(['send', '--as', 'alice', '--server', servers.alpha(), '--to', 'bob', '--file', file])).code,
      0,
    );
    const missing = await home.run([
      'send',
      '--as',
      'alice',
      '--server',
      servers.alpha(),
      '--to',
      'bob',
      '--file',
      `${file}.gone`,
    ]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /note\.txt\.gone: no such file or folder/);
    const history = await home.run(['history', '--as', 'bob', '--server', servers.alpha(), '--with', 'alice']);
    assert.match(history.stdout, / end"/);
    assert.match(history.stdout, /"from a file"/);
  });
});
