/** The HTTP side of the port (docs/protocol.md §8): health, metrics, descriptor, the admin/debug gate, web client. */
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { ShineError } from '../../protocol/errors.js';
import { sha256 } from '../crypto/sha256.js';
import type { AppContext } from '../context.js';
import { METRICS_CONTENT_TYPE } from '../metrics.js';
import { serveWebFile } from './static.js';

export type HttpHandler = (req: IncomingMessage, res: ServerResponse) => void;

/** The request handler for every plain HTTP request. */
export function createHttpHandler(ctx: AppContext): HttpHandler {
  return (req, res) => {
    route(ctx, req, res).catch((err: unknown) => {
      ctx.log.error('http request failed', { method: req.method, url: req.url, err });
      if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
      else res.destroy();
    });
  };
}

async function route(ctx: AppContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const path = url.pathname;
  const method = req.method === 'HEAD' ? 'GET' : (req.method ?? 'GET');

  if (path === '/admin' || path.startsWith('/admin/') || path === '/debug' || path.startsWith('/debug/')) {
    const gate = adminGate(req.headers.authorization, ctx.config.adminToken);
    if (gate !== 'ok')
      return sendJson(
        res,
        gate,
        { error: gate === 401 ? 'unauthorized' : 'not found' },
        gate === 401 ? { 'www-authenticate': 'Bearer' } : {},
      );
    const admin = ctx.adminRoutes.find((r) => r.path === path && r.method === method);
    if (!admin) return sendJson(res, 404, { error: 'not found' });
    try {
      return sendJson(res, 200, await admin.handle(url, req));
    } catch (err) {
      if (err instanceof ShineError) return sendJson(res, err.status, { error: err.code, message: err.message });
      throw err;
    }
  }

  const simple: Record<string, () => Promise<void> | void> = {
    '/healthz': async () => {
      try {
        await ctx.store.ping();
        sendJson(res, 200, { ok: true });
      } catch (err) {
        ctx.log.warn('health check failed', { err });
        sendJson(res, 503, { ok: false });
      }
    },
    '/.well-known/shine-server': () => sendJson(res, 200, ctx.directory.selfDescriptor()),
    '/metrics': async () => send(res, 200, METRICS_CONTENT_TYPE, await ctx.metrics.render()),
    // Reached only while the web client is not built.
    '/': () =>
      send(
        res,
        200,
        'text/plain; charset=utf-8',
        `SHiNE server ${ctx.config.serverLogin}\nWebSocket endpoint: /ws\nWeb client not built: run npm run build\n`,
      ),
  };
  if (method === 'GET' && (path === '/' || !(path in simple)) && (await serveWebFile(req, res, path))) return;
  const handler = simple[path];
  if (!handler) return sendJson(res, 404, { error: 'not found' });
  if (method !== 'GET') return sendJson(res, 405, { error: 'method not allowed' }, { allow: 'GET, HEAD' });
  await handler();
}

/**
 * The one check in front of /admin and /debug: 404 while no token is configured (the API does not
 * exist), 401 for a missing or wrong `Authorization: Bearer <token>`.
 */
export function adminGate(authorization: string | undefined, token: string | undefined): 'ok' | 401 | 404 {
  if (!token) return 404;
  const given = /^Bearer (.+)$/.exec(authorization ?? '')?.[1];
  if (given === undefined) return 401;
  // Compare digests so the comparison takes the same time whatever the given token's length.
  return timingSafeEqual(sha256(given), sha256(token)) ? 'ok' : 401;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(body), headers);
}

function send(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store', ...headers });
  res.end(body);
}
