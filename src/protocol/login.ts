/** Login and serverLogin syntax (docs/protocol.md §2). */
export const LOGIN_RE = /^[a-z0-9][a-z0-9_.-]{2,31}$/;

export function isValidLogin(value: unknown): value is string {
  return typeof value === 'string' && LOGIN_RE.test(value);
}

/** deviceId syntax (docs/protocol.md §5.1). */
export const DEVICE_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
