/** Every error code of docs/protocol.md §5 with its HTTP-like status. The only table of codes in the project. */
export const ERROR_STATUS = {
  BAD_JSON: 400,
  BAD_FIELDS: 400,
  BAD_BLOB: 400,
  BAD_PAIR: 400,
  BAD_SIGNATURE: 400,
  BAD_TIME: 400,
  EMPTY_OWNER_LOGIN: 400,
  EMPTY_MESSAGE_KEY: 400,
  NOT_AUTHENTICATED: 401,
  AUTH_FAILED: 401,
  NOT_SENDER: 403,
  LOCAL_SERVER_NOT_ACCESS_SERVER: 403,
  NOT_PEER: 403,
  SOURCE_MISMATCH: 403,
  FORBIDDEN: 403,
  NOT_PARTNER: 403,
  UNKNOWN_OP: 404,
  USER_NOT_FOUND: 404,
  SERVER_NOT_FOUND: 404,
  PROFILE_CONFLICT: 409,
  CHAIN_CONFLICT: 409,
  CHAIN_GAP: 409,
  CHAIN_DIVERGED: 409,
  TOO_LARGE: 413,
  RATE_LIMITED: 429,
  INTERNAL: 500,
  LOCAL_SERVER_NOT_CONFIGURED: 500,
  OVERLOADED: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The one error type of the project: a stable protocol error code, its status, and a message safe to show. */
export class ShineError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Fields the error object carries besides code and message (CHAIN_CONFLICT: headIndex, headHash). */
  readonly details: ErrorDetails | undefined;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown; details?: ErrorDetails }) {
    super(message ?? code, options);
    this.name = 'ShineError';
    this.code = code;
    this.status = ERROR_STATUS[code];
    this.details = options?.details;
  }
}

/** The extra fields of an error object (docs/protocol.md §14.2): a chain's head, `-1`/null when it is empty. */
export interface ErrorDetails {
  headIndex?: number;
  headHash?: string | null;
}

export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERROR_STATUS, value);
}
