/**
 * From one text frame to one answer: envelope, op lookup, session kind, payload schema, handler.
 * Socket-free, so every rule of docs/protocol.md §5 about requests lives here and nowhere else.
 */
import type { Request, Response } from '../../protocol/envelope.js';
import { EnvelopeError, MAX_FRAME, errorResponse, okResponse, parseRequest } from '../../protocol/envelope.js';
import { ShineError } from '../../protocol/errors.js';
import type { OpCall, OpRegistry, PayloadIssue } from '../api/registry.js';
import { UNFEDERATED_SERVER_LOGIN } from '../config/config.js';
import type { Config } from '../config/config.js';
import type { Logger } from '../log.js';
import type { Counter, Histogram, Metrics } from '../metrics.js';
import type { Session } from '../sessions.js';

export interface DispatchResult {
  response: Response;
  /** The answer's frame: JSON of response, at most MAX_FRAME bytes. */
  text: string;
  /** Work the handler asked to run once the answer has been written. */
  afterAnswer: (() => Promise<void>)[];
}

/** What answer() decides, before it is made a frame. */
type Answered = Omit<DispatchResult, 'text'>;

const MAX_MESSAGE = 500;

export class Dispatcher {
  private readonly opsTotal: Counter;
  private readonly opSeconds: Histogram;

  constructor(
    private readonly registry: OpRegistry,
    private readonly log: Logger,
    metrics: Metrics,
    /** Server ops are refused while serverLogin is the unfederated `local` (docs/protocol.md §5.4); s2sAuth `off` opens them to any socket. */
    private readonly config: Pick<Config, 'serverLogin' | 's2sAuth'>,
  ) {
    this.opsTotal = metrics.counter('ops_total', 'Requests answered, by op and status.', ['op', 'status']);
    this.opSeconds = metrics.histogram('op_duration_seconds', 'Time from frame to answer, by op.', undefined, ['op']);
  }

  /**
   * Answers one text frame. `reject` is an error the transport already decided on (rate limit, size,
   * shutdown): the frame is then only read far enough to name op and requestId in the answer.
   */
  async dispatch(session: Session, text: string, reject?: ShineError): Promise<DispatchResult> {
    const started = performance.now();
    const answered = await this.answer(session, text, reject);
    let { response, afterAnswer } = answered;
    let frame = JSON.stringify(response);
    // No answer may pass a frame (docs/protocol.md §5): a peer's socket would refuse it and drop every call on it,
    // a client's would be cut off as a slow reader past wsMaxBufferedBytes. 413 instead: the request asked for too much.
    if (frame.length > MAX_FRAME / 3 && Buffer.byteLength(frame) > MAX_FRAME) {
      const bytes = Buffer.byteLength(frame);
      this.log.warn('answer larger than a frame', { op: response.op, requestId: response.requestId, bytes });
      response = errorResponse(
        response.op,
        response.requestId,
        new ShineError('TOO_LARGE', `the answer would be ${bytes} bytes, over a frame's ${MAX_FRAME}: ask for less`),
      );
      frame = JSON.stringify(response);
      afterAnswer = []; // the work that follows an answer follows that answer only
    }
    const def = this.registry.get(response.op);
    // Unregistered op names are client-chosen; never let them become label values.
    const op = def ? response.op : response.op === '' ? '_invalid' : '_unknown';
    this.opsTotal.inc({ op, status: response.status });
    this.opSeconds.observe((performance.now() - started) / 1000, { op });
    return { response, text: frame, afterAnswer };
  }

  private async answer(session: Session, text: string, reject: ShineError | undefined): Promise<Answered> {
    let request: Request;
    try {
      request = parseRequest(text);
    } catch (err) {
      if (!(err instanceof EnvelopeError)) throw err;
      return fail(err.partial, reject ?? err.error);
    }
    if (reject) return fail(request, reject);

    const def = this.registry.get(request.op);
    if (!def) return fail(request, new ShineError('UNKNOWN_OP', `unknown op ${request.op}`));
    if (def.auth === 'server' && this.config.serverLogin === UNFEDERATED_SERVER_LOGIN) {
      return fail(
        request,
        new ShineError(
          'LOCAL_SERVER_NOT_CONFIGURED',
          `this server runs as "${UNFEDERATED_SERVER_LOGIN}"; set SHINE_SERVER_LOGIN to federate`,
        ),
      );
    }
    if (def.auth === 'user' && !session.login)
      return fail(request, new ShineError('NOT_AUTHENTICATED', `${request.op} needs AuthLogin first`));
    if (def.auth === 'server' && this.config.s2sAuth === 'required' && !session.serverLogin)
      return fail(request, new ShineError('NOT_AUTHENTICATED', `${request.op} needs a server session`));
    const checked = def.check(request.payload);
    if (!checked.ok) return fail(request, new ShineError('BAD_FIELDS', describeIssues(checked.issues)));

    const call = new RequestCall(this.log, request, session);
    try {
      const payload = await checked.run(session, call);
      return { response: okResponse(request.op, request.requestId, payload ?? {}), afterAnswer: call.after };
    } catch (err) {
      if (err instanceof ShineError) return fail(request, err);
      call.log.error('op failed', { login: session.login, err });
      return fail(request, new ShineError('INTERNAL', 'internal error'));
    }
  }
}

/**
 * The call a handler gets. A class, not an object literal with a getter: a literal's getter is a new
 * closure each request, and V8 keeps each such accessor in the old generation, where it held the whole
 * request (the closure's scope) through every young-generation collection until the next full one
 * (docs/performance.md, twenty-sixth session).
 */
class RequestCall implements OpCall {
  readonly after: (() => Promise<void>)[] = [];
  /** Made on first use only: most requests never log. */
  private logger: Logger | undefined;

  constructor(
    private readonly base: Logger,
    private readonly request: Request,
    private readonly session: Session,
  ) {}

  afterAnswer(fn: () => Promise<void>): void {
    this.after.push(fn);
  }

  get log(): Logger {
    return (this.logger ??= this.base.child({
      requestId: this.request.requestId,
      op: this.request.op,
      sessionId: this.session.id,
    }));
  }
}

function fail(to: { op?: string | undefined; requestId?: string | undefined }, err: ShineError): Answered {
  return { response: errorResponse(to.op ?? '', to.requestId ?? '', err), afterAnswer: [] };
}

/** "payload.field: message; …", short enough to send back. */
function describeIssues(issues: readonly PayloadIssue[]): string {
  const where = (i: PayloadIssue): string[] => (i.path ?? []).map((p) => String(typeof p === 'object' ? p.key : p));
  const text = issues.map((i) => `${['payload', ...where(i)].join('.')}: ${i.message}`).join('; ');
  return text.length > MAX_MESSAGE ? text.slice(0, MAX_MESSAGE - 1) + '…' : text;
}
