/** The messages of one open dialog and the tick rules of docs/web-client.md; pure, so Node tests run it too. */
import type { DeliveryState, DeliveryVerdict, HistoryEntry } from '../../src/client/index.js';

/** What the sender sees on an own message: the delivery state, or `read` once a receipt arrived. */
export type Tick = DeliveryState | 'read';

/** The accessible text of each tick (docs/web-client.md: an exact contract). */
export const TICK_TEXT: Record<Tick, string> = {
  accepted: 'Sent',
  delivered: 'Delivered',
  read: 'Read',
  failed: 'Message not delivered',
};

/**
 * What backs a delivered or read tick (docs/web-client.md, "Verified ticks"): a signature the SDK
 * checked, or why there is none.
 */
export interface Evidence {
  verified: boolean;
  /** Why it is not verified; null when verified. */
  why: string | null;
  /** Who signed: the recipient's server (delivery) or the reader (read). */
  by: string | null;
  /** When the server stored the copy (delivery) or the reader read it (read). */
  atMs: number | null;
  /** Delivery only: the signed hash was compared with the bytes this device sent. */
  exact: boolean;
}

/** The evidence of a delivery from the SDK's verdict. */
export function deliveryEvidence(v: DeliveryVerdict): Evidence {
  return {
    verified: v.verified,
    why: v.whyUnverified,
    by: v.proof?.serverLogin ?? null,
    atMs: v.proof?.storedAtMs ?? null,
    exact: v.verified && v.hashChecked,
  };
}

/** A read time the server reports: history carries no receipt container, so nothing signed backs it. */
export function reportedRead(reader: string, readAtMs: number): Evidence {
  return {
    verified: false,
    why: `the server reports it; ${reader}'s signed receipt has not reached this device`,
    by: null,
    atMs: readAtMs,
    exact: false,
  };
}

/** A read receipt the SDK opened: signed by the reader (its profile key). */
export function signedRead(reader: string, readAtMs: number): Evidence {
  return { verified: true, why: null, by: reader, atMs: readAtMs, exact: false };
}

/** One logical message (both copies share its baseKey) as the chat shows it. */
export interface ChatMessage {
  baseKey: string;
  fromLogin: string;
  toLogin: string;
  timeMs: number;
  nonce: number;
  mine: boolean;
  /** Null when the copy could not be opened; problem then says why. */
  text: string | null;
  problem: string | null;
  revisionTimeMs: number;
  /** Own messages only. */
  deliveryState: DeliveryState | null;
  /** Own message: when the peer read it; peer's message: when this user's receipt says so. */
  readAtMs: number | null;
  /** Own message: what backs `delivered` (null while unchecked). */
  delivery: Evidence | null;
  /** Own message: what backs `read` (null while unread). */
  read: Evidence | null;
}

/** The parts of a baseKey `from|to|timeMs|nonce`. */
export function parseBaseKey(baseKey: string): Pick<ChatMessage, 'fromLogin' | 'toLogin' | 'timeMs' | 'nonce'> {
  const [fromLogin = '', toLogin = '', timeMs = '', nonce = ''] = baseKey.split('|');
  return { fromLogin, toLogin, timeMs: Number(timeMs), nonce: Number(nonce) };
}

/** The tick of an own message (null for the peer's): a read receipt wins over any delivery state. */
export function tickOf(m: ChatMessage): Tick | null {
  if (!m.mine) return null;
  if (m.readAtMs !== null) return 'read';
  return m.deliveryState ?? 'accepted';
}

/** The evidence behind a tick: the read's for `read`, the delivery's for `delivered`, none otherwise. */
export function evidenceOf(m: ChatMessage): Evidence | null | undefined {
  const tick = tickOf(m);
  if (tick === 'read') return m.read;
  if (tick === 'delivered') return m.delivery;
  return undefined;
}

const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });

/** A time of day as the chat shows it (hours and minutes, in the browser's locale). */
export function formatClock(ms: number): string {
  return clock.format(ms);
}

/** The tick's explanation (hover and tap), or null for ticks without one (sent, failed). */
export function explainTick(m: ChatMessage, time: (ms: number) => string = formatClock): string | null {
  const peer = m.toLogin;
  const tick = tickOf(m);
  const delivered = (d: Evidence | null): string => {
    if (!d) return `Delivered; checking the proof from ${peer}'s server…`;
    if (!d.verified) return `Delivered, but no proof from ${peer}'s server could be checked: ${d.why ?? 'unknown'}`;
    const at = d.atMs === null ? '' : ` at ${time(d.atMs)}`;
    return `Signed by ${peer}'s server ${d.by ?? '?'}${at}: it stored this ${d.exact ? 'exact ' : ''}message`;
  };
  if (tick === 'delivered') return delivered(m.delivery);
  if (tick !== 'read') return null;
  const r = m.read;
  const at = r?.atMs === null || r?.atMs === undefined ? '' : ` at ${time(r.atMs)}`;
  const read = r?.verified
    ? `Read by ${peer}${at}, signed by ${r.by ?? peer}`
    : `Read by ${peer}${at}, not signed: ${r?.why ?? 'no receipt'}`;
  // A read message was delivered: what backs that is said too, once known.
  return m.delivery ? `${read}. ${delivered(m.delivery)}` : read;
}

