/**
 * Hostile frames for the fuzzer (test/integration/fuzz.test.ts), drawn by fast-check from a seed: text
 * that is not JSON, JSON that is not an envelope, envelopes with wrong types, every op with a payload
 * broken on purpose, containers truncated, flipped, re-signed over invalid headers and bodies, wrong
 * senders, mismatched pairs, bad base64, and replays of frames the server already took. None of them
 * may change anything: the ops that write are only ever sent with a payload that cannot be valid,
 * and the replays are of work already stored (answered 200, stored once).
 */
import fc from 'fast-check';
import { toBase64, utf8 } from '../../src/protocol/bytes.js';
import { MAX_CONTAINER } from '../../src/protocol/container.js';
import { signEd25519 } from '../../src/protocol/ed25519.js';
import { buildNextBlock } from '../../src/client/chain.js';
import type { TestPair } from './federation.js';
import { textPair } from './federation.js';
import type { TestUser } from './users.js';

/** Which session a frame goes to: a socket that never logged in, alice's user session, or a peer server's. */
export type FuzzTarget = 'anon' | 'user' | 'server';

export interface FuzzFrame {
  target: FuzzTarget;
  /** What kind of hostility it is, for the run's summary. */
  kind: string;
  text: string;
}

export interface FuzzWorld {
  /** Logged in on the `user` session. */
  alice: TestUser;
  /** A local user alice writes to. */
  bob: TestUser;
  /** A user of the peer server, the sender of what the `server` session hands over. */
  carol: TestUser;
  /** Pairs the server took before the fuzzing started: alice → bob (revision 0 and a later edit), carol → bob. */
  taken: { aliceOld: TestPair; aliceEdit: TestPair; carol: TestPair };
  /** The ServerAuth payload the `server` session logged in with. */
  serverAuth: Record<string, unknown>;
}

/** Ops whose success changes nothing: they may be sent with any payload. */
const READ_OPS = [
  'AuthChallenge',
  'GetUserProfile',
  'GetServerDescriptor',
  'GetDirectMessages',
  'GetConversations',
  'GetUserSettings',
  'GetWebPushConfig',
  'GetDmDeliveryStatus',
  'DmSyncBatch',
  'UserSettingsSyncBatch',
  'DmDigest',
  'DmKeys',
  'DmFetch',
  'GetChain',
  'GetChainHeads',
] as const;

/** A valid-shaped payload per op: the fuzzer breaks one field of it. */
function templates(w: FuzzWorld): Record<string, Record<string, unknown>> {
  const p = w.taken.aliceOld;
  const call = { callId: 'call-1', toLogin: w.bob.login, payloadB64: toBase64(utf8('{}')) };
  const block = buildNextBlock({ login: w.alice.login, signSeed: w.alice.seed }, null, {
    kind: 1,
    body: utf8('genesis'),
    timeMs: 1,
  }).blockB64;
  return {
    AuthChallenge: {},
    AuthLogin: { login: w.alice.login, deviceId: 'device-9', signatureB64: toBase64(new Uint8Array(64)) },
    RegisterUser: { profile: w.alice.profile },
    GetUserProfile: { login: w.bob.login },
    GetServerDescriptor: { serverLogin: 'gamma' },
    SendMessagePair: { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 },
    DeleteMessage: { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 },
    DeleteConversation: { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 },
    GetDirectMessages: { peerLogin: w.bob.login, beforeTimeMs: 0, beforeMessageKey: '', limit: 10 },
    GetConversations: { limit: 10 },
    AckSessionDelivery: { messageKeys: [p.incomingKey] },
    SetUserSetting: { key: 'theme', valueB64: toBase64(utf8('dark')), updatedAtMs: 1 },
    GetUserSettings: { keys: ['theme'] },
    GetWebPushConfig: {},
    UpsertPushToken: { endpoint: 'https://push.invalid/x', p256dhB64: 'AAAA', authB64: 'AAAA' },
    DeletePushToken: { endpoint: 'https://push.invalid/x' },
    SendTestWebPush: {},
    CallInviteBroadcast: call,
    CallSignal: { ...call, kind: 'answer' },
    ServerAuth: w.serverAuth,
    ReceiveIncomingMessage: { incomingBlobB64: w.taken.carol.incomingBlobB64 },
    ReceiveOutcomingMessage: {
      incomingBlobB64: w.taken.carol.incomingBlobB64,
      outgoingBlobB64: w.taken.carol.outgoingBlobB64,
    },
    GetDmDeliveryStatus: { messageKey: p.outgoingKey },
    ReceiveCallSignal: { ...call, fromLogin: w.carol.login, kind: 'invite' },
    DmSyncBatch: { ownerLogin: w.alice.login, afterStoredAtMs: 0, afterMessageKey: '', limit: 10, ackSyncIds: [] },
    UserSettingsSyncBatch: { ownerLogin: w.alice.login, afterStoredAtMs: 0, afterKey: '', limit: 10, ackSyncIds: [] },
    MarkAllUserSettingsUnsynced: { ownerLogin: w.alice.login },
    DmDigest: { ownerLogin: w.alice.login, fromTimeMs: 0, toTimeMs: 4_000_000_000_000, buckets: 16 },
    DmKeys: { ownerLogin: w.alice.login, fromTimeMs: 0, toTimeMs: 4_000_000_000_000 },
    DmFetch: { ownerLogin: w.alice.login, messageKeys: [p.outgoingKey] },
    AddBlock: { blockB64: block },
    GetChain: { login: w.alice.login, fromIndex: 0, limit: 10 },
    ReceiveBlock: { blockB64: block },
    GetChainHeads: { afterGlobalSeq: 0, limit: 10 },
  };
}

