/** Database rows as both dialects read them (integers as numbers, blobs as bytes), and their mapping. */
import type { DeliveryState } from '../../protocol/ops.js';
import type { DeliveryRow, StoredCopy } from './types.js';

/** A signed_messages row as both dialects read it (integers as numbers, the blob as bytes). */
export interface MessageDbRow {
  message_key: string;
  base_key: string;
  owner_login: string;
  peer_login: string;
  message_type: number;
  time_ms: number;
  nonce: number;
  revision_time_ms: number;
  reencrypted_at_ms: number;
  created_at_ms: number;
  stored_at_ms: number;
  read_at_ms: number | null;
  blob: Uint8Array;
}

export function toStoredCopy(r: MessageDbRow): StoredCopy {
  const [fromLogin, toLogin] = r.message_type % 2 === 0 ? [r.owner_login, r.peer_login] : [r.peer_login, r.owner_login];
  return {
    messageKey: r.message_key,
    baseKey: r.base_key,
    messageType: r.message_type,
    fromLogin,
    toLogin,
    timeMs: r.time_ms,
    revisionTimeMs: r.revision_time_ms,
    reencryptedAtMs: r.reencrypted_at_ms,
    storedAtMs: r.stored_at_ms,
    blob: new Uint8Array(r.blob.buffer, r.blob.byteOffset, r.blob.byteLength),
  };
}

export interface DeliveryDbRow {
  outgoing_key: string;
  base_key: string;
  sender_login: string;
  recipient_login: string;
  revision_time_ms: number;
  reencrypted_at_ms: number;
  state: DeliveryState;
  attempt: number;
  accepted_at_ms: number;
  next_attempt_at_ms: number | null;
  lease_until_ms: number | null;
  row_version: number;
  last_error: string | null;
}

export function toDeliveryRow(r: DeliveryDbRow): DeliveryRow {
  return {
    outgoingKey: r.outgoing_key,
    baseKey: r.base_key,
    senderLogin: r.sender_login,
    recipientLogin: r.recipient_login,
    revisionTimeMs: r.revision_time_ms,
    reencryptedAtMs: r.reencrypted_at_ms,
    state: r.state,
    attempt: r.attempt,
    acceptedAtMs: r.accepted_at_ms,
    nextAttemptAtMs: r.next_attempt_at_ms,
    leaseUntilMs: r.lease_until_ms,
    rowVersion: r.row_version,
    lastError: r.last_error,
  };
}
