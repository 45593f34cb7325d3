/** Structured logging: one JSON object per line, to stderr unless a sink is given. */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error', 'silent'];

export type LogFields = Record<string, unknown>;

/** The logger every server module takes as a dependency. */
export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

/** Receives one finished JSON line (without the newline). */
export type LogSink = (line: string) => void;

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

const stderrSink: LogSink = (line) => {
  process.stderr.write(line + '\n');
};

/** A logger that writes entries at `level` or above; `base` fields go into every entry. */
export function createLogger(level: LogLevel, sink: LogSink = stderrSink, base: LogFields = {}): Logger {
  const min = RANK[level];
  const write = (lvl: Exclude<LogLevel, 'silent'>) => (msg: string, fields?: LogFields) => {
    if (RANK[lvl] < min) return;
    sink(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...base, ...fields }, jsonSafe));
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}

/** Discards everything (tests, embedding). */
export const silentLogger: Logger = createLogger('silent');

/** JSON.stringify drops an Error's fields and throws on bigint; keep both readable in the log. */
function jsonSafe(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    const out: Record<string, unknown> = { name: value.name, message: value.message, stack: value.stack };
    const code = (value as { code?: unknown }).code;
    if (code !== undefined) out.code = code;
    if (value.cause !== undefined) out.cause = value.cause;
    return out;
  }
  if (typeof value === 'bigint') return value.toString();
  return value;
}
