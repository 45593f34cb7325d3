/** The server's own Ed25519 key (docs/protocol.md §4): a configured seed, or one generated once and kept in dataDir. */
import { randomBytes } from 'node:crypto';
import { link, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fromBase64, toBase64 } from '../protocol/bytes.js';
import { ed25519PublicKey } from '../protocol/ed25519.js';
import { utf8 } from '../protocol/bytes.js';
import { sodiumSigner } from './crypto/verifier.js';

export interface ServerKey {
  readonly publicKey: Uint8Array;
  readonly publicKeyB64: string;
  /** Signs a SHiNE signing text; returns the signature in base64. */
  sign(text: string): string;
}

export const SERVER_KEY_FILE = 'server-key.json';

interface KeyFile {
  seedB64: string;
  publicKeyB64: string;
}

/** Uses `seedB64` when given; otherwise reads `<dataDir>/server-key.json`, creating it (mode 0600) on first start. */
export async function loadServerKey(opts: { dataDir: string; seedB64?: string | undefined }): Promise<ServerKey> {
  const seed =
    opts.seedB64 !== undefined
      ? decodeSeed(opts.seedB64, 'serverKeySeedB64')
      : await loadOrCreateSeed(join(opts.dataDir, SERVER_KEY_FILE));
  return keyFromSeed(seed);
}

/**
 * A ServerKey from a 32-byte seed (tests use fixed seeds). It signs with libsodium: signing is on the
 * path of every federated send (delivery receipts, docs/protocol.md §13.1); the signatures are those of
 * protocol/identity.ts signText (Ed25519 is deterministic).
 */
export function keyFromSeed(seed: Uint8Array): ServerKey {
  const publicKey = ed25519PublicKey(seed);
  const signBytes = sodiumSigner(seed);
  return { publicKey, publicKeyB64: toBase64(publicKey), sign: (text) => toBase64(signBytes(utf8(text))) };
}

async function loadOrCreateSeed(path: string): Promise<Uint8Array> {
  const existing = await readKeyFile(path);
  if (existing) return existing;
  const seed = new Uint8Array(randomBytes(32));
  const body: KeyFile = { seedB64: toBase64(seed), publicKeyB64: toBase64(ed25519PublicKey(seed)) };
  // Write a private temp file and hard-link it into place: link() fails if the key already exists, so two
  // processes starting at once on one dataDir end up with the same key, never a half-written file.
  const tmp = `${path}.${process.pid}.${toBase64(randomBytes(6)).replace(/[+/]/g, '_')}.tmp`;
  await writeFile(tmp, JSON.stringify(body, null, 2) + '\n', { mode: 0o600, flag: 'wx' });
  try {
    await link(tmp, path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    await unlink(tmp);
  }
  const stored = await readKeyFile(path);
  if (!stored) throw new Error(`server key file ${path} vanished while being created`);
  return stored;
}

async function readKeyFile(path: string): Promise<Uint8Array | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  let parsed: Partial<KeyFile>;
  try {
    parsed = JSON.parse(text) as Partial<KeyFile>;
  } catch {
    throw new Error(`server key file ${path} is not JSON`);
  }
  const seed = decodeSeed(parsed.seedB64, path);
  if (parsed.publicKeyB64 !== undefined && parsed.publicKeyB64 !== toBase64(ed25519PublicKey(seed))) {
    throw new Error(`server key file ${path}: publicKeyB64 does not match seedB64`);
  }
  return seed;
}

function decodeSeed(value: unknown, where: string): Uint8Array {
  const seed = typeof value === 'string' ? fromBase64(value) : null;
  if (!seed || seed.length !== 32) throw new Error(`${where}: the server key seed must be 32 bytes of base64`);
  return seed;
}
