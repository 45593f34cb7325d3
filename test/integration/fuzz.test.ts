/**
 * The fuzzer (issue 13): hostile frames drawn from a seed (test/helpers/fuzz-frames.ts) go to a
 * `shine serve` process over a socket that never logged in, a user session and a peer server's
 * session, many in flight at once. The process must stay up, every frame must get exactly one answer,
 * every answer must be 200 from an op that changes nothing or a documented error (never INTERNAL),
 * the database must be byte for byte what it was, and a bystander's session must not notice.
 *
 * FUZZ_FRAMES (default 3 000; `npm run fuzz` sends 100 000) and FUZZ_SEED (default: random, printed)
 * reproduce a run.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { ERROR_STATUS, isErrorCode } from '../../src/protocol/errors.js';
import { opSchemas } from '../../src/protocol/ops.js';
import { fakeServer, serverAuthPayload, textPair } from '../helpers/federation.js';
import type { FuzzFrame, FuzzTarget, FuzzWorld } from '../helpers/fuzz-frames.js';
import { MAY_SUCCEED, hostileFrames, takenPairs } from '../helpers/fuzz-frames.js';
import type { RawClient } from '../helpers/raw-client.js';
import { connectRaw } from '../helpers/raw-client.js';
import { startServerProcess } from '../helpers/server-process.js';
import { queryTestDb } from '../helpers/test-db.js';
import { assertSessionWorks, connectUser, makeUser } from '../helpers/users.js';
import { waitUntil } from '../helpers/wait.js';

const FRAMES = Number(process.env.FUZZ_FRAMES ?? 3_000);
const SEED = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Frames in flight per session. */
const WINDOW = 64;

