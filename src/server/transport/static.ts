/** The web client's static files (docs/web-client.md), built by `npm run build` into dist/web. */
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sha256 } from '../crypto/sha256.js';

/** Where `vite build` writes the client; the same folder from src/ (tsx) and from dist/ (compiled). */
export const WEB_ROOT = fileURLToPath(new URL('../../../dist/web/', import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.webmanifest': 'application/manifest+json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.txt': 'text/plain; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
};

/**
 * Everything the page may load comes from this server: the policy makes the browser refuse any other
 * origin, so a stray CDN link fails loudly instead of leaking who uses the client. `connect-src 'self'`
 * also allows ws:/wss: to this host.
 */
const CONTENT_SECURITY_POLICY =
  "default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; " +
  "worker-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/**
 * Answers a GET for a file of the web client, or returns false when there is no such file. Vite puts a
 * content hash in every name under /assets/, so those are immutable; index.html and /sw.js keep their
 * names across builds and must be revalidated (ETag) every time.
 */
export async function serveWebFile(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  root: string = WEB_ROOT,
): Promise<boolean> {
  let relative: string;
  try {
    relative = path === '/' ? 'index.html' : decodeURIComponent(path.slice(1));
  } catch {
    return false;
  }
  const file = resolve(root, relative);
  if (!file.startsWith(resolve(root) + sep) || relative.split('/').some((p) => p.startsWith('.'))) return false;
  const type = CONTENT_TYPES[extname(file)];
  if (!type) return false;
  let body: Buffer;
  try {
    body = await readFile(file);
  } catch {
    return false;
  }
  const immutable = relative.startsWith('assets/');
  const etag = `"${sha256(body, 'base64url').slice(0, 27)}"`;
  const headers: Record<string, string> = {
    'content-type': type,
    'cache-control': immutable ? 'public, max-age=31536000, immutable' : 'no-cache',
    etag,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  };
  if (type.startsWith('text/html')) headers['content-security-policy'] = CONTENT_SECURITY_POLICY;
  if (req.headers['if-none-match'] === etag) {
    res.writeHead(304, headers);
    res.end();
    return true;
  }
  res.writeHead(200, Object.assign({}, headers, { 'content-length': String(body.length) }));
  res.end(req.method === 'HEAD' ? undefined : body);
  return true;
}
