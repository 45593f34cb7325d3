/**
 * Signed texts outside the container (docs/protocol.md §4, §5.1): profiles, server descriptors, logins.
 * Each is UTF-8 lines joined by '\n' with no trailing newline.
 */
import { fromBase64, toBase64, utf8 } from './bytes.js';
import type { SignatureVerifier } from './ed25519.js';
import { nobleVerifier, signEd25519 } from './ed25519.js';
import { isValidLogin } from './login.js';

export interface UserProfile {
  login: string;
  signKeyB64: string;
  encKeyB64: string;
  accessServers: string[];
  version: number;
  updatedAtMs: number;
  signatureB64: string;
}

export type UnsignedProfile = Omit<UserProfile, 'signatureB64'>;

export interface ServerDescriptor {
  serverLogin: string;
  wsUrl: string;
  signKeyB64: string;
  signatureB64: string;
}

export function profileSigningText(p: UnsignedProfile): string {
  return [
    'SHiNE-PROFILE-v1',
    `login=${p.login}`,
    `signKey=${p.signKeyB64}`,
    `encKey=${p.encKeyB64}`,
    `accessServers=${p.accessServers.join(',')}`,
    `version=${p.version}`,
    `updatedAtMs=${p.updatedAtMs}`,
  ].join('\n');
}

export function descriptorSigningText(d: Omit<ServerDescriptor, 'signatureB64'>): string {
  return ['SHiNE-SERVER-v1', `login=${d.serverLogin}`, `wsUrl=${d.wsUrl}`, `signKey=${d.signKeyB64}`].join('\n');
}

export function authSigningText(a: { server: string; challengeB64: string; login: string; deviceId: string }): string {
  return [
    'SHiNE-AUTH-v1',
    `server=${a.server}`,
    `challenge=${a.challengeB64}`,
    `login=${a.login}`,
    `device=${a.deviceId}`,
  ].join('\n');
}

export function s2sSigningText(a: { from: string; to: string; timestampMs: number; nonceB64: string }): string {
  return ['SHiNE-S2S-v1', `from=${a.from}`, `to=${a.to}`, `time=${a.timestampMs}`, `nonce=${a.nonceB64}`].join('\n');
}

export function signText(text: string, seed: Uint8Array): string {
  return toBase64(signEd25519(utf8(text), seed));
}

export function verifyText(
  text: string,
  signatureB64: string,
  publicKeyB64: string,
  verifier: SignatureVerifier = nobleVerifier,
): boolean {
  const sig = fromBase64(signatureB64);
  const key = fromBase64(publicKeyB64);
  if (!sig || !key || sig.length !== 64 || key.length !== 32) return false;
  return verifier.verify(sig, utf8(text), key);
}

export function signProfile(p: UnsignedProfile, seed: Uint8Array): UserProfile {
  return Object.assign({}, p, { signatureB64: signText(profileSigningText(p), seed) });
}

export function signDescriptor(d: Omit<ServerDescriptor, 'signatureB64'>, seed: Uint8Array): ServerDescriptor {
  return Object.assign({}, d, { signatureB64: signText(descriptorSigningText(d), seed) });
}

/** Shape checks of a profile (not its signature); returns a reason or null. */
export function profileShapeProblem(p: unknown): string | null {
  if (typeof p !== 'object' || p === null) return 'profile must be an object';
  const o = p as Record<string, unknown>;
  if (!isValidLogin(o.login)) return 'bad login';
  for (const k of ['signKeyB64', 'encKeyB64'] as const) {
    const v = o[k];
    if (typeof v !== 'string') return `${k} must be a string`;
    const raw = fromBase64(v);
    if (!raw || raw.length !== 32) return `${k} must be 32 bytes of base64`;
  }
  const servers = o.accessServers;
  if (!Array.isArray(servers) || servers.length < 1 || servers.length > 2)
    return 'accessServers must list 1 or 2 servers';
  if (!servers.every(isValidLogin)) return 'bad server login in accessServers';
  if (servers.length === 2 && servers[0] === servers[1]) return 'accessServers repeats a server';
  if (!Number.isSafeInteger(o.version) || (o.version as number) < 1) return 'version must be a positive integer';
  if (!Number.isSafeInteger(o.updatedAtMs) || (o.updatedAtMs as number) < 0)
    return 'updatedAtMs must be a non-negative integer';
  if (typeof o.signatureB64 !== 'string') return 'signatureB64 must be a string';
  return null;
}

export function verifyProfile(p: UserProfile, verifier?: SignatureVerifier): boolean {
  return verifyText(profileSigningText(p), p.signatureB64, p.signKeyB64, verifier);
}

export function verifyDescriptor(d: ServerDescriptor, verifier?: SignatureVerifier): boolean {
  return verifyText(descriptorSigningText(d), d.signatureB64, d.signKeyB64, verifier);
}