/**
 * A value no schema field accepts in place of a field that holds `v`: another JSON type, a number out of
 * range for a count or a time, or a string past every length bound.
 */
const wrongFor = (v: unknown): fc.Arbitrary<unknown> => {
  const anyOtherType = fc.oneof(
    fc.constant(null),
    fc.boolean(),
    fc.array(fc.integer(), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 2 }),
  );
  if (typeof v === 'string')
    // '!' is in no login, key, id or base64 alphabet, and 5 000 is past every string field's bound.
    return fc.oneof(anyOtherType, fc.integer(), fc.double(), fc.constant('!'.repeat(5_000)));
  if (typeof v === 'number')
    return fc.oneof(anyOtherType, fc.string({ maxLength: 8 }), fc.constantFrom(-1, 2 ** 53, 2 ** 64, 1.5, -0.5, 1e308));
  if (Array.isArray(v)) return fc.oneof(fc.constant(null), fc.string(), fc.integer(), fc.constant(['x'.repeat(300)]));
  return fc.oneof(fc.constant(null), fc.string(), fc.integer(), fc.array(fc.integer(), { maxLength: 2 }));
};

/** The op's template with one of its fields replaced by a value of the wrong kind. */
function brokenPayload(template: Record<string, unknown>): fc.Arbitrary<unknown> {
  const keys = Object.keys(template);
  if (keys.length === 0)
    // A payload with no fields can only be broken by not being an object.
    return fc.oneof(fc.constant(null), fc.string(), fc.integer(), fc.array(fc.integer()));
  return fc.constantFrom(...keys).chain((k) => wrongFor(template[k]).map((bad) => ({ ...template, [k]: bad })));
}

const SIGNATURE_BYTES = 64;

/** A container's signed part with `edit` applied, signed again by `seed`: a valid signature over it. */
function resigned(blob: Uint8Array, seed: Uint8Array, edit: (signed: Uint8Array) => Uint8Array): string {
  const signed = edit(blob.slice(0, blob.length - SIGNATURE_BYTES));
  const out = new Uint8Array(signed.length + SIGNATURE_BYTES);
  out.set(signed);
  out.set(signEd25519(signed, seed), signed.length);
  return toBase64(out);
}

/** Offsets in a container's header for logins of the given lengths (docs/protocol.md §3). */
function offsets(fromLen: number, toLen: number) {
  const time = 8 + 2 + 1 + fromLen + 1 + toLen;
  return { type: 9, time, revision: time + 12, bodyLength: time + 28 };
}

/**
 * Containers signed by their sender over a header or body that is not valid (or a time too far
 * ahead): each is refused after its signature verified. Made once per run (signing is slow in JS).
 */