/** The stronger of two pieces of evidence for the same revision: a verified one is never given up. */
function stronger(old: Evidence | null, next: Evidence | null): Evidence | null {
  if (!next || !old) return next ?? old;
  if (old.verified && !next.verified) return old;
  // The same evidence again keeps the old object, so nothing counts as changed.
  const same = (Object.keys(next) as (keyof Evidence)[]).every((k) => next[k] === old[k]);
  return same ? old : next;
}

/** A history item as a chat message of the session user `me`. */
export function fromHistory(item: HistoryEntry, me: string): ChatMessage {
  const mine = item.fromLogin === me;
  return {
    ...parseBaseKey(item.baseKey),
    baseKey: item.baseKey,
    mine,
    text: item.text,
    problem: item.problem,
    revisionTimeMs: item.revisionTimeMs,
    deliveryState: mine ? (item.deliveryState ?? 'accepted') : null,
    readAtMs: item.readAtMs,
    delivery: mine ? deliveryEvidence(item) : null,
    read: mine && item.readAtMs !== null ? reportedRead(item.toLogin, item.readAtMs) : null,
  };
}

/**
 * The messages of one dialog, keyed by baseKey. Every change returns whether anything changed, so the
 * view re-renders only then; events can arrive twice (replay after reconnect) and must change nothing.
 */
export class ChatLog {
  private readonly byKey = new Map<string, ChatMessage>();
  private ordered: ChatMessage[] | null = [];

  /** Adds a message or a newer revision of it; an older or equal revision changes nothing. */
  upsert(m: ChatMessage): boolean {
    const old = this.byKey.get(m.baseKey);
    if (old && old.revisionTimeMs > m.revisionTimeMs) return false;
    if (old && old.revisionTimeMs === m.revisionTimeMs && old.text === m.text) {
      // The same revision again may still carry newer metadata (a page loaded after a reconnect).
      // States of one revision only move forward (accepted → delivered | failed): a page fetched before
      // a live DmDeliveryStateChanged must not turn a tick back.
      return this.patch(m.baseKey, {
        deliveryState: m.deliveryState === 'accepted' ? old.deliveryState : (m.deliveryState ?? old.deliveryState),
        readAtMs: m.readAtMs ?? old.readAtMs,
        delivery: stronger(old.delivery, m.delivery),
        read: stronger(old.read, m.read),
      });
    }
    // A new revision keeps the read time: a receipt names the message, not one of its revisions.
    // Its delivery needs a proof of its own.
    this.byKey.set(m.baseKey, {
      ...m,
      readAtMs: m.readAtMs ?? old?.readAtMs ?? null,
      read: m.read ?? old?.read ?? null,
    });
    this.ordered = null;
    return true;
  }

  setDeliveryState(baseKey: string, state: DeliveryState): boolean {
    return this.patch(baseKey, { deliveryState: state });
  }

  /** The checked evidence of a delivery of revision revisionTimeMs (ignored once the message changed). */
  setDelivery(baseKey: string, revisionTimeMs: number, evidence: Evidence): boolean {
    const m = this.byKey.get(baseKey);
    if (!m || m.revisionTimeMs !== revisionTimeMs) return false;
    return this.patch(baseKey, { delivery: stronger(m.delivery, evidence) });
  }

  /** The first read time counts; a later signed receipt still backs it. */
  markRead(baseKey: string, readAtMs: number, evidence: Evidence | null = null): boolean {
    const m = this.byKey.get(baseKey);
    if (!m) return false;
    if (m.readAtMs !== null) return this.patch(baseKey, { read: stronger(m.read, evidence) });
    return this.patch(baseKey, { readAtMs, read: evidence });
  }

  remove(baseKey: string): boolean {
    this.ordered = null;
    return this.byKey.delete(baseKey);
  }

  /** Removes every message with timeMs ≤ beforeMs (a conversation delete). */
  removeThrough(beforeMs: number): boolean {
    let changed = false;
    for (const [key, m] of this.byKey) if (m.timeMs <= beforeMs) changed = this.byKey.delete(key) || changed;
    if (changed) this.ordered = null;
    return changed;
  }

  get(baseKey: string): ChatMessage | undefined {
    return this.byKey.get(baseKey);
  }

  /** Oldest first, as the chat shows them; the same array until something changes. */
  list(): readonly ChatMessage[] {
    return (this.ordered ??= [...this.byKey.values()].sort(
      (a, b) => a.timeMs - b.timeMs || (a.baseKey < b.baseKey ? -1 : a.baseKey > b.baseKey ? 1 : 0),
    ));
  }

  private patch(baseKey: string, changes: Partial<ChatMessage>): boolean {
    const m = this.byKey.get(baseKey);
    if (!m) return false;
    const next = { ...m, ...changes };
    if ((Object.keys(changes) as (keyof ChatMessage)[]).every((k) => next[k] === m[k])) return false;
    this.byKey.set(baseKey, next);
    this.ordered = null;
    return true;
  }
}
