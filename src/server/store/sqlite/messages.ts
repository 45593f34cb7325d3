/**
 * The messages area on SQLite: stored copies (signed_messages), tombstones, and the outbox rows and
 * delivery rows that follow a copy in the same transaction. What a copy does is decided by ../rules.ts.
 */
import type { Container } from '../../../protocol/container.js';
import type { HistoryItem } from '../../../protocol/ops.js';
import type { HistoryDbRow, MessageDbRow } from '../rows.js';
import { COPY_COLUMNS, copyRowValues, HISTORY_PROOF, toHistoryPage, toStoredCopy } from '../rows.js';
import type { CopyEffect, StoredRevision } from '../rules.js';
import { copyChanged, copyLookups, outboxRowFor, planCopy } from '../rules.js';
import type {
  ConversationRow,
  CopyResult,
  HistoryQuery,
  MessageStore,
  StoreCopyInput,
  StoredCopy,
  StorePairInput,
  StorePairResult,
  OutboxRow,
} from '../types.js';
import type { SqliteDb } from './db.js';
import { SqliteArea } from './db.js';
import { OUTBOX_ROW, outboxRowKey, upsertOutbox } from './outbox.js';
import { deliveryStateOf, startDeliveryTx } from './delivery.js';

/** The revision and storedAtMs of owner's stored copy messageKey, or null; also read by the devices area. */
export function copyRevision(
  db: SqliteDb,
  owner: string,
  messageKey: string,
): (StoredRevision & { storedAtMs: number }) | null {
  const row = db
    .sql(
      'SELECT revision_time_ms, reencrypted_at_ms, stored_at_ms FROM signed_messages WHERE message_key = ? AND owner_login = ?',
    )
    .get(messageKey, owner) as
    { revision_time_ms: number; reencrypted_at_ms: number; stored_at_ms: number } | undefined;
  return row
    ? { revisionTimeMs: row.revision_time_ms, reencryptedAtMs: row.reencrypted_at_ms, storedAtMs: row.stored_at_ms }
    : null;
}

export class SqliteMessageStore extends SqliteArea implements MessageStore {
  storePair(input: StorePairInput): Promise<StorePairResult> {
    return this.db.write(() => {
      const { incoming, outgoing, nowMs } = input;
      const replay = !input.silent;
      // The sending device's own copy counts as acknowledged by it (docs/protocol.md §5.3), without a row of its own.
      const origin = input.senderDevice?.login === outgoing.fromLogin ? input.senderDevice.deviceId : null;
      const out = this.storeCopyTx(outgoing, nowMs, replay, origin);
      const inc = this.storeCopyTx(incoming, nowMs, replay, null);
      this.upsertOutbox(outboxRowFor(out, outgoing, [incoming.bytes, outgoing.bytes], input.outbox, nowMs));
      this.upsertOutbox(outboxRowFor(inc, incoming, [incoming.bytes], input.outbox, nowMs));
      if (copyChanged(out) && input.delivery) startDeliveryTx(this.db, outgoing, out.messageKey, input.delivery, nowMs);
      return { incoming: inc, outgoing: out, deliveryState: deliveryStateOf(this.db, out.messageKey) };
    });
  }

  storeCopy(input: StoreCopyInput): Promise<CopyResult> {
    return this.db.write(() => {
      const c = input.copy;
      const r = this.storeCopyTx(c, input.nowMs, !input.silent, null);
      this.upsertOutbox(outboxRowFor(r, c, [c.bytes], input.outbox, input.nowMs));
      return r;
    });
  }

