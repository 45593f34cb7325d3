/** Runs the `shine` CLI as a real process in a private HOME. */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import {
  ShineClient,
  createIdentity,
  fetchServerDescriptor,
  identityToJson,
  makeProfile,
} from '../../src/client/index.js';
import type { TestNetwork } from './network.js';
import { startNetwork } from './network.js';
import { cliBundle } from './cli-bundle.js';
import { waitUntil } from './wait.js';
import { after, before } from 'node:test';

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A CLI process left running (watch); its output so far is readable at any time. */
export interface RunningCli {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Waits until stdout (or stderr) matches. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr', timeoutMs?: number): Promise<void>;
  stop(): Promise<CliResult>;
}

/** A temporary HOME with its own XDG config folder, so identities never land in the real one. */
export class CliHome implements Disposable {
  readonly dir = mkdtempSync(join(tmpdir(), 'shine-cli-'));
  readonly env: Record<string, string> = {
    HOME: this.dir,
    XDG_CONFIG_HOME: join(this.dir, 'config'),
    SHINE_ADMIN_TOKEN: '',
  };

  async start(args: string[], opts: { input?: string; env?: Record<string, string> } = {}): Promise<RunningCli> {
    const child = spawn(process.execPath, [await cliBundle(), ...args], {
      env: { ...process.env, ...this.env, ...opts.env },
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    if (opts.input !== undefined) child.stdin!.end(opts.input);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    return {
      child,
      stdout: () => stdout,
      stderr: () => stderr,
      waitFor: (pattern, stream = 'stdout', timeoutMs = 30_000) =>
        waitUntil(
          () => pattern.test(stream === 'stdout' ? stdout : stderr),
          timeoutMs,
          `${pattern} in ${stream} of shine ${args.join(' ')} (so far: ${stdout} ${stderr})`,
        ),
      stop: async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        return { code: await exited, stdout, stderr };
      },
    };
  }

  /**
   * An identity in this HOME's identities folder, registered on the server, made in this process:
   * the setup the CLI's own tests (identity create, register) cover, without a process per user.
   */
  async addUser(login: string, wsUrl: string): Promise<void> {
    const identity = createIdentity(login);
    const dir = join(this.env.XDG_CONFIG_HOME!, 'shine', 'identities');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    writeFileSync(join(dir, `${login}.identity.json`), identityToJson(identity), { mode: 0o600 });
    const serverLogin = (await fetchServerDescriptor(wsUrl)).serverLogin;
    const client = await ShineClient.connect(wsUrl, { WebSocket });
    try {
      await client.register(makeProfile(identity, [serverLogin], 1, Date.now()));
    } finally {
      await client.close();
    }
  }

  /** Runs a command to its end. */
  async run(args: string[], opts: { input?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
    const cli = await this.start(args, opts);
    const code = await new Promise<number | null>((resolve) => cli.child.once('close', resolve));
    return { code, stdout: cli.stdout(), stderr: cli.stderr() };
  }

  [Symbol.dispose](): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** alpha (admin token `tok`) and beta, federated, with alice and bob of home registered on alpha. */
export async function startAlphaBeta(home: CliHome): Promise<TestNetwork> {
  const net = await startNetwork({
    servers: [{ serverLogin: 'alpha', adminToken: 'tok' }, { serverLogin: 'beta' }],
    federate: true,
  });
  for (const login of ['alice', 'bob']) await home.addUser(login, net.servers[0]!.wsUrl);
  return net;
}

/** Registers hooks that start startAlphaBeta before the suite's tests and close it after them. */
export function useAlphaBeta(home: CliHome): { net(): TestNetwork; alpha(): string } {
  let net: TestNetwork | null = null;
  before(async () => void (net = await startAlphaBeta(home)));
  after(() => net?.close());
  return { net: () => net!, alpha: () => net!.servers[0]!.wsUrl };
}
