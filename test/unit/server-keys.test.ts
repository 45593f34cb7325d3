import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { signText, verifyText } from '../../src/protocol/identity.js';
import { sodiumVerifier } from '../../src/server/crypto/verifier.js';
import { keyFromSeed, loadServerKey, SERVER_KEY_FILE } from '../../src/server/keys.js';

describe('loadServerKey', () => {
  it('creates <dataDir>/server-key.json with mode 0600 once and reuses it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'shine-key-'));
    try {
      const [a, b] = await Promise.all([loadServerKey({ dataDir: dir }), loadServerKey({ dataDir: dir })]);
      assert.equal(a.publicKeyB64, b.publicKeyB64);
      const file = join(dir, SERVER_KEY_FILE);
      assert.equal((await stat(file)).mode & 0o777, 0o600);
      assert.equal(JSON.parse(await readFile(file, 'utf8')).publicKeyB64, a.publicKeyB64);
      assert.equal((await loadServerKey({ dataDir: dir })).publicKeyB64, a.publicKeyB64);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('uses a configured seed without touching dataDir', async () => {
    const seedB64 = Buffer.from(Uint8Array.from({ length: 32 }, (_, i) => i + 1)).toString('base64');
    const key = await loadServerKey({ dataDir: '/nonexistent/shine', seedB64 });
    assert.equal(key.publicKeyB64, 'ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=');
  });
});

describe('keyFromSeed', () => {
  it('signs with libsodium exactly as the pure-JS signer does, and the signatures verify', () => {
    for (let n = 0; n < 8; n++) {
      const seed = Uint8Array.from({ length: 32 }, (_, i) => (i * 7 + n * 31) & 0xff);
      const key = keyFromSeed(seed);
      for (const text of ['', 'SHiNE-DELIVERY-v1\nserver=b', `x${'é'.repeat(n * 100)}`]) {
        const sig = key.sign(text);
        assert.equal(sig, signText(text, seed));
        assert.equal(verifyText(text, sig, key.publicKeyB64, sodiumVerifier), true);
        assert.equal(verifyText(`${text}!`, sig, key.publicKeyB64, sodiumVerifier), false);
      }
    }
  });
});
