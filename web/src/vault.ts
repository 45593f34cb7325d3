/**
 * The account kept in this browser (IndexedDB) and its encrypted backup file. The SDK signs with raw
 * key bytes, so the identity itself cannot be a non-extractable CryptoKey; instead it is stored sealed
 * (AES-GCM) under a non-extractable device key that never leaves IndexedDB.
 */
import { openDB } from 'idb';
import type { Identity, UserProfile } from '../../src/client/index.js';
import { identityFromJson, identityToJson } from '../../src/client/index.js';
import { fromBase64, toBase64 } from '../../src/protocol/bytes.js';

/** What this browser needs to log in again without asking anything. */
export interface Account {
  identity: Identity;
  profile: UserProfile;
  /** This browser's device; an imported backup gets a new one (docs/protocol.md §5.1: a second device). */
  deviceId: string;
}

interface Sealed {
  ivB64: string;
  ciphertextB64: string;
}

const DB_NAME = 'shine';
const STORE = 'vault';
const db = () =>
  openDB(DB_NAME, 1, {
    upgrade(d) {
      d.createObjectStore(STORE);
    },
  });

async function seal(key: CryptoKey, plaintext: Uint8Array<ArrayBuffer>): Promise<Sealed> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, key, plaintext));
  return { ivB64: toBase64(iv), ciphertextB64: toBase64(ct) };
}

async function unseal(key: CryptoKey, sealed: Sealed): Promise<Uint8Array> {
  const iv = fromBase64(sealed.ivB64);
  const ct = fromBase64(sealed.ciphertextB64);
  if (!iv || !ct) throw new Error('sealed data is not base64');
  return new Uint8Array(await crypto.subtle.decrypt({ name: 'AES-GCM', iv: bytes(iv) }, key, bytes(ct)));
}

/** A copy backed by a plain ArrayBuffer, as WebCrypto's types want. */
const bytes = (b: Uint8Array): Uint8Array<ArrayBuffer> => new Uint8Array(b);

interface AccountText {
  identity: string;
  profile: UserProfile;
  deviceId?: string;
}

const encodeAccount = (a: AccountText) => bytes(new TextEncoder().encode(JSON.stringify(a)));

function decodeAccount(raw: Uint8Array): { identity: Identity; profile: UserProfile; deviceId: string | null } {
  const o = JSON.parse(new TextDecoder().decode(raw)) as Partial<AccountText>;
  if (typeof o.identity !== 'string' || typeof o.profile !== 'object' || o.profile === null)
    throw new Error('not a SHiNE account');
  const identity = identityFromJson(o.identity);
  if (o.profile.login !== identity.login) throw new Error('the profile is not this identity’s');
  return { identity, profile: o.profile, deviceId: typeof o.deviceId === 'string' ? o.deviceId : null };
}

/** A random deviceId (docs/protocol.md §5.1: 1..64 of [A-Za-z0-9_-]). */
export function newDeviceId(): string {
  return (
    'web-' +
    toBase64(crypto.getRandomValues(new Uint8Array(12)))
      .replace(/\+/g, '-')
      .replace(/\//g, '_')
  );
}

/** Stores the account sealed under this browser's device key (made on first use). */
export async function saveAccount(account: Account): Promise<void> {
  const d = await db();
  let key = (await d.get(STORE, 'deviceKey')) as CryptoKey | undefined;
  if (!key) {
    key = await crypto.subtle.generateKey({ name: 'AES-GCM', length: 256 }, false, ['encrypt', 'decrypt']);
    await d.put(STORE, key, 'deviceKey');
  }
  const sealed = await seal(
    key,
    encodeAccount({ identity: identityToJson(account.identity), profile: account.profile, deviceId: account.deviceId }),
  );
  await d.put(STORE, sealed, 'account');
}

/** The account of this browser, or null on a fresh one. */
export async function loadAccount(): Promise<Account | null> {
  const d = await db();
  const key = (await d.get(STORE, 'deviceKey')) as CryptoKey | undefined;
  const sealed = (await d.get(STORE, 'account')) as Sealed | undefined;
  if (!key || !sealed) return null;
  const { identity, profile, deviceId } = decodeAccount(await unseal(key, sealed));
  return { identity, profile, deviceId: deviceId ?? newDeviceId() };
}

/** Forgets the account in this browser (the server keeps it; a backup brings it back). */
export async function forgetAccount(): Promise<void> {
  await (await db()).delete(STORE, 'account');
}

/** The backup file format: the identity and profile sealed under a key derived from a passphrase. */
interface BackupFile extends Sealed {
  format: 'shine-backup-v1';
  login: string;
  kdf: 'PBKDF2-SHA-256';
  iterations: number;
  saltB64: string;
}

/** OWASP's 2023 figure for PBKDF2-HMAC-SHA-256: about half a second in a browser. */
const BACKUP_ITERATIONS = 600_000;
export const MIN_PASSPHRASE_LENGTH = 8;

async function passphraseKey(passphrase: string, salt: Uint8Array, iterations: number): Promise<CryptoKey> {
  const base = await crypto.subtle.importKey('raw', bytes(new TextEncoder().encode(passphrase)), 'PBKDF2', false, [
    'deriveKey',
  ]);
  return crypto.subtle.deriveKey(
    { name: 'PBKDF2', hash: 'SHA-256', salt: bytes(salt), iterations },
    base,
    { name: 'AES-GCM', length: 256 },
    false,
    ['encrypt', 'decrypt'],
  );
}

/** The backup file's text; the deviceId stays out of it (an import is another device). */
export async function exportBackup(account: Account, passphrase: string): Promise<string> {
  if (passphrase.length < MIN_PASSPHRASE_LENGTH)
    throw new Error(`the passphrase needs at least ${MIN_PASSPHRASE_LENGTH} characters`);
  const salt = crypto.getRandomValues(new Uint8Array(16));
  const sealed = await seal(
    await passphraseKey(passphrase, salt, BACKUP_ITERATIONS),
    encodeAccount({ identity: identityToJson(account.identity), profile: account.profile }),
  );
  const file: BackupFile = {
    format: 'shine-backup-v1',
    login: account.identity.login,
    kdf: 'PBKDF2-SHA-256',
    iterations: BACKUP_ITERATIONS,
    saltB64: toBase64(salt),
    ...sealed,
  };
  return JSON.stringify(file, null, 2) + '\n';
}

/** Opens a backup file; a wrong passphrase or a damaged file throws with a message a person can read. */
export async function importBackup(text: string, passphrase: string): Promise<Account> {
  let file: Partial<BackupFile>;
  try {
    file = JSON.parse(text) as Partial<BackupFile>;
  } catch {
    throw new Error('this is not a SHiNE backup file');
  }
  const salt = typeof file.saltB64 === 'string' ? fromBase64(file.saltB64) : null;
  if (
    file.format !== 'shine-backup-v1' ||
    file.kdf !== 'PBKDF2-SHA-256' ||
    !salt ||
    typeof file.iterations !== 'number' ||
    !(file.iterations >= 100_000 && file.iterations <= 10_000_000) ||
    typeof file.ivB64 !== 'string' ||
    typeof file.ciphertextB64 !== 'string'
  )
    throw new Error('this is not a SHiNE backup file');
  let raw: Uint8Array;
  try {
    raw = await unseal(await passphraseKey(passphrase, salt, file.iterations), {
      ivB64: file.ivB64,
      ciphertextB64: file.ciphertextB64,
    });
  } catch {
    throw new Error('wrong passphrase, or the file is damaged');
  }
  const { identity, profile } = decodeAccount(raw);
  return { identity, profile, deviceId: newDeviceId() };
}
