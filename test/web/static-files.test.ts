/** GET / serves the built web client (docs/protocol.md §8, §12) with the right content types and caching. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { ensureWebBuilt } from '../helpers/web-build.js';

describe('web client files', () => {
  let net: TestNetwork;
  let base: string;
  before(async () => {
    ensureWebBuilt();
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    base = `http://127.0.0.1:${net.servers[0]!.port}`;
  });
  after(() => net?.close());

  it('serves index.html revalidated every time, under a policy that allows only this server', async () => {
    const res = await fetch(`${base}/`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    const csp = res.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'self'/);
    assert.match(csp, /connect-src 'self'/);
    const html = await res.text();
    assert.doesNotMatch(html, /https?:\/\//, 'no absolute URL: nothing is fetched from elsewhere');

    const etag = res.headers.get('etag');
    assert.ok(etag);
    const again = await fetch(`${base}/`, { headers: { 'if-none-match': etag } });
    assert.equal(again.status, 304);
  });

  it('serves hashed assets as immutable with their content types', async () => {
    const html = await (await fetch(`${base}/`)).text();
    const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    assert.ok(assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')), html);
    for (const asset of assets) {
      const res = await fetch(`${base}${asset}`);
      assert.equal(res.status, 200, asset);
      assert.equal(
        res.headers.get('content-type'),
        asset.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8',
      );
      assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    }
  });

  it('serves the service worker at the root path, revalidated', async () => {
    const res = await fetch(`${base}/sw.js`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/javascript; charset=utf-8');
    assert.equal(res.headers.get('cache-control'), 'no-cache');
  });

  it('answers 404 outside the client folder and keeps the server routes', async () => {
    for (const path of [
      '/%2e%2e/package.json',
      '/..%2fpackage.json',
      '/assets/nothing.js',
      '/web-build.stamp',
      '/%E0%A4%A',
    ])
      assert.equal((await fetch(`${base}${path}`)).status, 404, path);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    assert.equal((await fetch(`${base}/`, { method: 'POST' })).status, 405);
  });
});
