/** How the CLI fails: one table of what each code means, and the cause of a failed connection in plain words. */
import type { LocalErrorCode } from '../client/index.js';
import { ShineClientError } from '../client/index.js';
import type { ContainerErrorReason } from '../protocol/container.js';
import { ContainerError } from '../protocol/container.js';
import type { ErrorCode } from '../protocol/errors.js';
import { LOGIN_RE } from '../protocol/login.js';

/**
 * Exit statuses, documented in README: 0 done, 1 the operation failed, 2 the command line is wrong,
 * 3 `shine check` found problems it did not repair, or `shine chain show` found a broken chain.
 */
export const EXIT = { ok: 0, failure: 1, usage: 2, problems: 3 } as const;

/** A mistake in the command line: printed with a pointer to --help, exit status 2. */
export class UsageError extends Error {}

/** `shine check` found problems that remain, or `shine chain show` a broken chain: printed as is, exit status 3. */
export class ProblemsFoundError extends Error {}

/** A failure already explained in words for the user: printed as is, exit status 1. */
export class CliError extends Error {}

/** What every code a user can meet means, in one sentence each (server codes, SDK codes, codec reasons). */
export const CODE_MEANINGS: Record<ErrorCode | LocalErrorCode | ContainerErrorReason, string> = {
  BAD_JSON: 'the server could not parse the request as JSON',
  BAD_FIELDS: 'a field of the request is missing or malformed',
  BAD_BLOB: 'a message container is malformed',
  BAD_PAIR: 'the two copies of a message do not match',
  BAD_SIGNATURE: 'a signature does not verify (wrong key or a changed text)',
  BAD_TIME: "the message's time is too far from the server's clock (check this machine's clock)",
  EMPTY_OWNER_LOGIN: 'an owner login is required',
  EMPTY_MESSAGE_KEY: 'a message key is required',
  NOT_AUTHENTICATED: 'log in first',
  AUTH_FAILED: 'login refused: this identity is not registered on the server, or its keys differ',
  NOT_SENDER: 'only the sender may change this message',
  LOCAL_SERVER_NOT_ACCESS_SERVER: "this server is not one of the user's access servers",
  NOT_PEER: 'the calling server is not a known peer',
  SOURCE_MISMATCH: 'the source server does not match the authenticated one',
  FORBIDDEN: 'not allowed',
  NOT_PARTNER: 'the calling server is not a chain partner of this server',
  UNKNOWN_OP: 'the server does not know this operation (an older or newer server?)',
  USER_NOT_FOUND: 'no such user is known to the server',
  SERVER_NOT_FOUND: 'no such server is known to the server',
  PROFILE_CONFLICT: 'the login is taken by another key, or the profile version is not higher than the stored one',
  CHAIN_CONFLICT: 'the chain has moved on: rebase the block on the head the server named',
  CHAIN_GAP: 'blocks before this one are missing on the receiving server',
  CHAIN_DIVERGED: "the block disagrees with the receiving server's copy of the chain",
  TOO_LARGE: 'too large',
  RATE_LIMITED: 'too many requests: wait a moment and try again',
  INTERNAL: 'the server failed internally (its log has the details)',
  LOCAL_SERVER_NOT_CONFIGURED: 'the server is not federated (SHINE_SERVER_LOGIN is local)',
  OVERLOADED: 'the server is overloaded: try again later',
  TIMEOUT: 'the server did not answer in time',
  CLOSED: 'the connection closed',
  NOT_LOGGED_IN: 'log in first',
  BAD_PROFILE: "the server's answer about a profile or descriptor does not verify",
  NOT_OWNER: 'the message is not yours',
  TRUNCATED: 'the container is cut short',
  BAD_MAGIC: 'not a SHiNE_DM container (or not a SHiNE_BCH block)',
  BAD_VERSION: 'an unknown container version',
  BAD_TYPE: 'an unknown message type',
  BAD_KIND: 'a chain block of kind 0 (kinds are 1..65 535)',
  BAD_LOGIN: 'a login does not follow the login rule',
  SAME_LOGIN: 'sender and recipient are the same user: you cannot send a message to yourself',
  BAD_INTEGER: 'a number is out of range',
  BAD_HASH: "a chain block's prevHash is not 32 bytes",
  BODY_TOO_LARGE: 'the text is too long (at most 65 536 bytes once encrypted)',
  BAD_BODY: 'the message body is malformed',
  TRAILING_BYTES: 'bytes follow the signature',
};