function resignedBlobs(w: FuzzWorld): string[] {
  const { alice } = w;
  const base = w.taken.aliceOld.incoming.bytes;
  const o = offsets(alice.login.length, w.bob.login.length);
  const at = (edit: (b: Uint8Array, v: DataView) => void) => (s: Uint8Array) => {
    const b = s.slice();
    edit(b, new DataView(b.buffer));
    return b;
  };
  return [
    // A text body under a fixed-layout type (receipts, tombstones): the wrong body length for it.
    ...[3, 4, 5, 6, 7, 8].map((t) =>
      resigned(
        base,
        alice.seed,
        at((b) => (b[o.type] = t)),
      ),
    ),
    // A type, a version, a magic that do not exist.
    resigned(
      base,
      alice.seed,
      at((b) => (b[o.type] = 0)),
    ),
    resigned(
      base,
      alice.seed,
      at((b) => (b[o.type] = 200)),
    ),
    resigned(
      base,
      alice.seed,
      at((b) => (b[8] = 2)),
    ),
    resigned(
      base,
      alice.seed,
      at((b) => (b[0] = 0x73)),
    ),
    // u64 fields above 2^53 - 1.
    resigned(
      base,
      alice.seed,
      at((_b, v) => v.setBigUint64(o.time, 2n ** 63n)),
    ),
    resigned(
      base,
      alice.seed,
      at((_b, v) => v.setBigUint64(o.revision, 2n ** 64n - 1n)),
    ),
    // Body lengths that do not match the bytes that follow.
    resigned(
      base,
      alice.seed,
      at((_b, v) => v.setUint32(o.bodyLength, 0xffff_ffff)),
    ),
    resigned(
      base,
      alice.seed,
      at((_b, v) => v.setUint32(o.bodyLength, 1)),
    ),
    // A login length that runs past the end, and one that is zero.
    resigned(
      base,
      alice.seed,
      at((b) => (b[10] = 255)),
    ),
    resigned(
      base,
      alice.seed,
      at((b) => (b[10] = 0)),
    ),
    // Valid bytes, a time a day ahead: BAD_TIME.
    resigned(
      base,
      alice.seed,
      at((_b, v) => v.setBigUint64(o.time, BigInt(Date.now() + 86_400_000))),
    ),
  ];
}

/** Standard base64 a strict decoder refuses. */
const badBase64 = fc.oneof(
  fc.constantFrom('A', 'AA', 'AAA', '====', 'AB=C', 'QQ', 'QR==', 'Zm9v\n', ' Zm9v', 'Zm9v-_', 'Zm9=v', '*'),
  fc.string({ minLength: 1, maxLength: 40 }).filter((s) => /[^A-Za-z0-9+/=]/.test(s)),
);

/** Containers that cannot be stored, as base64: random, truncated, flipped, resigned-invalid, oversized. */
function badBlobs(w: FuzzWorld): fc.Arbitrary<string> {
  const valid = [w.taken.aliceOld.incoming.bytes, w.taken.aliceOld.outgoing.bytes];
  const resignedPool = resignedBlobs(w);
  return fc.oneof(
    fc.uint8Array({ maxLength: 400 }).map(toBase64),
    fc.tuple(fc.constantFrom(...valid), fc.nat()).map(([b, n]) => toBase64(b.subarray(0, n % b.length))),
    // One flipped bit anywhere: a decode error or a signature that no longer verifies.
    fc.tuple(fc.constantFrom(...valid), fc.nat(), fc.integer({ min: 0, max: 7 })).map(([b, n, bit]) => {
      const c = b.slice();
      c[n % c.length]! ^= 1 << bit;
      return toBase64(c);
    }),
    // Trailing bytes after the signature.
    fc.tuple(fc.constantFrom(...valid), fc.uint8Array({ minLength: 1, maxLength: 8 })).map(([b, extra]) => {
      const c = new Uint8Array(b.length + extra.length);
      c.set(b);
      c.set(extra, b.length);
      return toBase64(c);
    }),
    fc.constantFrom(...resignedPool),
    fc.constant(toBase64(new Uint8Array(MAX_CONTAINER + 1))),
    badBase64,
  );
}

const envelope = (op: unknown, requestId: unknown, payload: unknown): string =>
  JSON.stringify({ op, requestId, payload });

