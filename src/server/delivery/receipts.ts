/**
 * Delivery receipts on the server (docs/protocol.md §13.1): signing one for a copy this server stored, and
 * checking one that another server gave (a recipient server's answer, or the proof the sender's other
 * server passes on) against the copy it must prove.
 */
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import type { DeliveryReceipt, ReceiptExpectation } from '../../protocol/receipt.js';
import {
  pickReceipt,
  receiptMismatch,
  receiptShapeProblem,
  receiptSigningText,
  signReceipt,
} from '../../protocol/receipt.js';
import { fromBase64, utf8 } from '../../protocol/bytes.js';
import { sha256 } from '../crypto/sha256.js';
import type { BulkVerifier, VerifyJob } from '../crypto/verify-pool.js';
import { inlineBulkVerifier } from '../crypto/verify-pool.js';
import type { Config } from '../config/config.js';
import type { Directory } from '../directory/service.js';
import type { ServerKey } from '../keys.js';
import type { MessageStore, StoredCopy } from '../store/types.js';

/** The stored copy a receipt names: its key, revision, when it was stored and its exact bytes. */
export interface ReceiptCopy {
  messageKey: string;
  revisionTimeMs: number;
  reencryptedAtMs: number;
  storedAtMs: number;
  bytes: Uint8Array;
}

/**
 * protocol/receipt.ts containerSha256B64 with node:crypto: the same text, about 4–9× faster than the
 * pure-JS hash the browser SDK shares (it runs per delivery, on both servers' event loops).
 */
export function containerSha256B64(bytes: Uint8Array): string {
  return sha256(bytes, 'base64');
}

/** This server's receipt for a copy it stored. */
export function receiptFor(serverLogin: string, sign: (text: string) => string, c: ReceiptCopy): DeliveryReceipt {
  return signReceipt(
    {
      serverLogin,
      messageKey: c.messageKey,
      revisionTimeMs: c.revisionTimeMs,
      reencryptedAtMs: c.reencryptedAtMs,
      storedAtMs: c.storedAtMs,
      containerSha256B64: containerSha256B64(c.bytes),
    },
    sign,
  );
}

/** What signs this server's own receipts, and the copies it holds (a part of each storing service's deps). */
export interface OwnReceiptDeps {
  config: Pick<Config, 'serverLogin'>;
  serverKey: Pick<ServerKey, 'sign'>;
  store: { messages: Pick<MessageStore, 'getCopy'> };
}

/** receiptFor signed by this server: for a copy as a call stores it, or as it is stored (getCopy's row). */
export function ownReceipt(deps: Omit<OwnReceiptDeps, 'store'>, c: ReceiptCopy | StoredCopy): DeliveryReceipt {
  const copy = 'blob' in c ? Object.assign({}, c, { bytes: c.blob }) : c;
  return receiptFor(deps.config.serverLogin, (text) => deps.serverKey.sign(text), copy);
}

/**
 * ownReceipt of the copy messageKey as it is stored now (its revision, bytes and storedAtMs); null when it is not
 * stored, or when `revision` is given and the stored copy is another revision (it proves nothing for that one).
 */
export async function storedReceipt(
  deps: OwnReceiptDeps,
  messageKey: string,
  revision?: { revisionTimeMs: number; reencryptedAtMs: number },
): Promise<DeliveryReceipt | null> {
  const stored = await deps.store.messages.getCopy(messageKey);
  if (!stored) return null;
  if (
    revision &&
    (stored.revisionTimeMs !== revision.revisionTimeMs || stored.reencryptedAtMs !== revision.reencryptedAtMs)
  )
    return null;
  return ownReceipt(deps, stored);
}

/**
 * What a receipt must name to prove the delivery of the incoming copy with these bytes, signed by one
 * of serverLogins (undefined: by any server whose key this server has pinned).
 */
export function expectationFor(
  copy: { messageKey: string; revisionTimeMs: number; reencryptedAtMs: number; bytes: Uint8Array },
  serverLogins: readonly string[] | undefined,
): ReceiptExpectation {
  const want: ReceiptExpectation = {
    messageKey: copy.messageKey,
    revisionTimeMs: copy.revisionTimeMs,
    reencryptedAtMs: copy.reencryptedAtMs,
    containerSha256B64: containerSha256B64(copy.bytes),
  };
  if (serverLogins) want.serverLogins = serverLogins;
  return want;
}

/**
 * Who may sign the proof of a delivery to recipientLogin that another server passes on (docs/protocol.md
 * §13.1, decision 33): the recipient's access servers as known here; any pinned server while the
 * recipient is not known here (a client still checks the signer against the recipient's profile).
 */
export async function proofSigners(
  directory: Pick<Directory, 'lookup'>,
  recipientLogin: string,
): Promise<readonly string[] | undefined> {
  return (await directory.lookup(recipientLogin, { noImport: true }))?.accessServers;
}

/**
 * The receipt when it has the right shape, matches `want` and verifies against the key this server
 * pinned for its signer (docs/protocol.md §4); otherwise why not (for the log and lastError).
 */
export async function checkReceipt(
  x: unknown,
  want: ReceiptExpectation,
  deps: { directory: Pick<Directory, 'lookupServer'>; verifier: SignatureVerifier },
): Promise<{ receipt: DeliveryReceipt } | { problem: string }> {
  const [checked] = await checkReceipts([{ x, want }], deps.directory, inlineBulkVerifier(deps.verifier));
  return checked!;
}

/** checkReceipt for many receipts at once: every signature goes to `bulk` in one call (a verify pool). */
export async function checkReceipts(
  items: readonly { x: unknown; want: ReceiptExpectation }[],
  directory: Pick<Directory, 'lookupServer'>,
  bulk: BulkVerifier,
): Promise<({ receipt: DeliveryReceipt } | { problem: string })[]> {
  const out: ({ receipt: DeliveryReceipt } | { problem: string })[] = [];
  const jobs: VerifyJob[] = [];
  const outOfJob: number[] = [];
  // A page's receipts come from a few servers: each signer's key is read and decoded once per call.
  const keys = new Map<string, Uint8Array | null>();
  const keyOf = async (serverLogin: string): Promise<Uint8Array | null> => {
    if (!keys.has(serverLogin)) {
      const signer = await directory.lookupServer(serverLogin);
      keys.set(serverLogin, signer ? fromBase64(signer.descriptor.signKeyB64) : null);
    }
    return keys.get(serverLogin)!;
  };
  for (const { x, want } of items) {
    const shape = x === undefined || x === null ? 'no receipt' : receiptShapeProblem(x);
    if (shape) {
      out.push({ problem: shape });
      continue;
    }
    const receipt = pickReceipt(x as DeliveryReceipt);
    const mismatch = receiptMismatch(receipt, want);
    const key = mismatch ? null : await keyOf(receipt.serverLogin);
    if (mismatch) out.push({ problem: `${mismatch.toLowerCase()} mismatch` });
    else if (!key) out.push({ problem: `signer ${receipt.serverLogin} unknown` });
    else {
      out.push({ receipt });
      // The shape check made sure the signature is 64 bytes of base64.
      jobs.push({
        signature: fromBase64(receipt.signatureB64)!,
        message: utf8(receiptSigningText(receipt)),
        publicKey: key,
      });
      outOfJob.push(out.length - 1);
    }
  }
  const verified = jobs.length > 0 ? await bulk.verifyMany(jobs) : [];
  verified.forEach((ok, k) => {
    if (!ok) out[outOfJob[k]!] = { problem: 'bad signature' };
  });
  return out;
}