export const LOGIN_RULE =
  'a login is 3 to 32 characters: lowercase letters, digits, "_", "." and "-", starting with a letter or digit';

/** The value when it is a valid login; otherwise a usage error that states the rule. */
export function checkLogin(value: string, what = 'login'): string {
  if (!LOGIN_RE.test(value)) throw new UsageError(`invalid ${what} ${JSON.stringify(value)}: ${LOGIN_RULE}`);
  return value;
}

function meaningOf(code: string): string | undefined {
  return Object.hasOwn(CODE_MEANINGS, code) ? CODE_MEANINGS[code as keyof typeof CODE_MEANINGS] : undefined;
}

/** One line for any failure: the code with its meaning, then the server's own words when they add something. */
export function describeError(err: unknown): string {
  if (err instanceof ShineClientError || err instanceof ContainerError) {
    const code = err instanceof ContainerError ? err.reason : err.code;
    const meaning = meaningOf(code) ?? code;
    const status = err instanceof ShineClientError && err.status > 0 ? ` ${err.status}` : '';
    const detail = err.message && err.message !== code && err.message !== meaning ? ` (${err.message})` : '';
    return `${code}${status}: ${meaning}${detail}`;
  }
  if (err instanceof Error) {
    const fileError = err as NodeJS.ErrnoException;
    if (fileError.path && fileError.code) return `${fileError.path}: ${fileProblem(fileError.code)}`;
    return err.message;
  }
  return String(err);
}

function fileProblem(code: string): string {
  switch (code) {
    case 'ENOENT':
      return 'no such file or folder';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'is a folder, not a file';
    default:
      return code;
  }
}

/**
 * Why a WebSocket could not open, from the error ws reported: refused, DNS, TLS, or an HTTP answer
 * that is not an upgrade (a web server, or a SHiNE server asked on another path than /ws).
 */
export function connectionProblem(url: URL, cause: Error | undefined): string {
  const where = `${url.hostname}:${url.port || (url.protocol === 'wss:' ? '443' : '80')}`;
  const code = (cause as NodeJS.ErrnoException | undefined)?.code ?? '';
  const message = cause?.message ?? '';
  const wsUrl = `${url.protocol}//${url.host}/ws`;
  if (code === 'ECONNREFUSED') return `nothing listens at ${where} (is the server running? is the port right?)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return `the host name ${url.hostname} does not resolve (DNS ${code}): check its spelling`;
  if (code === 'ETIMEDOUT' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH')
    return `${where} cannot be reached (${code}): a firewall, or a wrong address?`;
  if (code === 'ECONNRESET') return `${where} closed the connection at once (${code})`;
  if (/wrong version number/.test(message)) return `${where} does not speak TLS: use ws:// instead of wss://`;
  if (/CERT|SSL|TLS/i.test(code) || /certificate|ssl|tls/i.test(message))
    return `TLS failed with ${where}: ${message.split('\n')[0] || code} (wss:// needs a certificate this machine trusts)`;
  const http = /Unexpected server response: (\d+)/.exec(message);
  if (http) {
    const hint = url.pathname === '/ws' ? '' : ` (did you mean ${wsUrl}?)`;
    return `not a SHiNE endpoint: ${url.href} answered HTTP ${http[1]} instead of a WebSocket upgrade${hint}`;
  }
  return `could not connect to ${url.href}${message ? `: ${message}` : ''}`;
}
