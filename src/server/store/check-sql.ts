/**
 * The queries of `shine check` that read the same in both dialects (no parameters, standard SQL): rows
 * that refer to a copy or a device that does not exist, and rows that disagree with their copy.
 */

/** A delivery row's incoming key: its outgoing key `…|2` with the type 1 (delivery rows are type 2 only). */
const INCOMING_OF_DELIVERY = `substr(d.outgoing_key, 1, length(d.outgoing_key) - 1) || '1'`;

/** The syncId of a copy's current revision (protocol/container.ts syncIdOf). */
const SYNC_ID_OF_COPY = `m.message_key || ':' || m.revision_time_ms || ':' || m.reencrypted_at_ms`;

export const CHECK_SQL = {
  deliveryWithoutCopy: `SELECT d.outgoing_key AS id FROM dm_delivery_state d
    WHERE NOT EXISTS (SELECT 1 FROM signed_messages m WHERE m.message_key = d.outgoing_key)
      AND NOT EXISTS (SELECT 1 FROM signed_messages m WHERE m.message_key = ${INCOMING_OF_DELIVERY})
    ORDER BY d.outgoing_key`,
  outboxWithoutCopy: `SELECT o.owner_login, o.primary_message_key, o.blobs FROM dm_sync_outbox o
    WHERE NOT EXISTS (SELECT 1 FROM signed_messages m
                      WHERE m.message_key = o.primary_message_key AND m.owner_login = o.owner_login)
    ORDER BY o.owner_login, o.primary_message_key`,
  acksWithoutCopy: `SELECT s.owner_login || '|' || s.device_id || '|' || s.message_key AS id FROM session_deliveries s
    WHERE NOT EXISTS (SELECT 1 FROM signed_messages m WHERE m.message_key = s.message_key AND m.owner_login = s.owner_login)
    ORDER BY 1`,
  acksWithoutDevice: `SELECT s.owner_login || '|' || s.device_id || '|' || s.message_key AS id FROM session_deliveries s
    WHERE NOT EXISTS (SELECT 1 FROM session_devices v WHERE v.owner_login = s.owner_login AND v.device_id = s.device_id)
    ORDER BY 1`,
  outboxBehindCopy: `SELECT o.owner_login || '|' || o.primary_message_key AS id FROM dm_sync_outbox o
    JOIN signed_messages m ON m.message_key = o.primary_message_key AND m.owner_login = o.owner_login
    WHERE o.sync_id <> ${SYNC_ID_OF_COPY}
    ORDER BY 1`,
  outboxMissing: `SELECT m.owner_login || '|' || m.message_key AS id FROM signed_messages m
    WHERE NOT EXISTS (SELECT 1 FROM dm_sync_outbox o
                      WHERE o.owner_login = m.owner_login AND o.time_ms = m.time_ms AND o.primary_message_key = m.message_key)
      AND EXISTS (SELECT 1 FROM user_access_servers_current a JOIN servers s ON s.server_login = a.server_login
                  WHERE a.login = m.owner_login AND s.source = 'self')
    ORDER BY 1`,
  deliveryAheadOfCopy: `SELECT d.outgoing_key AS id FROM dm_delivery_state d
    JOIN signed_messages m ON m.message_key = d.outgoing_key
    WHERE (d.revision_time_ms, d.reencrypted_at_ms) > (m.revision_time_ms, m.reencrypted_at_ms)
    ORDER BY 1`,
  /** Deletes acknowledgements whose copy or device does not exist. */
  removeOrphanAcks: `DELETE FROM session_deliveries
    WHERE NOT EXISTS (SELECT 1 FROM signed_messages m
                      WHERE m.message_key = session_deliveries.message_key AND m.owner_login = session_deliveries.owner_login)
       OR NOT EXISTS (SELECT 1 FROM session_devices v
                      WHERE v.owner_login = session_deliveries.owner_login AND v.device_id = session_deliveries.device_id)`,
  /** The syncId of the current revision of copy m. */
  syncIdOfCopy: SYNC_ID_OF_COPY,
  /** The condition (on table alias d) that a delivery row's pair has no copy; removals re-check it. */
  deliveryHasNoCopy: `NOT EXISTS (SELECT 1 FROM signed_messages m WHERE m.message_key = d.outgoing_key)
      AND NOT EXISTS (SELECT 1 FROM signed_messages m WHERE m.message_key = ${INCOMING_OF_DELIVERY})`,
} as const;
