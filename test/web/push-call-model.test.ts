/** The web client's pure parts of WebPush and calls: the VAPID key's decoding and the call payloads. */
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, it } from 'node:test';
import { decodeValue, encodeValue } from '../../web/src/calls.js';
import { fromBase64Url } from '../../web/src/notifications.js';

describe('fromBase64Url (the VAPID key as GetWebPushConfig gives it)', () => {
  it('decodes an unpadded base64url P-256 point to its 65 bytes', () => {
    const jwk = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' });
    const point = Buffer.concat([Buffer.from([4]), Buffer.from(jwk.x!, 'base64url'), Buffer.from(jwk.y!, 'base64url')]);
    const decoded = fromBase64Url(point.toString('base64url'));
    assert.ok(decoded);
    assert.deepEqual(Buffer.from(decoded), point);
  });

  it('decodes every length and both URL-safe characters', () => {
    for (let n = 0; n <= 6; n++) {
      const bytes = Buffer.from([0xfb, 0xff, 0xbf, 0x3e, 0xfc, 0x00].slice(0, n));
      assert.deepEqual(Buffer.from(fromBase64Url(bytes.toString('base64url'))!), bytes, `length ${n}`);
    }
  });

  it('refuses standard base64, padding and impossible lengths', () => {
    for (const bad of ['+/8=', 'AA==', 'A', 'AAAAA', 'a b']) assert.equal(fromBase64Url(bad), null, bad);
  });
});

describe('call payloads (JSON sealed for the other side)', () => {
  it('round-trip an SDP and a candidate as JSON', () => {
    const sdp = { sdp: 'v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n' };
    assert.deepEqual(decodeValue(encodeValue(sdp)), sdp);
    const ice = { candidate: 'candidate:1 1 udp 1 192.0.2.2 5000 typ host', sdpMid: '0', sdpMLineIndex: 0 };
    assert.deepEqual(decodeValue(encodeValue(ice)), ice);
    for (const bad of [null, new TextEncoder().encode('{not json')]) assert.equal(decodeValue(bad), null);
  });
});
