import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ed25519 } from '@noble/curves/ed25519.js';
import { fromBase64, toBase64 } from '../../src/protocol/bytes.js';
import type { Container } from '../../src/protocol/container.js';
import { decodeContainer, messageKeyOf, pairProblem, verifyContainer } from '../../src/protocol/container.js';
import { E2eError } from '../../src/client/e2e.js';
import type { BuiltPair } from '../../src/client/pairs.js';
import {
  MAX_TEXT_BYTES,
  contentOf,
  deleteConversationPair,
  deleteMessagePair,
  editTextPair,
  receiptPair,
  textPair,
} from '../../src/client/pairs.js';
import { createIdentity, identityFromJson, identityToJson, makeProfile } from '../../src/client/identity.js';
import { verifyProfile } from '../../src/protocol/identity.js';

const alice = createIdentity('alice');
const bob = createIdentity('bob');
const toBob = { login: 'bob', encKey: bob.encPublicKey };
const T = 1774700000123;

/** Checks what the server checks of a pair: decoding, consistency, types, signatures. */
function assertConsistent(pair: BuiltPair, incomingType: number): [Container, Container] {
  const inc = decodeContainer(fromBase64(pair.incomingBlobB64)!);
  const out = decodeContainer(fromBase64(pair.outgoingBlobB64)!);
  assert.equal(pairProblem(inc, out), null);
  assert.equal(inc.messageType, incomingType);
  assert.deepEqual(inc.bytes, pair.incoming.bytes);
  const signer = inc.fromLogin === 'alice' ? alice : bob;
  assert.ok(verifyContainer(inc, signer.signPublicKey));
  assert.ok(verifyContainer(out, signer.signPublicKey));
  return [inc, out];
}

describe('identity', () => {
  it('creates matching keys and survives a JSON round trip', () => {
    assert.equal(alice.signSeed.length, 32);
    assert.deepEqual(ed25519.getPublicKey(alice.signSeed), alice.signPublicKey);
    const back = identityFromJson(identityToJson(alice));
    assert.deepEqual(back, alice);
  });

  it('rejects a file whose public key does not match', () => {
    const file = JSON.parse(identityToJson(alice)) as Record<string, string>;
    file.encKeyB64 = toBase64(bob.encPublicKey);
    assert.throws(() => identityFromJson(JSON.stringify(file)), /do not match/);
  });

  it('makes a verifying profile', () => {
    const p = makeProfile(alice, ['s1', 's2'], 3, T);
    assert.ok(verifyProfile(p));
    assert.equal(p.version, 3);
    assert.equal(p.encKeyB64, toBase64(alice.encPublicKey));
  });
});

describe('pair builders', () => {
  it('text: consistent, signed, each copy opens for its owner only', () => {
    const pair = textPair(alice, toBob, 'hello bob', { timeMs: T, nonce: 42 });
    const [inc, out] = assertConsistent(pair, 1);
    assert.equal(messageKeyOf(out), `alice|bob|${T}|42|2`);
    assert.deepEqual(contentOf(inc, bob.encSecretKey), { kind: 'text', text: 'hello bob' });
    assert.deepEqual(contentOf(out, alice.encSecretKey), { kind: 'text', text: 'hello bob' });
    assert.throws(() => contentOf(inc, alice.encSecretKey), E2eError);
    assert.throws(() => contentOf(out, bob.encSecretKey), E2eError);
  });

  it('text: random u32 nonces and the size limit', () => {
    const nonces = new Set(Array.from({ length: 20 }, () => textPair(alice, toBob, 'x').incoming.nonce));
    assert.ok(nonces.size > 15);
    for (const n of nonces) assert.ok(Number.isInteger(n) && n >= 0 && n <= 0xffffffff);
    textPair(alice, toBob, 'a'.repeat(MAX_TEXT_BYTES));
    assert.throws(() => textPair(alice, toBob, 'a'.repeat(MAX_TEXT_BYTES + 1)), RangeError);
  });

  it('edit: keeps the messageKey, raises the revision', () => {
    const original = textPair(alice, toBob, 'helo', { timeMs: T, nonce: 42 });
    const edit = editTextPair(alice, toBob, { timeMs: T, nonce: 42 }, 'hello', T + 5000);
    const [inc, out] = assertConsistent(edit, 1);
    assert.equal(messageKeyOf(inc), messageKeyOf(original.incoming));
    assert.equal(messageKeyOf(out), messageKeyOf(original.outgoing));
    assert.equal(out.revisionTimeMs, T + 5000);
    assert.deepEqual(contentOf(inc, bob.encSecretKey), { kind: 'text', text: 'hello' });
    assert.throws(() => editTextPair(alice, toBob, { timeMs: T, nonce: 42 }, 'x', 0), RangeError);
  });

  it('receipt: from the reader to the sender, pointing at the message', () => {
    const msg = textPair(alice, toBob, 'hi', { timeMs: T, nonce: 9 }).incoming;
    const pair = receiptPair(bob, msg, T + 100, { timeMs: T + 100 });
    const [inc] = assertConsistent(pair, 3);
    assert.equal(inc.fromLogin, 'bob');
    assert.equal(inc.toLogin, 'alice');
    assert.deepEqual(contentOf(inc, alice.encSecretKey), {
      kind: 'receipt',
      readAtMs: T + 100,
      targetBaseKey: `alice|bob|${T}|9`,
    });
    assert.throws(() => receiptPair(alice, msg, T), /recipient/);
  });

  it('delete message: names the target whoever sent it', () => {
    const mine = { fromLogin: 'alice', toLogin: 'bob', timeMs: T, nonce: 1 };
    const theirs = { fromLogin: 'bob', toLogin: 'alice', timeMs: T, nonce: 2 };
    for (const target of [mine, theirs]) {
      const [inc, out] = assertConsistent(deleteMessagePair(alice, target), 5);
      assert.equal(inc.toLogin, 'bob');
      const expected = {
        kind: 'deleteMessage',
        targetBaseKey: `${target.fromLogin}|${target.toLogin}|${T}|${target.nonce}`,
      };
      assert.deepEqual(contentOf(out, alice.encSecretKey), expected);
    }
    assert.throws(
      () => deleteMessagePair(alice, { fromLogin: 'bob', toLogin: 'carol', timeMs: T, nonce: 3 }),
      /dialog/,
    );
  });

  it('delete conversation: both copies carry deleteBeforeMs', () => {
    const [inc, out] = assertConsistent(deleteConversationPair(alice, 'bob', T), 7);
    assert.deepEqual(contentOf(inc, bob.encSecretKey), { kind: 'deleteConversation', deleteBeforeMs: T });
    assert.equal(out.messageType, 8);
  });
});
