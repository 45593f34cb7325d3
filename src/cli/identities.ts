/**
 * Where identities (secret keys) live: a per-user folder outside any checkout, private to the user —
 * `$XDG_CONFIG_HOME/shine/identities` or `~/.config/shine/identities`, the folder 0700, files 0600.
 */
import { chmod, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { Identity } from '../client/index.js';
import { createIdentity, identityFromJson, identityToJson } from '../client/index.js';
import { CliError, UsageError, checkLogin } from './errors.js';

const SUFFIX = '.identity.json';

/** The identities folder for this user (read from the environment each time, so tests can point it elsewhere). */
export function identitiesDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'shine', 'identities');
}

export const identityPath = (login: string): string => join(identitiesDir(), `${login}${SUFFIX}`);

/** Logins with an identity in the folder. */
export async function storedLogins(): Promise<string[]> {
  const names = await readdir(identitiesDir()).catch(() => [] as string[]);
  return names
    .filter((n) => n.endsWith(SUFFIX))
    .map((n) => n.slice(0, -SUFFIX.length))
    .sort();
}

/** Creates a new identity and writes it to `out`, or to the identities folder; never overwrites one. */
export async function createIdentityFile(login: string, out?: string): Promise<{ identity: Identity; path: string }> {
  const identity = createIdentity(checkLogin(login));
  let path = out;
  if (path === undefined) {
    const dir = identitiesDir();
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // mkdir leaves an existing folder's mode alone: one made earlier by hand may be readable by others.
    await chmod(dir, 0o700);
    path = identityPath(login);
  }
  try {
    await writeFile(path, identityToJson(identity), { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST')
      throw new CliError(`${path} exists; refusing to overwrite an identity (its secret keys would be lost)`);
    throw err;
  }
  return { identity, path };
}

/** The identity chosen by `--as LOGIN` (from the folder) or `--identity FILE`. */
export async function loadIdentity(opts: { as?: string; identity?: string }): Promise<Identity> {
  if (opts.as !== undefined && opts.identity !== undefined) throw new UsageError('give --as or --identity, not both');
  if (opts.as === undefined && opts.identity === undefined) {
    const logins = await storedLogins();
    const known =
      logins.length > 0 ? `; identities here: ${logins.join(', ')}` : '; create one with shine identity create';
    throw new UsageError(`say who you are: --as LOGIN or --identity FILE${known}`);
  }
  const path = opts.identity ?? identityPath(checkLogin(opts.as!, 'login for --as'));
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && opts.as !== undefined) {
      const logins = await storedLogins();
      throw new CliError(
        `no identity for ${opts.as} in ${identitiesDir()}` +
          (logins.length > 0 ? ` (there are: ${logins.join(', ')})` : '') +
          `; create it with: shine identity create --login ${opts.as}`,
      );
    }
    throw err;
  }
  try {
    return identityFromJson(text);
  } catch (err) {
    throw new CliError(`${path}: not a usable identity file (${(err as Error).message})`);
  }
}