  /** Gathers the facts rules.planCopy needs and applies its plan. Runs inside a transaction. */
  private storeCopyTx(c: Container, nowMs: number, replay: boolean, originDevice: string | null): CopyResult {
    const look = copyLookups(c);
    const conv = look.conversationTombstone
      ? (this.sql(
          `SELECT delete_before_ms FROM dm_tombstones WHERE owner_login = ? AND kind = 'conversation' AND target = ?`,
        ).get(look.owner, look.peer) as { delete_before_ms: number } | undefined)
      : undefined;
    const messageTombstoned =
      look.messageTombstone &&
      this.sql(`SELECT 1 FROM dm_tombstones WHERE owner_login = ? AND kind = 'message' AND target = ?`).get(
        look.owner,
        look.baseKey,
      ) !== undefined;
    const receipt = look.earliestReceipt
      ? (this.sql(
          'SELECT MIN(read_at_ms) AS at FROM signed_messages WHERE owner_login = ? AND target_base_key = ? AND message_type IN (3, 4)',
        ).get(look.owner, look.baseKey) as { at: number | null })
      : { at: null };
    const plan = planCopy(
      c,
      {
        conversationDeleteBeforeMs: conv?.delete_before_ms ?? null,
        messageTombstoned,
        existing: copyRevision(this.db, look.owner, look.messageKey),
        earliestReceiptReadAtMs: receipt.at,
      },
      { nowMs, replay, originDevice },
    );
    if (plan.write === null) return plan.result;
    const row = plan.row;
    const blob = Buffer.from(row.blob.buffer, row.blob.byteOffset, row.blob.byteLength);
    if (plan.write === 'update') {
      this.sql(
        `UPDATE signed_messages SET revision_time_ms = ?, reencrypted_at_ms = ?, stored_at_ms = ?, blob = ?, replay = ?,
           origin_device = ?, read_at_ms = CASE WHEN message_type IN (3, 4) THEN ? ELSE read_at_ms END
         WHERE message_key = ?`,
      ).run(
        row.revisionTimeMs,
        row.reencryptedAtMs,
        row.nowMs,
        blob,
        row.replay ? 1 : 0,
        row.originDevice,
        row.readAtMs,
        row.messageKey,
      );
    } else {
      const values = copyRowValues(row);
      values[13] = row.replay ? 1 : 0;
      values[15] = blob;
      this.sql(
        `INSERT INTO signed_messages (${COPY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(...values);
    }
    if (plan.effect) this.applyEffect(plan.effect, nowMs);
    return plan.result;
  }

  private applyEffect(e: CopyEffect, nowMs: number): void {
    if (e.kind === 'markRead') {
      this.sql(
        'UPDATE signed_messages SET read_at_ms = ? WHERE message_key = ? AND owner_login = ? AND (read_at_ms IS NULL OR read_at_ms > ?)',
      ).run(e.readAtMs, e.targetMessageKey, e.owner, e.readAtMs);
    } else if (e.kind === 'deleteMessage') {
      this.sql(
        `INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms) VALUES (?, 'message', ?, 0, ?)
         ON CONFLICT DO NOTHING`,
      ).run(e.owner, e.targetBaseKey, nowMs);
      const receipts = this.sql(
        'SELECT message_key FROM signed_messages WHERE owner_login = ? AND target_base_key = ? AND message_type IN (3, 4)',
      ).all(e.owner, e.targetBaseKey) as { message_key: string }[];
      this.deleteCopiesTx(e.owner, [
        `${e.targetBaseKey}|1`,
        `${e.targetBaseKey}|2`,
        ...receipts.map((r) => r.message_key),
      ]);
    } else {
      this.sql(
        `INSERT INTO dm_tombstones (owner_login, kind, target, delete_before_ms, created_at_ms) VALUES (?, 'conversation', ?, ?, ?)
         ON CONFLICT (owner_login, kind, target) DO UPDATE SET delete_before_ms = MAX(delete_before_ms, excluded.delete_before_ms)`,
      ).run(e.owner, e.peer, e.deleteBeforeMs, nowMs);
      // The dialog's copies of types 1 to 6 up to the time, read through indexes of this dialog alone (not a
      // walk over every copy the owner has, inside the write transaction): its texts through the history
      // index, its receipts and deletes through the target index, since each names a message of this
      // dialog, whose base key starts with the two logins in one order or the other.
      const texts = this.sql(
        `SELECT message_key FROM signed_messages INDEXED BY signed_messages_history
         WHERE owner_login = ? AND peer_login = ? AND message_type IN (1, 2) AND time_ms <= ?`,
      ).all(e.owner, e.peer, e.deleteBeforeMs) as { message_key: string }[];
      const marks = [`${e.owner}|${e.peer}|`, `${e.peer}|${e.owner}|`].flatMap(
        (prefix) =>
          this.sql(
            `SELECT message_key FROM signed_messages INDEXED BY signed_messages_target
             WHERE owner_login = ? AND target_base_key IS NOT NULL AND target_base_key >= ? AND target_base_key < ?
               AND peer_login = ? AND message_type BETWEEN 3 AND 6 AND time_ms <= ?`,
            // Every key with the prefix, and nothing else: '}' follows '|'.
          ).all(e.owner, prefix, `${prefix.slice(0, -1)}}`, e.peer, e.deleteBeforeMs) as { message_key: string }[],
      );
      this.deleteCopiesTx(
        e.owner,
        [...texts, ...marks].map((r) => r.message_key),
      );
    }
  }

  /** Removes owner's copies and their outbox rows (an owner's outbox key is its copy's key). */
  private deleteCopiesTx(owner: string, keys: readonly string[]): void {
    for (const key of keys) {
      this.sql('DELETE FROM signed_messages WHERE message_key = ? AND owner_login = ?').run(key, owner);
      this.sql(`DELETE FROM dm_sync_outbox AS o WHERE ${OUTBOX_ROW}`).run(...outboxRowKey(owner, key));
    }
  }

  private upsertOutbox(row: OutboxRow | null): void {
    if (row) upsertOutbox(this.db, row);
  }

  async getCopy(messageKey: string): Promise<StoredCopy | null> {
    const row = this.sql('SELECT * FROM signed_messages WHERE message_key = ?').get(messageKey) as
      MessageDbRow | undefined;
    return row ? toStoredCopy(row) : null;
  }

  async getDirectMessages(q: HistoryQuery): Promise<{ items: HistoryItem[]; hasMore: boolean }> {
    const first = q.beforeTimeMs === 0 && q.beforeMessageKey === '';
    const rows = this.sql(
      `SELECT m.*, d.state AS delivery_state, ${HISTORY_PROOF} FROM signed_messages m
         LEFT JOIN dm_delivery_state d ON m.message_type = 2 AND d.outgoing_key = m.message_key
       WHERE m.owner_login = ? AND m.peer_login = ? AND m.message_type IN (1, 2) AND m.time_ms <= ?
         AND (? = 0 OR m.time_ms < ? OR (m.time_ms = ? AND m.message_key < ?))
       ORDER BY m.time_ms DESC, m.message_key DESC LIMIT ?`,
    ).all(
      q.owner,
      q.peer,
      // The bound the index seeks to (the OR after it alone would read the conversation from its newest).
      first ? Number.MAX_SAFE_INTEGER : q.beforeTimeMs,
      first ? 0 : 1,
      q.beforeTimeMs,
      q.beforeTimeMs,
      q.beforeMessageKey,
      q.limit + 1,
    ) as HistoryDbRow[];
    return toHistoryPage(rows, q.limit);
  }

  async getConversations(owner: string, limit: number): Promise<ConversationRow[]> {
    // The newest message per peer in history order (timeMs DESC, messageKey DESC), so ties are decided
    // as GetDirectMessages decides them. The owner's peers are walked one seek each through the history
    // index (the next peer after p), each peer's newest copy is the first of its part of that index, and
    // its unread copies are counted in the unread index (migration 12): the cost follows the owner's
    // peers and unread copies, not every copy the owner has.
    const rows = this.sql(
      `WITH RECURSIVE peers(p) AS (
         SELECT (SELECT MIN(peer_login) FROM signed_messages WHERE owner_login = @owner AND message_type IN (1, 2))
         UNION ALL
         SELECT (SELECT MIN(peer_login) FROM signed_messages
                 WHERE owner_login = @owner AND message_type IN (1, 2) AND peer_login > p)
         FROM peers WHERE p IS NOT NULL)
       SELECT p AS peer_login, n.time_ms AS last_time_ms, n.message_key,
              (SELECT COUNT(*) FROM signed_messages u INDEXED BY signed_messages_unread
               WHERE u.owner_login = @owner AND u.peer_login = p AND u.message_type = 1 AND u.read_at_ms IS NULL) AS unread
       FROM peers JOIN signed_messages n ON n.message_key = (
         SELECT message_key FROM signed_messages
         WHERE owner_login = @owner AND peer_login = p AND message_type IN (1, 2)
         ORDER BY time_ms DESC, message_key DESC LIMIT 1)
       WHERE p IS NOT NULL ORDER BY last_time_ms DESC, peer_login LIMIT @limit`,
    ).all({ owner, limit }) as { peer_login: string; last_time_ms: number; message_key: string; unread: number }[];
    return rows.map((r) => ({
      peerLogin: r.peer_login,
      lastTimeMs: r.last_time_ms,
      lastMessageKey: r.message_key,
      unreadCount: r.unread,
    }));
  }
}