/** Every row of every table, in a fixed order: two dumps are equal iff the data is. */
async function dump(dbUrl: string): Promise<string> {
  const sqlite = !dbUrl.startsWith('postgres');
  const tables = (
    await queryTestDb(
      dbUrl,
      sqlite
        ? `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
        : `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`,
    )
  ).map((r) => String(r.name));
  const out: string[] = [];
  // Heartbeats move on their own; nothing a frame does is in them.
  for (const table of tables.filter((t) => t !== 'server_processes')) {
    const rows = await queryTestDb(dbUrl, `SELECT * FROM ${table}`);
    const lines = rows.map((r) =>
      JSON.stringify(r, (_k, v: unknown) =>
        Buffer.isBuffer(v) ? v.toString('base64') : typeof v === 'bigint' ? String(v) : v,
      ),
    );
    out.push(`${table}\n${lines.sort().join('\n')}`);
  }
  return out.join('\n\n');
}

/** Waits until the devices that logged in are recorded (written after the login's answer). */
async function devicesRecorded(dbUrl: string, n: number): Promise<void> {
  await waitUntil(
    async () => Number((await queryTestDb(dbUrl, 'SELECT COUNT(*) AS n FROM session_devices'))[0]!.n) >= n,
    10_000,
    `${n} devices recorded`,
  );
}

interface Tally {
  sent: Record<string, number>;
  answers: Record<string, number>;
  problems: string[];
}

/**
 * Sends the frames on their sessions, WINDOW in flight per session, and waits for each session to have
 * answered all of its frames. Every frame to a session gets exactly one answer, in some order.
 */
async function blast(sessions: Record<FuzzTarget, RawClient>, frames: FuzzFrame[], tally: Tally): Promise<void> {
  const answered = (c: RawClient) => c.frames.length - c.events.length;
  const base = Object.fromEntries(Object.entries(sessions).map(([k, c]) => [k, answered(c)])) as Record<
    FuzzTarget,
    number
  >;
  const sent: Record<FuzzTarget, number> = { anon: 0, user: 0, server: 0 };
  for (const f of frames) {
    const c = sessions[f.target];
    // Keep WINDOW frames in flight on this session.
    await waitUntil(() => sent[f.target] - (answered(c) - base[f.target]) < WINDOW, 30_000, `answers on ${f.target}`);
    c.sendText(f.text);
    sent[f.target]++;
    tally.sent[f.kind] = (tally.sent[f.kind] ?? 0) + 1;
  }
  for (const t of Object.keys(sessions) as FuzzTarget[])
    await waitUntil(() => answered(sessions[t]) - base[t] >= sent[t], 60_000, `every frame on ${t} answered`);
  for (const t of Object.keys(sessions) as FuzzTarget[]) {
    const answers = sessions[t].frames.filter((f) => f.event !== true).slice(base[t]);
    assert.equal(answers.length, sent[t], `${t}: one answer per frame`);
    for (const a of answers) {
      const code = a.ok ? '200' : (a.error as { code: string }).code;
      // Op names the frames made up are one label, not thousands.
      const op = a.op === '' ? '-' : Object.hasOwn(opSchemas, String(a.op)) ? String(a.op) : '(made up)';
      const key = `${t} ${op} ${code}`;
      tally.answers[key] = (tally.answers[key] ?? 0) + 1;
      if (a.ok) {
        if (!MAY_SUCCEED.has(String(a.op))) tally.problems.push(`${key}: a frame that must fail succeeded`);
      } else if (!isErrorCode(code)) tally.problems.push(`${key}: undocumented error code`);
      else if (code === 'INTERNAL') tally.problems.push(`${key}: ${(a.error as { message: string }).message}`);
      else if (a.status !== ERROR_STATUS[code]) tally.problems.push(`${key}: status ${a.status}`);
    }
  }
}

describe('fuzzer: hostile frames to client and server sessions', () => {
  it(`${FRAMES} seeded frames change nothing, each gets one documented answer, and no one else notices`, async (t) => {
    t.diagnostic(`FUZZ_SEED=${SEED} FUZZ_FRAMES=${FRAMES}`);
    const dir = mkdtempSync(join(tmpdir(), 'shine-fuzz-'));
    const gamma = fakeServer('gamma');
    const alice = makeUser('alice', ['alpha']);
    const bob = makeUser('bob', ['alpha']);
    const carol = makeUser('carol', ['gamma']);
    const directoryFile = join(dir, 'directory.json');
    writeFileSync(directoryFile, JSON.stringify({ servers: [gamma.descriptor], users: [carol.profile] }));
    const configFile = join(dir, 'config.json');
    // Lifted, so the frames reach the checks behind the rate limit (RATE_LIMITED is tested elsewhere).
    writeFileSync(configFile, JSON.stringify({ rateLimit: { perSecond: 1_000_000, burst: 1_000_000 } }));
    await using server = await startServerProcess({
      env: {
        SHINE_SERVER_LOGIN: 'alpha',
        SHINE_DIRECTORY_FILE: directoryFile,
        SHINE_CONFIG_FILE: configFile,
        // The socket that never logs in must outlive a long run (the login deadline is tested elsewhere).
        SHINE_AUTH_TIMEOUT_MS: '3600000',
        SHINE_LOG_LEVEL: 'silent',
      },
    });
    try {
      // The state the frames must leave alone: two users, a pair and its edit, a pair from the peer.
      await using witness = await connectUser(server.wsUrl, bob, 'bob-phone');
      await using user = await connectUser(server.wsUrl, alice, 'alice-laptop');
      const taken = takenPairs(alice, bob, carol);
      for (const p of [taken.aliceOld, taken.aliceEdit])
        await user.call('SendMessagePair', { incomingBlobB64: p.incomingBlobB64, outgoingBlobB64: p.outgoingBlobB64 });
      const serverAuth = serverAuthPayload(gamma.seed, { from: 'gamma', to: 'alpha' });
      await using peer = await connectRaw(server.wsUrl);
      await peer.call('ServerAuth', serverAuth);
      await peer.call('ReceiveIncomingMessage', { incomingBlobB64: taken.carol.incomingBlobB64 });
      await using anon = await connectRaw(server.wsUrl);
      await waitUntil(() => witness.events.length >= 2, 10_000, 'bob has both messages');
      const witnessEvents = witness.events.length;
      await devicesRecorded(server.dbUrl, 2);
      const before = await dump(server.dbUrl);

      const world: FuzzWorld = { alice, bob, carol, taken, serverAuth };
      const frames = fc.sample(hostileFrames(world), { seed: SEED, numRuns: FRAMES });
      const tally: Tally = { sent: {}, answers: {}, problems: [] };
      await blast({ anon, user, server: peer }, frames, tally);
      t.diagnostic(`frames by kind ${JSON.stringify(tally.sent)}`);
      t.diagnostic(`answers by session, op and code ${JSON.stringify(tally.answers)}`);

      assert.deepEqual(tally.problems, [], `FUZZ_SEED=${SEED}`);
      process.kill(server.pid, 0); // still running
      assert.equal(await dump(server.dbUrl), before, `the database changed (FUZZ_SEED=${SEED})`);
      // The sessions the frames went to still work, and nobody else was disturbed.
      await assertSessionWorks(user);
      assert.ok(anon.isOpen && peer.isOpen);
      assert.equal(witness.events.length, witnessEvents, 'the bystander got no event from the frames');
      const fresh = textPair(alice, bob.login, { body: 'after the fuzz' });
      await user.call('SendMessagePair', {
        incomingBlobB64: fresh.incomingBlobB64,
        outgoingBlobB64: fresh.outgoingBlobB64,
      });
      await witness.waitFor(
        (f) => f.event === true && (f.payload as { messageKey?: string }).messageKey === fresh.incomingKey,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('frames a WebSocket server must refuse close only their own socket', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'shine-fuzz-'));
    await using server = await startServerProcess({ env: { SHINE_LOG_LEVEL: 'silent' } });
    try {
      const bob = makeUser('bob', ['local']);
      await using witness = await connectUser(server.wsUrl, bob, 'bob-phone');
      await devicesRecorded(server.dbUrl, 1);
      const before = await dump(server.dbUrl);
      const closes: number[] = [];
      for (const send of [
        (c: RawClient) => c.sendBinary(new Uint8Array([1, 2, 3])), // binary frames are not accepted
        (c: RawClient) => c.socket.send(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), { binary: false }), // not UTF-8
        (c: RawClient) => c.socket.send('x'.repeat(5 * 1024 * 1024)), // past the socket's 4 MiB
      ]) {
        const c = await connectRaw(server.wsUrl);
        send(c);
        closes.push((await c.closed).code);
      }
      assert.deepEqual(closes, [1003, 1007, 1009]);
      process.kill(server.pid, 0);
      await assertSessionWorks(witness);
      assert.equal(await dump(server.dbUrl), before);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
