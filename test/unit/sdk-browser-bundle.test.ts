import assert from 'node:assert/strict';
import { it } from 'node:test';
import { build } from 'esbuild';

// The SDK and the protocol layer must load in a browser: a browser bundle fails on any Node built-in.
it('the client SDK bundles for the browser with no Node built-ins', async () => {
  const result = await build({
    entryPoints: ['src/client/index.ts'],
    bundle: true,
    platform: 'browser',
    format: 'esm',
    write: false,
    logLevel: 'silent',
    metafile: true,
  });
  assert.equal(result.errors.length, 0);
  const inputs = Object.keys(result.metafile.inputs);
  assert.ok(inputs.some((f) => f.endsWith('src/client/client.ts')));
  assert.ok(!inputs.some((f) => f.startsWith('node:') || f.includes('node_modules/ws/')), inputs.join('\n'));
});
