import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { x25519 } from '@noble/curves/ed25519.js';
import { utf8 } from '../../src/protocol/bytes.js';
import { E2E_OVERHEAD, E2eError, decryptBody, encryptBody, messageAad, settingAad } from '../../src/client/e2e.js';

const owner = x25519.keygen();
const other = x25519.keygen();
const msg = { fromLogin: 'alice', toLogin: 'bob', timeMs: 1774700000123, nonce: 7, messageType: 1 as const };
const plaintext = utf8('привет, bob — 👋');

describe('E2E bodies', () => {
  it('round-trips with the owner key and has the documented layout', () => {
    const body = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    assert.equal(body.length, plaintext.length + E2E_OVERHEAD);
    assert.equal(body[0], 1);
    assert.deepEqual(decryptBody(body, owner.secretKey, messageAad(msg)), plaintext);
  });

  it('uses a fresh ephemeral key and nonce per call', () => {
    const a = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    const b = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    assert.notDeepEqual(a.subarray(1, 57), b.subarray(1, 57));
  });

  it('fails with another key', () => {
    const body = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    assert.throws(() => decryptBody(body, other.secretKey, messageAad(msg)), E2eError);
  });

  it('fails when moved to another message or the other copy', () => {
    const body = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    assert.throws(() => decryptBody(body, owner.secretKey, messageAad({ ...msg, nonce: 8 })), E2eError);
    assert.throws(() => decryptBody(body, owner.secretKey, messageAad({ ...msg, timeMs: msg.timeMs + 1 })), E2eError);
    assert.throws(() => decryptBody(body, owner.secretKey, messageAad({ ...msg, messageType: 2 })), E2eError);
    assert.throws(() => decryptBody(body, owner.secretKey, settingAad('bob', 'x')), E2eError);
  });

  it('fails when any byte is flipped', () => {
    const body = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    for (let i = 0; i < body.length; i++) {
      const bad = body.slice();
      bad[i]! ^= 0x01;
      assert.throws(() => decryptBody(bad, owner.secretKey, messageAad(msg)), E2eError, `byte ${i}`);
    }
  });

  it('fails on truncated bodies and low-order ephemeral keys', () => {
    const body = encryptBody(plaintext, owner.publicKey, messageAad(msg));
    assert.throws(() => decryptBody(body.subarray(0, E2E_OVERHEAD - 1), owner.secretKey, messageAad(msg)), E2eError);
    const zeroKey = body.slice();
    zeroKey.fill(0, 1, 33);
    assert.throws(() => decryptBody(zeroKey, owner.secretKey, messageAad(msg)), E2eError);
  });

  it('encrypts an empty plaintext too', () => {
    const body = encryptBody(new Uint8Array(0), owner.publicKey, settingAad('bob', 'k'));
    assert.equal(decryptBody(body, owner.secretKey, settingAad('bob', 'k')).length, 0);
  });
});
