/** Reaching a server from the CLI: URL checks with a suggestion, connections whose failures name the cause. */
import WebSocket from 'ws';
import type { Identity } from '../client/index.js';
import { ShineClient, ShineClientError } from '../client/index.js';
import { CliError, UsageError, connectionProblem } from './errors.js';
import { loadIdentity } from './identities.js';

export const DEFAULT_WS_URL = 'ws://127.0.0.1:8080/ws';
export const DEFAULT_HTTP_URL = 'http://127.0.0.1:8080';

const HAS_SCHEME = /^[a-z][a-z0-9+.-]*:\/\//i;

/** Parses a URL given on the command line; a missing scheme gets a suggestion rather than "Invalid URL". */
function parseUrl(value: string, flag: string, example: (hostPort: string) => string): URL {
  if (!HAS_SCHEME.test(value))
    throw new UsageError(`${flag} needs a URL with a scheme: did you mean ${example(value)}?`);
  try {
    return new URL(value);
  } catch {
    throw new UsageError(`${flag} ${JSON.stringify(value)} is not a URL (example: ${example('127.0.0.1:8080')})`);
  }
}

/** The WebSocket URL of --server; http(s):// is refused with the ws(s):// URL it probably meant. */
export function wsServerUrl(value: string): URL {
  const url = parseUrl(value, '--server', (hostPort) => `ws://${hostPort}/ws`);
  if (url.protocol === 'http:' || url.protocol === 'https:') {
    const scheme = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const path = url.pathname === '/' ? '/ws' : url.pathname;
    throw new UsageError(`--server takes the WebSocket URL: did you mean ${scheme}//${url.host}${path}?`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    throw new UsageError(`--server must be a ws:// or wss:// URL, not ${url.protocol}//`);
  return url;
}

/** The HTTP base URL of --server for admin and status calls; the server's ws(s):// URL names the same port. */
export function httpServerUrl(value: string): URL {
  const url = parseUrl(value, '--server', (hostPort) => `http://${hostPort}`);
  if (url.protocol === 'ws:' || url.protocol === 'wss:') url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError(`--server must be an http:// or https:// URL, not ${url.protocol}//`);
  return new URL('/', url);
}

/** Opens a connection; a failure says why (refused, DNS, TLS, not a SHiNE endpoint) instead of "close 1006". */
export async function openClient(server: string): Promise<ShineClient> {
  const url = wsServerUrl(server);
  let cause: Error | undefined;
  // ws reports the cause only on its socket's error event, which the SDK does not pass on.
  class Recording extends WebSocket {
    constructor(address: string) {
      super(address);
      this.on('error', (err) => (cause ??= err));
    }
  }
  try {
    return await ShineClient.connect(url.href, { WebSocket: Recording });
  } catch (err) {
    if (err instanceof ShineClientError && err.code === 'CLOSED') throw new CliError(connectionProblem(url, cause));
    throw err;
  }
}

export interface ClientFlags {
  as?: string;
  identity?: string;
  server: string;
  device: string;
}

/** Loads the identity, connects and (unless login is false) logs in; the caller closes the client. */
export async function connect(flags: ClientFlags, login = true): Promise<{ client: ShineClient; identity: Identity }> {
  wsServerUrl(flags.server); // a wrong URL is a usage error, reported before any file is read
  const identity = await loadIdentity(flags);
  const client = await openClient(flags.server);
  if (login) {
    try {
      await client.login(identity, flags.device);
    } catch (err) {
      await client.close();
      throw err;
    }
  }
  return { client, identity };
}

/** Runs fn with a connected client and always closes it. */
export async function withClient(
  flags: ClientFlags,
  fn: (client: ShineClient, identity: Identity) => Promise<void>,
  login = true,
): Promise<void> {
  const { client, identity } = await connect(flags, login);
  try {
    await fn(client, identity);
  } finally {
    await client.close();
  }
}

/**
 * A GET or POST on the server's HTTP side, answered in JSON (or text for /metrics). Errors name the
 * URL and the likely cause: admin routes answer 404 while the server has no admin token.
 */
export async function httpCall(
  base: URL,
  path: string,
  opts: { method?: 'GET' | 'POST'; token?: string | undefined } = {},
): Promise<string> {
  const url = new URL(path, base);
  const method = opts.method ?? 'GET';
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
    });
  } catch (err) {
    throw new CliError(connectionProblem(url, (err as Error & { cause?: Error }).cause ?? (err as Error)));
  }
  const body = await res.text();
  if (res.status === 200) return body;
  const admin = /^\/(admin|debug)\//.test(path);
  const hint =
    admin && res.status === 404
      ? ' (the server has no admin token: start it with SHINE_ADMIN_TOKEN set, and pass the same with --admin-token)'
      : admin && res.status === 401
        ? ' (wrong admin token)'
        : '';
  throw new CliError(`${method} ${url.href} answered ${res.status}${hint}: ${body.slice(0, 300)}`);
}
