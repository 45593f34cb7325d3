/**
 * `shine check` and `POST /admin/check` (docs/operations.md): re-verifies every stored copy, finds rows
 * that refer to nothing or disagree with their copy, runs the database's own integrity check, and with
 * `repair` fixes what has one safe fix. A validly signed copy is never deleted.
 */
import { fromBase64 } from '../../protocol/bytes.js';
import type { Container } from '../../protocol/container.js';
import {
  decodeContainer,
  incomingKeyOf,
  isOutgoingType,
  messageKeyOf,
  ownerOf,
  pairedKeyOf,
  signedBytesOf,
  syncIdOf,
} from '../../protocol/container.js';
import type { BulkVerifier, VerifyJob } from '../crypto/verify-pool.js';
import { copyChanged, outboxRow } from '../store/rules.js';
import type { Store } from '../store/types.js';

/** Copies read per page. */
const PAGE = 500;
/** Keys listed per kind in a report (the counts are complete). */
const EXAMPLES = 20;

export interface CheckReport {
  dialect: Store['dialect'];
  repair: boolean;
  /** The database's own check (after the index rebuild, when --repair made one). */
  integrity: { method: string; problems: string[] };
  containers: {
    checked: number;
    /** The blob does not decode. */
    undecodable: number;
    badSignature: number;
    /** The sender has no profile here, so the signature cannot be checked. */
    unknownSender: number;
    /** The row's key, owner or revision columns do not match its blob. */
    columnsMismatch: number;
  };
  /** Rows that refer to a copy or a device that does not exist. */
  orphans: {
    /** Delivery rows of a pair with neither copy (a delete leaves these behind: not a problem). */
    deliveryWithoutCopy: number;
    /** Device acknowledgements of a copy that does not exist (a delete leaves these behind: not a problem). */
    acksWithoutCopy: number;
    acksWithoutDevice: number;
    outboxWithoutCopy: number;
  };
  /** Rows that exist on both sides but disagree. */
  inconsistencies: {
    /** Outbox rows whose syncId names another revision than their copy's. */
    outboxBehindCopy: number;
    /** Copies of a user of this server without an outbox row. */
    outboxMissing: number;
    /** Delivery rows of a newer revision than their outgoing copy. */
    deliveryAheadOfCopy: number;
  };
  /** What --repair did (all zero without it). */
  repaired: {
    indexesRebuilt: boolean;
    deliveryRowsRemoved: number;
    acksRemoved: number;
    outboxRowsRemoved: number;
    /** Copies stored again from their outbox row's validly signed blob. */
    copiesRestored: number;
    /** Outbox rows written again from their copy (behind it, or missing). */
    outboxRowsRewritten: number;
  };
  /** Problems found, not counting the leftovers of deletes. */
  problems: number;
  /** Problems left after the repairs (without repair: all of them). Non-zero makes `shine check` exit 3. */
  remaining: number;
  /** Up to 20 keys of each kind found, for a first look. */
  examples: Record<string, string[]>;
}

export interface CheckDeps {
  store: Pick<Store, 'dialect' | 'check' | 'directory' | 'messages'>;
  /** The server's signature checks in bulk: on its verify threads, so a page's checks leave the event loop. */
  verifier: BulkVerifier;
  nowMs: () => number;
}

