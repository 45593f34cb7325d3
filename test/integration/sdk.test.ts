import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import WebSocket from 'ws';
import type { EventPayload, Identity, KnownEvents, OpenedMessage } from '../../src/client/index.js';
import { ShineClient, createIdentity, makeProfile } from '../../src/client/index.js';
import { fromUtf8, utf8 } from '../../src/protocol/bytes.js';
import type { TestNetwork } from '../helpers/network.js';
import { startNetwork } from '../helpers/network.js';
import { TEST_DB_POOL_SIZE, freshTestDb } from '../helpers/test-db.js';
import { waitUntil } from '../helpers/wait.js';

/** Resolves with the first event of op that matches; subscribe before causing it. */
function nextEvent<K extends keyof KnownEvents>(
  client: ShineClient,
  op: K,
  match: (p: EventPayload<K>) => boolean = () => true,
  timeoutMs = 5000,
): Promise<EventPayload<K>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no ${op} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const off = client.on(op, (p) => {
      if (!match(p)) return;
      clearTimeout(timer);
      off();
      resolve(p);
    });
  });
}

async function openNext(client: ShineClient, messageType: number): Promise<OpenedMessage> {
  return client.decryptEvent(await nextEvent(client, 'DirectMessage', (e) => e.messageType === messageType));
}

describe('SDK against a real server', () => {
  let net: TestNetwork;
  let wsUrl: string;
  const alice = createIdentity('alice');
  const bob = createIdentity('bob');
  let a: ShineClient;
  let a2: ShineClient;
  let b: ShineClient;

  async function session(identity: Identity, deviceId: string): Promise<ShineClient> {
    const client = await ShineClient.connect(wsUrl, { WebSocket });
    await client.login(identity, deviceId);
    return client;
  }

  before(async () => {
    net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    wsUrl = net.servers[0]!.wsUrl;
    const reg = await ShineClient.connect(wsUrl, { WebSocket });
    for (const id of [alice, bob]) await reg.register(makeProfile(id, ['alpha'], 1, Date.now()));
    await reg.close();
    [a, a2, b] = await Promise.all([
      session(alice, 'alice-phone'),
      session(alice, 'alice-laptop'),
      session(bob, 'bob-phone'),
    ]);
  });
  after(async () => {
    await Promise.all([a, a2, b].map((c) => c?.close()));
    await net?.close();
  });

  it('refuses to log in a user this server does not know', async () => {
    const client = await ShineClient.connect(wsUrl, { WebSocket });
    await assert.rejects(client.login(createIdentity('mallory'), 'd1'), { code: 'AUTH_FAILED', status: 401 });
    await client.close();
  });

  it('text → bob decrypts it, reads it, alice sees the receipt and readAtMs; edit keeps the key; delete removes it', async () => {
    const bobGets = openNext(b, 1);
    const aliceOtherDeviceGets = openNext(a2, 2);
    const sent = await a.sendText('bob', 'hello bob 👋');
    assert.equal(sent.deliveryState, 'delivered');
    assert.equal(sent.messageKey, sent.outgoingKey);

    const incoming = await bobGets;
    assert.equal(incoming.kind === 'text' && incoming.text, 'hello bob 👋');
    assert.equal(incoming.messageKey, sent.incomingKey);
    const own = await aliceOtherDeviceGets;
    assert.equal(own.kind === 'text' && own.text, 'hello bob 👋');
    assert.equal(await b.ack([incoming.messageKey]), 1);
    assert.equal((await b.conversations())[0]?.unreadCount, 1);

    const receipt = openNext(a, 3);
    const readAtMs = Date.now();
    await b.markRead(incoming.container, readAtMs);
    const r = await receipt;
    assert.deepEqual(r.kind === 'receipt' && [r.readAtMs, r.targetBaseKey], [readAtMs, sent.baseKey]);
    assert.equal((await b.conversations())[0]?.unreadCount, 0);

    const aliceView = await a.history('bob');
    assert.equal(aliceView.items.length, 1);
    assert.deepEqual(
      (({ messageType, text, readAtMs, deliveryState }) => ({ messageType, text, readAtMs, deliveryState }))(
        aliceView.items[0]!,
      ),
      { messageType: 2, text: 'hello bob 👋', readAtMs, deliveryState: 'delivered' },
    );
    const bobView = await b.history('alice');
    assert.deepEqual([bobView.items[0]?.text, bobView.items[0]?.readAtMs], ['hello bob 👋', readAtMs]);

    const edited = openNext(b, 1);
    const edit = await a.editText('bob', sent, 'hello bob, edited');
    assert.equal(edit.messageKey, sent.messageKey);
    const e = await edited;
    assert.ok(e.container.revisionTimeMs > 0);
    assert.equal(e.kind === 'text' && e.text, 'hello bob, edited');
    const afterEdit = await b.history('alice');
    assert.deepEqual(
      afterEdit.items.map((i) => i.text),
      ['hello bob, edited'],
    );

    const deleted = openNext(b, 5);
    await a.deleteMessage(sent);
    const d = await deleted;
    assert.equal(d.kind === 'deleteMessage' && d.targetBaseKey, sent.baseKey);
    assert.equal((await a.history('bob')).items.length, 0);
    assert.equal((await b.history('alice')).items.length, 0);
  });

  it('deletes a conversation for both sides, and pages history', async () => {
    for (const text of ['one', 'two', 'three']) await b.sendText('alice', text);
    const page1 = await a.history('bob', { limit: 2 });
    assert.deepEqual(
      page1.items.map((i) => i.text),
      ['three', 'two'],
    );
    assert.ok(page1.next);
    const page2 = await a.history('bob', { before: page1.next, limit: 2 });
    assert.deepEqual(
      page2.items.map((i) => i.text),
      ['one'],
    );
    assert.equal(page2.next, null);

    const cleared = openNext(a, 7);
    await b.deleteConversation('alice', Date.now());
    const c = await cleared;
    assert.equal(c.kind, 'deleteConversation');
    assert.equal((await a.history('bob')).items.length, 0);
    assert.equal((await b.history('alice')).items.length, 0);
  });

  it('stores settings encrypted and reads them back', async () => {
    await a.setSetting('theme', utf8('dark'), 1000);
    const [setting] = await a2.getSettings(['theme']);
    assert.equal(setting && fromUtf8(setting.value), 'dark');
    await a.setSetting('theme', null, 2000);
    assert.deepEqual(await a2.getSettings(['theme']), []);
  });

  it('reads settings past one answer (about 2 MB of values) page by page', async () => {
    const keys = Array.from({ length: 40 }, (_, i) => `big-${String(i).padStart(2, '0')}`);
    for (const [i, key] of keys.entries()) await a.setSetting(key, new Uint8Array(60_000).fill(i), 3000);
    const all = (await a2.getSettings()).filter((s) => s.key.startsWith('big-'));
    assert.deepEqual(
      all.map((s) => [s.key, s.value.length, s.value[0]]),
      keys.map((k, i) => [k, 60_000, i]),
    );
  });
});

