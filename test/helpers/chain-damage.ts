/** Damages one stored block of a user chain in a server's database (a damaged store), and undoes it. */
import type { RunningServer } from '../../src/server/app.js';
import { queryServerDb } from './test-db.js';

/**
 * Flips one bit of the body's last byte of block `index` of login's chain, as stored by server: the block still
 * decodes but its signature no longer verifies. Resolves with a function that puts the original back.
 */
export async function damageChainBlock(
  server: RunningServer,
  login: string,
  index: number,
): Promise<() => Promise<void>> {
  const where = 'WHERE login = ? AND idx = ?';
  const [row] = await queryServerDb(server, `SELECT block FROM chain_blocks ${where}`, [login, index]);
  if (!row) throw new Error(`no block ${index} of ${login} in the database`);
  const original = Buffer.from(row.block as Uint8Array);
  const damaged = Buffer.from(original);
  damaged[damaged.length - 65]! ^= 0x01; // 64 signature bytes follow the body
  await queryServerDb(server, `UPDATE chain_blocks SET block = ? ${where}`, [damaged, login, index]);
  return async () =>
    void (await queryServerDb(server, `UPDATE chain_blocks SET block = ? ${where}`, [original, login, index]));
}
