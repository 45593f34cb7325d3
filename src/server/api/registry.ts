/**
 * The one registry of operations. Each op declares its payload schema and the kind of session it
 * needs next to its handler; the transport validates both before the handler runs.
 */
import type { z } from 'zod';
import type { Logger } from '../log.js';
import type { Session } from '../sessions.js';

/** none: any socket; user: after AuthLogin; server: a server session (ServerAuth, or trusted when s2sAuth is off). */
export type AuthKind = 'none' | 'user' | 'server';

/** Per-request services the transport gives a handler. */
export interface OpCall {
  /** Runs fn once the answer frame has been written to the socket (e.g. replay after AuthLogin). */
  afterAnswer(fn: () => Promise<void>): void;
  /** The server's logger with this request's requestId, op and sessionId in every entry. */
  readonly log: Logger;
}

export interface OpDef<S extends z.ZodType = z.ZodType> {
  auth: AuthKind;
  schema: S;
  handle(payload: z.infer<S>, session: Session, call: OpCall): Promise<unknown>;
}

/** Helper that keeps the payload type tied to the schema. */
export function op<S extends z.ZodType>(def: OpDef<S>): OpDef<S> {
  return def;
}

export type OpGroup = Record<string, OpDef>;

export class OpRegistry {
  private readonly ops = new Map<string, OpDef>();

  add(group: OpGroup): this {
    for (const [name, def] of Object.entries(group)) {
      if (this.ops.has(name)) throw new Error(`op ${name} registered twice`);
      this.ops.set(name, def);
    }
    return this;
  }

  get(name: string): OpDef | undefined {
    return this.ops.get(name);
  }

  names(): string[] {
    return [...this.ops.keys()];
  }
}
