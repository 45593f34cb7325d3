/** The messages of one open dialog and the tick rules of docs/web-client.md; pure, so Node tests run it too. */
import type { DeliveryState, HistoryEntry } from '../../src/client/index.js';

/** What the sender sees on an own message: the delivery state, or `read` once a receipt arrived. */
export type Tick = DeliveryState | 'read';

/** The accessible text of each tick (docs/web-client.md: an exact contract). */
export const TICK_TEXT: Record<Tick, string> = {
  accepted: 'Sent',
  delivered: 'Delivered',
  read: 'Read',
  failed: 'Message not delivered',
};

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
      });
    }
    // A new revision keeps the read time: a receipt names the message, not one of its revisions.
    this.byKey.set(m.baseKey, { ...m, readAtMs: m.readAtMs ?? old?.readAtMs ?? null });
    this.ordered = null;
    return true;
  }

  setDeliveryState(baseKey: string, state: DeliveryState): boolean {
    return this.patch(baseKey, { deliveryState: state });
  }

  markRead(baseKey: string, readAtMs: number): boolean {
    const m = this.byKey.get(baseKey);
    if (!m || m.readAtMs !== null) return false;
    return this.patch(baseKey, { readAtMs });
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
