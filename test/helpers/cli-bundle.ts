/**
 * The CLI (src/cli/main.ts, `shine serve` included) bundled once per test process, for every test that
 * starts it as a process: through tsx a start costs about a second more CPU (the TypeScript of the whole
 * server transformed again), which the suite paid for every server process it spawned.
 *
 * The bundle sits three folders deep under .tmp/, as src/server/transport/static.ts does under the
 * repository, so the paths the code makes from import.meta.url (the built web client in dist/web/) name
 * the same places, and its packages resolve from node_modules.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { bundleForNode } from '../../src/server/worker-thread.js';

let bundled: Promise<string> | null = null;

/** The path of the bundle, built on the first call of this process. */
export function cliBundle(): Promise<string> {
  return (bundled ??= (async () => {
    const dir = resolve('.tmp', 'cli-bundle', String(process.pid));
    mkdirSync(dir, { recursive: true });
    const outfile = join(dir, 'shine.mjs');
    // The SQLite writer thread's module sits beside the code that starts it (src/server/store/sqlite/threaded.ts).
    await Promise.all([
      bundleForNode('src/cli/main.ts', outfile),
      bundleForNode('src/server/store/sqlite/thread.ts', join(dir, 'thread.js')),
    ]);
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return outfile;
  })());
}
