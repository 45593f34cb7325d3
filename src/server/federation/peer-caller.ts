/** The server-to-server call as the areas use it (delivery, replication, directory); PeerPool implements it. */
import type { OpAnswer, OpName, OpPayload } from '../../protocol/ops.js';

export interface PeerCaller {
  /**
   * Calls op on a peer server. Resolves with the answer, checked against the op's answer schema;
   * rejects on transport failure or timeout (PeerUnavailableError), an error answer (ShineError with
   * its code) or a malformed answer (ShineError INTERNAL).
   */
  call<K extends OpName>(serverLogin: string, op: K, payload: OpPayload<K>): Promise<OpAnswer<K>>;
  /**
   * Whether serverLogin is down as far as this server knows: the last connection to it failed — a dial (a
   * call's or a background one), or an open connection that went silent (heartbeats) — and no dial has
   * succeeded since, nor has it authenticated here. A call now waits for a redial — or for one in progress
   * that may fail as well, or hang until it times out — before it can even be sent.
   */
  down(serverLogin: string): boolean;
}