/** Every hostile frame of the run, for `world`. */
export function hostileFrames(w: FuzzWorld): fc.Arbitrary<FuzzFrame> {
  const t = templates(w);
  const target = fc.constantFrom<FuzzTarget>('anon', 'user', 'server');
  const userOps = Object.keys(t).filter(
    (op) => !/^(ServerAuth|Receive|DmSync|UserSettingsSync|MarkAll|GetDmDel)/.test(op),
  );
  const serverOps = Object.keys(t).filter((op) => !userOps.includes(op));
  const rid = fc.string({ maxLength: 12 });
  const frame = (kind: string, text: fc.Arbitrary<string>, on: fc.Arbitrary<FuzzTarget> = target) =>
    fc.tuple(on, text).map(([tg, tx]): FuzzFrame => ({ target: tg, kind, text: tx }));
  const bad = badBlobs(w);
  const { aliceOld, aliceEdit, carol } = w.taken;

  return fc.oneof(
    frame('not JSON', fc.string({ unit: 'binary', maxLength: 200 })),
    frame(
      'JSON, not an envelope',
      fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v) ?? 'null'),
    ),
    frame(
      'deep JSON',
      fc
        .tuple(fc.integer({ min: 100, max: 100_000 }), fc.constantFrom('[', '{"a":'))
        .map(([d, open]) => open.repeat(d) + (open === '[' ? ']' : '1}').repeat(d)),
    ),
    frame(
      'envelope fields of the wrong type',
      fc
        .tuple(fc.jsonValue({ maxDepth: 1 }), fc.jsonValue({ maxDepth: 1 }), fc.jsonValue({ maxDepth: 2 }))
        .map(([op, r, p]) => envelope(op, r, p)),
    ),
    frame(
      'unknown op',
      fc.tuple(fc.string({ maxLength: 80 }), rid).map(([op, r]) => envelope(op, r, {})),
    ),
    frame(
      'read op, any payload',
      fc
        .tuple(fc.constantFrom(...READ_OPS), rid, fc.jsonValue({ maxDepth: 2 }))
        .map(([op, r, p]) => envelope(op, r, p)),
    ),
    frame(
      'op with one field broken',
      fc
        .tuple(fc.constantFrom(...Object.keys(t)), rid)
        .chain(([op, r]) => brokenPayload(t[op]!).map((p) => envelope(op, r, p))),
    ),
    frame(
      'bad container (client ops)',
      fc
        .tuple(fc.constantFrom('SendMessagePair', 'DeleteMessage', 'DeleteConversation'), rid, bad, fc.boolean())
        .map(([op, r, blob, first]) =>
          envelope(op, r, {
            incomingBlobB64: first ? blob : aliceOld.incomingBlobB64,
            outgoingBlobB64: first ? aliceOld.outgoingBlobB64 : blob,
          }),
        ),
      fc.constantFrom<FuzzTarget>('user', 'anon'),
    ),
    frame(
      'bad container (server ops)',
      fc
        .tuple(fc.constantFrom('ReceiveIncomingMessage', 'ReceiveOutcomingMessage'), rid, bad)
        .map(([op, r, blob]) =>
          envelope(
            op,
            r,
            op === 'ReceiveIncomingMessage'
              ? { incomingBlobB64: blob }
              : { incomingBlobB64: blob, outgoingBlobB64: carol.outgoingBlobB64 },
          ),
        ),
      fc.constantFrom<FuzzTarget>('server', 'user'),
    ),
    frame(
      'bad block (chain ops)',
      fc
        .tuple(fc.constantFrom('AddBlock', 'ReceiveBlock'), rid, bad)
        .map(([op, r, blob]) => envelope(op, r, { blockB64: blob })),
      fc.constantFrom<FuzzTarget>('user', 'server', 'anon'),
    ),
    frame(
      'mismatched pair, other sender',
      fc.tuple(rid, fc.constantFrom(0, 1, 2)).map(([r, which]) =>
        envelope(
          'SendMessagePair',
          r,
          which === 0
            ? // halves of two different pairs
              { incomingBlobB64: aliceOld.incomingBlobB64, outgoingBlobB64: carol.outgoingBlobB64 }
            : which === 1
              ? // carol's pair sent on alice's session: not the sender
                { incomingBlobB64: carol.incomingBlobB64, outgoingBlobB64: carol.outgoingBlobB64 }
              : // both halves the same copy
                { incomingBlobB64: aliceOld.incomingBlobB64, outgoingBlobB64: aliceOld.incomingBlobB64 },
        ),
      ),
      fc.constant<FuzzTarget>('user'),
    ),
    frame(
      'replay of a pair already stored (revision 0 after its edit, or the edit again)',
      fc.tuple(rid, fc.boolean()).map(([r, old]) => {
        const p = old ? aliceOld : aliceEdit;
        return envelope('SendMessagePair', r, {
          incomingBlobB64: p.incomingBlobB64,
          outgoingBlobB64: p.outgoingBlobB64,
        });
      }),
      fc.constant<FuzzTarget>('user'),
    ),
    frame(
      'replayed ServerAuth',
      rid.map((r) => envelope('ServerAuth', r, w.serverAuth)),
      fc.constantFrom<FuzzTarget>('server', 'anon'),
    ),
    frame(
      'server op on the wrong session',
      fc.tuple(fc.constantFrom(...serverOps), rid).map(([op, r]) => envelope(op, r, t[op])),
      fc.constantFrom<FuzzTarget>('anon', 'user'),
    ),
  );
}

/** Ops that may answer 200 to a fuzz frame: reads, and the replays of what is stored already. */
export const MAY_SUCCEED: ReadonlySet<string> = new Set([...READ_OPS, 'SendMessagePair']);

/** The pairs and the ServerAuth the world needs, made from its users. */
export function takenPairs(alice: TestUser, bob: TestUser, carol: TestUser): FuzzWorld['taken'] {
  const timeMs = Date.now() - 60_000;
  return {
    aliceOld: textPair(alice, bob.login, { timeMs, nonce: 7, body: 'first' }),
    aliceEdit: textPair(alice, bob.login, { timeMs, nonce: 7, revisionTimeMs: timeMs + 1_000, body: 'edited' }),
    carol: textPair(carol, bob.login, { timeMs, nonce: 8, body: 'from carol' }),
  };
}
