/** What the push area needs from the database (docs/protocol.md §5.5, §9): subscriptions, their health, VAPID keys. */

/** One stored WebPush subscription with its health. Keys are unpadded base64url. */
export interface PushSubscriptionRow {
  endpoint: string;
  ownerLogin: string;
  deviceId: string;
  p256dh: string;
  auth: string;
  createdAtMs: number;
  updatedAtMs: number;
  lastSuccessAtMs: number | null;
  lastErrorAtMs: number | null;
  /** The push service's status code (`"410"`), or `"network"` / `"timeout"`. */
  lastError: string | null;
  consecutiveFailures: number;
}

export interface UpsertSubscription {
  endpoint: string;
  ownerLogin: string;
  deviceId: string;
  p256dh: string;
  auth: string;
  nowMs: number;
  /** The owner keeps at most this many; the least recently upserted beyond it are deleted. */
  maxPerOwner: number;
}

export interface PushStore {
  /** Inserts or replaces the subscription of this endpoint; returns how many of the owner's were dropped. */
  upsertSubscription(input: UpsertSubscription): Promise<{ dropped: number }>;
  /** Deletes the endpoint if owner holds it (owner null: whoever holds it); 1 when deleted. */
  deleteSubscription(endpoint: string, owner: string | null): Promise<number>;
  getSubscription(endpoint: string): Promise<PushSubscriptionRow | null>;
  /** The owner's subscriptions, least recently upserted first. */
  subscriptionsOf(owner: string): Promise<PushSubscriptionRow[]>;
  /** Records one answer of the push service for the endpoint (nothing when it is gone). */
  recordPushResult(endpoint: string, nowMs: number, error: string | null): Promise<void>;
  /**
   * Stores value under a server_meta key unless one is there; returns the one kept. Processes that
   * start together on one database thus agree on a single value.
   */
  keepMeta(key: string, value: string): Promise<string>;
}
