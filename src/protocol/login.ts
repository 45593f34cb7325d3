/** Login and serverLogin syntax (SPEC §2). */
export const LOGIN_RE = /^[a-z0-9][a-z0-9_.-]{2,31}$/;

export function isValidLogin(value: unknown): value is string {
  return typeof value === 'string' && LOGIN_RE.test(value);
}

/** deviceId syntax (SPEC §5.1). */
export const DEVICE_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
