/**
 * The SDK's own check of a delivery proof (docs/protocol.md §13.1, decisions 36–38): "delivered" counts as
 * verified only when the recipient's server signed that it stored this revision of this message.
 */
import type { ServerDescriptor } from '../protocol/identity.js';
import type { DeliveryReceipt } from '../protocol/receipt.js';
import { pickReceipt, receiptMismatch, receiptShapeProblem, verifyReceipt } from '../protocol/receipt.js';

/** Whether what an item claims rests on a signature the SDK checked; whyUnverified says why not. */
export interface Verdict {
  verified: boolean;
  /** Null when verified; else a short reason a person can read. */
  whyUnverified: string | null;
}

/** The verdict on a delivery, with the proof it rests on. */
export interface DeliveryVerdict extends Verdict {
  /** The receipt as received (fields of the receipt only), or null when there was none usable. */
  proof: DeliveryReceipt | null;
  /** True when the receipt's sha256 was compared with the incoming copy's bytes this device built. */
  hashChecked: boolean;
}

/** The delivered copy a proof must name. */
export interface DeliveredCopy {
  /** The pair's incoming key (`…|1`): the copy the recipient's server stored. */
  incomingKey: string;
  toLogin: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  /** sha256 of the incoming copy's bytes, when this device has them (it built the pair); else null. */
  incomingSha256B64: string | null;
}

/** Where the check looks up the recipient's servers and a server's key (both verified by the caller). */
export interface ProofSources {
  accessServersOf(login: string): Promise<readonly string[]>;
  descriptorOf(serverLogin: string): Promise<ServerDescriptor>;
}

/** A verdict of no proof. */
export function unverified(whyUnverified: string): DeliveryVerdict {
  return { verified: false, whyUnverified, proof: null, hashChecked: false };
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Checks one delivery proof from the wire against the copy it should prove; never throws. */
export async function checkDeliveryProof(
  proof: unknown,
  copy: DeliveredCopy,
  sources: ProofSources,
): Promise<DeliveryVerdict> {
  if (proof === undefined || proof === null) return unverified('no proof came with it');
  const shape = receiptShapeProblem(proof);
  if (shape) return unverified(`the proof is malformed (${shape})`);
  const r = pickReceipt(proof as DeliveryReceipt);
  const fail = (why: string): DeliveryVerdict => ({
    verified: false,
    whyUnverified: why,
    proof: r,
    hashChecked: false,
  });
  let servers: readonly string[];
  try {
    servers = await sources.accessServersOf(copy.toLogin);
  } catch (err) {
    return fail(`${copy.toLogin}'s profile could not be checked (${messageOf(err)})`);
  }
  const mismatch = receiptMismatch(r, {
    messageKey: copy.incomingKey,
    revisionTimeMs: copy.revisionTimeMs,
    reencryptedAtMs: copy.reencryptedAtMs,
    // Without the copy's bytes the hash cannot be compared (decision 36): it then matches itself.
    containerSha256B64: copy.incomingSha256B64 ?? r.containerSha256B64,
    serverLogins: servers,
  });
  switch (mismatch) {
    case 'SERVER':
      return fail(`it is signed by ${r.serverLogin}, which is not one of ${copy.toLogin}'s servers`);
    case 'KEY':
      return fail('it names another message');
    case 'REVISION':
      return fail('it is for another revision of this message');
    case 'SHA256':
      return fail(`${r.serverLogin} stored other bytes than this device sent`);
  }
  let descriptor: ServerDescriptor;
  try {
    descriptor = await sources.descriptorOf(r.serverLogin);
  } catch (err) {
    return fail(`the key of ${r.serverLogin} could not be checked (${messageOf(err)})`);
  }
  if (!verifyReceipt(r, descriptor.signKeyB64)) return fail(`its signature does not match ${r.serverLogin}'s key`);
  return { verified: true, whyUnverified: null, proof: r, hashChecked: copy.incomingSha256B64 !== null };
}
