/** Builds the web client (docs/web-client.md) into dist/web, which the server serves at GET /. */
import { defineConfig } from 'vite';

/** A folder next to this file (written without node:path so the client's tsconfig needs no Node types). */
const here = (relative: string) => decodeURIComponent(new URL(relative, import.meta.url).pathname);

export default defineConfig({
  root: here('.'),
  base: '/',
  // Preact's automatic JSX runtime through Vite's own transformer: no Babel preset needed for a build.
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: here('../dist/web'),
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: true,
    // A single small app: one script and one stylesheet, nothing inlined as data: URLs.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
  },
});
