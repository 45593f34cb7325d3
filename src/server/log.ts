/**
 * Structured logging through pino: JSON lines on stderr, or pino-pretty's coloured lines when stderr is
 * a terminal. A thin adapter keeps the house call shape `log.info(msg, fields)`.
 */
import type { DestinationStream, Logger as PinoLogger } from 'pino';
import { pino, stdSerializers, stdTimeFunctions } from 'pino';
import type { PrettyOptions } from 'pino-pretty';
import { createRequire } from 'node:module';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

export type LogFields = Record<string, unknown>;

/** The logger every server module takes as a dependency. */
export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger that adds `bindings` (e.g. requestId, op, sessionId) to every entry. */
  child(bindings: LogFields): Logger;
}

/** Receives one finished JSON line (without the newline). */
export type LogSink = (line: string) => void;

/** Where entries go: a line sink, or any stream pino can write to. */
export type LogDestination = LogSink | DestinationStream;

/**
 * Field names whose values are message content, key material or push credentials. They never reach a
 * log line, whatever a call site passes, down to REDACT_DEPTH levels (`payload.items[0].blobB64` is 4).
 */
export const REDACTED_FIELDS = [
  'blobB64',
  'incomingBlobB64',
  'outgoingBlobB64',
  'blobsB64',
  'valueB64',
  'payloadB64',
  'endpoint',
  'p256dhB64',
  'authB64',
  'signatureB64',
  'seedB64',
  'privateKey',
  'serverKeySeedB64',
  'vapidPrivateKey',
  'adminToken',
] as const;

const REDACT_DEPTH = 4;

/** pino's redact wildcards match one level each (an array index is a level): `f`, `*.f`, `*.*.f`, … */
const REDACT_PATHS = REDACTED_FIELDS.flatMap((f) =>
  Array.from({ length: REDACT_DEPTH }, (_, depth) => [...Array<string>(depth).fill('*'), f].join('.')),
);

/** A logger that writes entries at `level` or above; `base` fields go into every entry. */
export function createLogger(level: LogLevel, destination?: LogDestination, base: LogFields = {}): Logger {
  const logger = pino(
    {
      level,
      base,
      // ISO times and level names: readable by people and by every log shipper without pino's tables.
      timestamp: stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      serializers: { err: stdSerializers.err },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    },
    level === 'silent' ? { write: () => undefined } : toStream(destination),
  );
  return adapt(logger);
}

/** Discards everything (tests, embedding). */
export const silentLogger: Logger = createLogger('silent');

function adapt(logger: PinoLogger): Logger {
  return {
    debug: (msg, fields) => logger.debug(fields ?? {}, msg),
    info: (msg, fields) => logger.info(fields ?? {}, msg),
    warn: (msg, fields) => logger.warn(fields ?? {}, msg),
    error: (msg, fields) => logger.error(fields ?? {}, msg),
    child: (bindings) => lazyChild(logger, bindings),
  };
}

/**
 * A child logger that pino makes only when an entry at an enabled level is written: pino builds a child's
 * bindings through its redaction at once, about 27 µs a child, and most request loggers (one per AuthLogin,
 * say) never write (docs/performance.md, twenty-sixth session).
 */
function lazyChild(parent: PinoLogger, bindings: LogFields): Logger {
  let made: Logger | undefined;
  const child = (): Logger => (made ??= adapt(parent.child(bindings)));
  const at =
    (level: 'debug' | 'info' | 'warn' | 'error') =>
    (msg: string, fields?: LogFields): void => {
      if (parent.isLevelEnabled(level)) child()[level](msg, fields);
    };
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: (b) => child().child(b) };
}

function toStream(destination: LogDestination | undefined): DestinationStream {
  if (typeof destination === 'function') return { write: (line: string) => destination(line.replace(/\n$/, '')) };
  if (destination) return destination;
  // stdout carries the CLI's own output; logs stay on stderr, pretty only when a person watches it.
  if (process.stderr.isTTY) {
    // Loaded only here: a server under a supervisor never needs it, and it costs start-up time.
    const pretty = createRequire(import.meta.url)('pino-pretty') as (opts: PrettyOptions) => DestinationStream;
    return pretty({ destination: 2, sync: true, colorize: true, translateTime: 'SYS:HH:MM:ss.l' });
  }
  return pino.destination({ dest: 2, sync: true });
}
