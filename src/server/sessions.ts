/** Open WebSocket sessions and the fan-out of events to a user's sessions. */
import type { EventFrame } from '../protocol/envelope.js';

export interface Session {
  readonly id: string;
  /** The source address of the connection (per-address limits, docs/protocol.md §5). */
  readonly remoteAddress: string;
  /** Set by AuthLogin. */
  login: string | null;
  deviceId: string | null;
  /** Set by ServerAuth (or trusted from payloads when s2sAuth is off). */
  serverLogin: string | null;
  /** The last challenge issued on this socket; consumed by AuthLogin. */
  challenge: { challengeB64: string; expiresAtMs: number } | null;
  /** Queues a frame; false when the socket is gone. */
  send(frame: object): boolean;
  /** Queues a frame once the send buffer has room for it (bulk sends); false when the socket is gone. */
  sendPaced(frame: object): Promise<boolean>;
}

/** A session after AuthLogin: bound to one login and device. */
export type UserSession = Session & { readonly login: string; readonly deviceId: string };

/**
 * A session allowed to call server ops. serverLogin is set by ServerAuth; it is null only when s2sAuth
 * is `off`, where such ops trust the payload's sourceServerLogin instead (docs/protocol.md §5.4).
 */
export type ServerSession = Session;

export function isUserSession(session: Session): session is UserSession {
  return session.login !== null && session.deviceId !== null;
}

/** Told when a session becomes a user's session and when a bound session ends (presence across processes). */
export interface SessionWatcher {
  bound(session: UserSession): void;
  ended(session: UserSession): void;
}

export class SessionHub {
  private readonly byId = new Map<string, Session>();
  private readonly byLogin = new Map<string, Set<Session>>();
  private readonly watchers: SessionWatcher[] = [];

  watch(watcher: SessionWatcher): void {
    this.watchers.push(watcher);
  }

  add(session: Session): void {
    this.byId.set(session.id, session);
  }

  /** Makes the session reachable as login's session (after AuthLogin); false if it has closed meanwhile. */
  bindUser(session: Session, login: string): boolean {
    // A socket may close while AuthLogin awaits the store; binding it then would leak it into byLogin.
    if (this.byId.get(session.id) !== session) return false;
    let set = this.byLogin.get(login);
    if (!set) this.byLogin.set(login, (set = new Set()));
    set.add(session);
    if (isUserSession(session)) for (const w of this.watchers) w.bound(session);
    return true;
  }

  remove(session: Session): void {
    this.byId.delete(session.id);
    if (session.login) {
      const set = this.byLogin.get(session.login);
      const was = set?.delete(session) ?? false;
      if (set?.size === 0) this.byLogin.delete(session.login);
      if (was && isUserSession(session)) for (const w of this.watchers) w.ended(session);
    }
  }

  sessionsOf(login: string): Session[] {
    return [...(this.byLogin.get(login) ?? [])];
  }

  /** Sends an event to every session of login except one; returns how many got it. */
  sendToUser(login: string, frame: EventFrame, exceptSessionId?: string): number {
    let n = 0;
    for (const s of this.byLogin.get(login) ?? []) {
      if (s.id !== exceptSessionId && s.send(frame)) n++;
    }
    return n;
  }

  get size(): number {
    return this.byId.size;
  }

  all(): Session[] {
    return [...this.byId.values()];
  }

  /** Every session bound to a user (after AuthLogin). */
  userSessions(): UserSession[] {
    return [...this.byLogin.values()].flatMap((set) => [...set].filter(isUserSession));
  }
}
