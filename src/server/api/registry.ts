/**
 * The one registry of operations. An op's name picks its payload schema, its payload type and its
 * answer type (src/protocol/ops.ts); its session kind is declared next to its handler, and the
 * dispatcher checks both before the handler runs.
 *
 * How to add an op:
 * 1. In src/protocol/ops.ts add its payload schema to `opSchemas` and its answer schema, under the
 *    same name, to `opAnswerSchemas` (the typecheck fails while one of the two is missing).
 * 2. In the api/ file of its group (one file per group, e.g. api/dm.ts) register it:
 *    `r.add('MyOp', { auth: 'user', handle: (payload, session) => service.myOp(payload, session) })`.
 *    payload is OpPayload<'MyOp'>, the handler must resolve to OpAnswer<'MyOp'>, and session is a
 *    UserSession (login, deviceId known) for `user` ops, a ServerSession for `server` ops.
 * 3. A new group is wired once in the composition root (app.ts), like the others.
 * 4. Document it in docs/protocol.md; test/unit/registry.test.ts checks every schema has its handler.
 */
import type { OpAnswer, OpName, OpPayload } from '../../protocol/ops.js';
import { payloadSchema } from '../../protocol/ops.js';
import type { ServerSession, Session, UserSession } from '../sessions.js';
import { isUserSession } from '../sessions.js';
import type { Logger } from '../log.js';

/** none: any socket; user: after AuthLogin; server: a server session (ServerAuth, or trusted when s2sAuth is off). */
export type AuthKind = 'none' | 'user' | 'server';

/** The session a handler of each kind receives. */
export type SessionOf<A extends AuthKind> = A extends 'user'
  ? UserSession
  : A extends 'server'
    ? ServerSession
    : Session;

/** Per-request services the transport gives a handler. */
export interface OpCall {
  /** Runs fn once the answer frame has been written to the socket (e.g. replay after AuthLogin). */
  afterAnswer(fn: () => Promise<void>): void;
  /** The server's logger with this request's requestId, op and sessionId in every entry. */
  readonly log: Logger;
}

export interface OpHandler<K extends OpName, A extends AuthKind> {
  auth: A;
  handle(payload: OpPayload<K>, session: SessionOf<A>, call: OpCall): Promise<OpAnswer<K>>;
}

/** An op as the dispatcher sees it: the session kind to check, then the payload check that yields the call. */
export interface RegisteredOp {
  name: OpName;
  auth: AuthKind;
  /** Validates the payload against the op's schema; only a valid payload gives a handler to run. */
  check(
    payload: unknown,
  ):
    | { ok: true; run(session: Session, call: OpCall): Promise<unknown> }
    | { ok: false; issues: readonly PayloadIssue[] };
}

/** What is wrong with a payload: a message and where (as zod reports it, through Standard Schema). */
export interface PayloadIssue {
  readonly message: string;
  readonly path?: readonly (PropertyKey | { readonly key: PropertyKey })[] | undefined;
}

export class OpRegistry {
  private readonly ops = new Map<string, RegisteredOp>();

  /** Registers op `name`: its schema and types come from the name. */
  add<K extends OpName, A extends AuthKind>(name: K, def: OpHandler<K, A>): this {
    if (this.ops.has(name)) throw new Error(`op ${name} registered twice`);
    const schema = payloadSchema(name);
    this.ops.set(name, {
      name,
      auth: def.auth,
      check(payload) {
        // Standard Schema's validate, not safeParse: a failed safeParse answers with a getter made per call,
        // which V8 kept in its old generation, holding the bad request through every young-generation
        // collection until the next full one (docs/performance.md, twenty-sixth session).
        const parsed = schema['~standard'].validate(payload);
        if (parsed instanceof Promise) throw new Error(`${name}: payload schema is asynchronous`);
        if (parsed.issues) return { ok: false, issues: parsed.issues };
        return {
          ok: true,
          run: (session, call) => {
            // The dispatcher answered NOT_AUTHENTICATED already; this keeps the handler's session type honest.
            if (!sessionFits(def.auth, session)) throw new Error(`${name}: not a ${def.auth} session`);
            return def.handle(parsed.value, session, call);
          },
        };
      },
    });
    return this;
  }

  get(name: string): RegisteredOp | undefined {
    return this.ops.get(name);
  }

  names(): string[] {
    return [...this.ops.keys()];
  }
}

/** True when session may run an op of kind auth (server ops are further gated by config in the dispatcher). */
function sessionFits<A extends AuthKind>(auth: A, session: Session): session is SessionOf<A> {
  return auth !== 'user' || isUserSession(session);
}