export async function checkDatabase(deps: CheckDeps, opts: { repair: boolean }): Promise<CheckReport> {
  const { store } = deps;
  const examples: Record<string, string[]> = {};
  const note = (kind: string, key: string): void => {
    const list = (examples[kind] ??= []);
    if (list.length < EXAMPLES) list.push(key);
  };
  const signKey = signKeys(store);

  const integrityFound = await store.check.integrity();
  let integrity = integrityFound;
  let indexesRebuilt = false;
  if (opts.repair && integrity.problems.length > 0) {
    await store.check.rebuildIndexes();
    indexesRebuilt = true;
    integrity = await store.check.integrity();
  }

  // Copies whose blob is not valid: their outbox rows are not rewritten from them.
  const badCopies = new Set<string>();
  const containers = { checked: 0, undecodable: 0, badSignature: 0, unknownSender: 0, columnsMismatch: 0 };
  for (let after = ''; ;) {
    const page = await store.check.copiesPage(after, PAGE);
    const verdicts = await verifyCopies(
      page.map((row) => row.blob),
      signKey,
      deps.verifier,
    );
    for (const [i, row] of page.entries()) {
      containers.checked++;
      const verdict = verdicts[i]!;
      if (verdict.problem) {
        containers[verdict.problem]++;
        note(verdict.problem, row.messageKey);
        badCopies.add(row.messageKey);
        continue;
      }
      const c = verdict.copy;
      if (
        messageKeyOf(c) !== row.messageKey ||
        ownerOf(c) !== row.owner ||
        c.revisionTimeMs !== row.revisionTimeMs ||
        c.reencryptedAtMs !== row.reencryptedAtMs
      ) {
        containers.columnsMismatch++;
        note('columnsMismatch', row.messageKey);
      }
    }
    if (page.length < PAGE) break;
    after = page[page.length - 1]!.messageKey;
    // A page's read and (inline) checks settle without a turn of the event loop: give it one, so a live
    // server serves its sessions between pages.
    await new Promise(setImmediate);
  }

  const rows = await store.check.findRows();
  for (const kind of [
    'deliveryWithoutCopy',
    'acksWithoutCopy',
    'acksWithoutDevice',
    'outboxBehindCopy',
    'outboxMissing',
    'deliveryAheadOfCopy',
  ] as const)
    for (const key of rows[kind]) note(kind, key);
  for (const o of rows.outboxWithoutCopy) note('outboxWithoutCopy', `${o.owner}|${o.primaryMessageKey}`);

  const repaired = {
    indexesRebuilt,
    deliveryRowsRemoved: 0,
    acksRemoved: 0,
    outboxRowsRemoved: 0,
    copiesRestored: 0,
    outboxRowsRewritten: 0,
  };
  if (opts.repair) {
    repaired.deliveryRowsRemoved = await store.check.removeDeliveriesWithoutCopy(rows.deliveryWithoutCopy);
    repaired.acksRemoved = await store.check.removeOrphanAcks();
    for (const o of rows.outboxWithoutCopy) {
      // The row may carry the only copy left: store it again (the usual rules apply: a tombstone still
      // wins) rather than drop a validly signed message.
      const outcome = await restoreFromOutbox(deps, o.owner, o.primaryMessageKey, o.blobs, signKey);
      if (outcome === 'restored') repaired.copiesRestored++;
      else if (outcome === 'drop' && (await store.check.removeOutboxWithoutCopy(o.owner, o.primaryMessageKey)))
        repaired.outboxRowsRemoved++;
    }
    for (const id of [...rows.outboxBehindCopy, ...rows.outboxMissing]) {
      const cut = id.indexOf('|');
      const [owner, key] = [id.slice(0, cut), id.slice(cut + 1)];
      if (!badCopies.has(key) && (await rewriteOutbox(deps, owner, key))) repaired.outboxRowsRewritten++;
    }
  }

  const found = {
    integrity: integrityFound.problems.length,
    containers:
      containers.undecodable + containers.badSignature + containers.unknownSender + containers.columnsMismatch,
    rows:
      rows.acksWithoutDevice.length +
      rows.outboxWithoutCopy.length +
      rows.outboxBehindCopy.length +
      rows.outboxMissing.length +
      rows.deliveryAheadOfCopy.length,
  };
  const problems = found.integrity + found.containers + found.rows;
  const fixedAcksWithoutDevice = opts.repair ? rows.acksWithoutDevice.length : 0;
  const fixed =
    integrityFound.problems.length -
    integrity.problems.length +
    fixedAcksWithoutDevice +
    repaired.copiesRestored +
    repaired.outboxRowsRemoved;
  return {
    dialect: store.dialect,
    repair: opts.repair,
    integrity,
    containers,
    orphans: {
      deliveryWithoutCopy: rows.deliveryWithoutCopy.length,
      acksWithoutCopy: rows.acksWithoutCopy.length,
      acksWithoutDevice: rows.acksWithoutDevice.length,
      outboxWithoutCopy: rows.outboxWithoutCopy.length,
    },
    inconsistencies: {
      outboxBehindCopy: rows.outboxBehindCopy.length,
      outboxMissing: rows.outboxMissing.length,
      deliveryAheadOfCopy: rows.deliveryAheadOfCopy.length,
    },
    repaired,
    problems,
    remaining: Math.max(0, problems - fixed),
    examples,
  };
}

type SignKeyOf = (login: string) => Promise<Uint8Array | null>;