/** Runs the CLI as a user would (TypeScript through tsx) and collects its output. */
function cli(args: string[]): {
  done: Promise<{ code: number | null; stdout: string; stderr: string }>;
  stdout: () => string;
  kill: (signal?: NodeJS.Signals) => void;
} {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += String(d)));
  child.stderr.on('data', (d: Buffer) => (stderr += String(d)));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  return { done, stdout: () => stdout, kill: (signal = 'SIGTERM') => void child.kill(signal) };
}

async function run(args: string[]): Promise<string> {
  const r = await cli(args).done;
  assert.equal(r.code, 0, `shine ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout;
}

const until = (condition: () => boolean, what: string, timeoutMs = 15_000): Promise<void> =>
  waitUntil(condition, timeoutMs, what);

describe('CLI smoke test', () => {
  it('serve starts a server and stops on SIGINT', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'shine-serve-'));
    const db = await freshTestDb(dataDir);
    try {
      const serve = cli([
        'serve',
        '--port',
        '0',
        '--data-dir',
        dataDir,
        '--db',
        db.url,
        '--db-pool-size',
        String(TEST_DB_POOL_SIZE),
        '--server-login',
        'gamma',
        '--log-level',
        'silent',
      ]);
      await until(() => /WebSocket +ws:\/\/127\.0\.0\.1:\d+\/ws/.test(serve.stdout()), 'serve to listen');
      const wsUrl = /WebSocket +(ws:\S+)/.exec(serve.stdout())![1]!;
      const client = await ShineClient.connect(wsUrl, { WebSocket });
      assert.equal((await client.request('AuthChallenge', {})).serverLogin, 'gamma');
      await client.close();
      serve.kill('SIGINT');
      assert.equal((await serve.done).code, 0);
    } finally {
      await db.drop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('identity create, register, watch, send, history', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'beta' }] });
    const dir = await mkdtemp(join(tmpdir(), 'shine-cli-'));
    try {
      const server = net.servers[0]!.wsUrl;
      const file = (login: string): string => join(dir, `${login}.identity.json`);
      for (const login of ['carol', 'dave']) {
        assert.match(await run(['identity', 'create', '--login', login, '--out', file(login)]), /created identity/);
        assert.match(
          await run(['register', '--identity', file(login), '--server', server]),
          new RegExp(`registered ${login} on beta`),
        );
      }
      const watch = cli(['watch', '--identity', file('dave'), '--server', server]);
      await until(() => watch.stdout().includes('watching dave'), 'watch to start');
      assert.match(
        await run(['send', '--identity', file('carol'), '--server', server, '--to', 'dave', 'hi dave']),
        /^delivered\n {2}dave sees message carol\|dave\|\d+\|\d+\|1; your copy is carol\|dave\|\d+\|\d+\|2/,
      );
      await until(() => watch.stdout().includes('message carol → dave: "hi dave"'), 'watch to print the message');
      watch.kill();
      assert.equal((await watch.done).code, 0);
      assert.match(
        await run(['history', '--identity', file('carol'), '--server', server, '--with', 'dave']),
        /carol → dave: "hi dave" \[delivered\]/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
