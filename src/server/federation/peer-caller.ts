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
   * Whether serverLogin could not be reached moments ago: the last dial failed and the next is not due yet,
   * so a call now waits for that redial (within its timeout) before it can even be sent.
   */
  backingOff(serverLogin: string): boolean;
}