/** The senders' keys from their stored profiles, each read once. */
function signKeys(store: Pick<Store, 'directory'>): SignKeyOf {
  const cache = new Map<string, Uint8Array | null>();
  return async (login) => {
    if (!cache.has(login)) {
      const profile = (await store.directory.getUser(login))?.profile;
      cache.set(login, profile ? fromBase64(profile.signKeyB64) : null);
    }
    return cache.get(login)!;
  };
}

type Verdict =
  { problem: null; copy: Container } | { problem: 'undecodable' | 'badSignature' | 'unknownSender'; copy: null };

/** Each blob's verdict, in order: its signatures checked in one bulk call. */
async function verifyCopies(
  blobs: readonly Uint8Array[],
  signKey: SignKeyOf,
  verifier: BulkVerifier,
): Promise<Verdict[]> {
  const verdicts: Verdict[] = [];
  const jobs: VerifyJob[] = [];
  const verdictOfJob: number[] = [];
  for (const blob of blobs) {
    let copy: Container;
    try {
      copy = decodeContainer(blob);
    } catch {
      verdicts.push({ problem: 'undecodable', copy: null });
      continue;
    }
    const key = await signKey(copy.fromLogin);
    verdicts.push(key ? { problem: null, copy } : { problem: 'unknownSender', copy: null });
    if (!key) continue;
    jobs.push({ signature: copy.signature, message: signedBytesOf(copy), publicKey: key });
    verdictOfJob.push(verdicts.length - 1);
  }
  const verified = jobs.length > 0 ? await verifier.verifyMany(jobs) : [];
  verified.forEach((ok, k) => {
    if (!ok) verdicts[verdictOfJob[k]!] = { problem: 'badSignature', copy: null };
  });
  return verdicts;
}

/**
 * Stores an outbox row's own copy again when its blob is validly signed (with the pair's other copy when
 * the row carries it, so the row is whole again): 'restored'; 'keep' when the blob may be valid but its
 * sender's key is unknown; 'drop' when nothing valid is left in the row (or a tombstone covers it).
 */
async function restoreFromOutbox(
  deps: CheckDeps,
  owner: string,
  primaryMessageKey: string,
  blobs: readonly Uint8Array[],
  signKey: SignKeyOf,
): Promise<'restored' | 'keep' | 'drop'> {
  const verdicts = await verifyCopies(blobs, signKey, deps.verifier);
  const valid = verdicts.flatMap((v) => (v.copy ? [v.copy] : []));
  const own = valid.find((c) => messageKeyOf(c) === primaryMessageKey && ownerOf(c) === owner);
  if (!own) return verdicts.some((v) => v.problem === 'unknownSender') ? 'keep' : 'drop';
  const partner = valid.find((c) => messageKeyOf(c) === pairedKeyOf(own));
  // The row's synced flag is not known any more: unsynced makes the other server pull it again (idempotent).
  const outbox = { owners: new Map([[owner, false]]) };
  const nowMs = deps.nowMs();
  const r =
    partner && isOutgoingType(own.messageType)
      ? (
          await deps.store.messages.storePair({
            incoming: partner,
            outgoing: own,
            nowMs,
            outbox,
            delivery: null,
            silent: true,
          })
        ).outgoing
      : await deps.store.messages.storeCopy({ copy: own, nowMs, outbox, silent: true });
  return copyChanged(r) ? 'restored' : 'drop';
}

/**
 * Writes a copy's outbox row again as storing it would have (a pair's outgoing copy with its incoming
 * copy of the same revision), unsynced: the other server pulls it again, which changes nothing there if
 * it has it.
 */
async function rewriteOutbox(deps: CheckDeps, owner: string, key: string): Promise<boolean> {
  const copy = await deps.store.messages.getCopy(key);
  if (!copy) return false;
  const blobs = [copy.blob];
  if (isOutgoingType(copy.messageType)) {
    const partner = await deps.store.messages.getCopy(incomingKeyOf(key));
    if (partner?.revisionTimeMs === copy.revisionTimeMs && partner.reencryptedAtMs === copy.reencryptedAtMs)
      blobs.unshift(partner.blob);
  }
  return deps.store.check.rewriteOutbox(
    outboxRow({
      owner,
      primaryMessageKey: key,
      syncId: syncIdOf(key, copy.revisionTimeMs, copy.reencryptedAtMs),
      storedAtMs: deps.nowMs(),
      blobs,
      synced: false,
    }),
  );
}
