/**
 * A child process of bench/idle-sessions.ts: registers users idle<from>..idle<from+count-1>, logs each
 * in on its own socket and holds the sockets open and silent (ws answers the server's pings by itself)
 * until the parent disconnects. Holding them outside the bench process keeps the measured request
 * load's event loop free of 20 000 sockets, and spreads the client side over both cores.
 *
 * Parent → child: {wsUrl, serverLogin, from, count, concurrency}. Child → parent: {opened} every 1 000
 * sessions, then {ready: count}, or {error}.
 */
import type { RawClient } from '../../test/helpers/raw-client.js';
import { connectUser, makeUser } from '../../test/helpers/users.js';

export interface HolderTask {
  wsUrl: string;
  serverLogin: string;
  from: number;
  count: number;
  /** Registrations + logins in flight at once. */
  concurrency: number;
}

export type HolderReport = { opened: number } | { ready: number } | { error: string };

const report = (msg: HolderReport): void => void process.send!(msg);

async function hold(task: HolderTask): Promise<RawClient[]> {
  const sessions: RawClient[] = [];
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < task.count) {
      const i = task.from + next++;
      sessions.push(await connectUser(task.wsUrl, makeUser(`idle${i}`, [task.serverLogin]), 'd1'));
      if (sessions.length % 1000 === 0) report({ opened: sessions.length });
    }
  };
  await Promise.all(Array.from({ length: task.concurrency }, lane));
  return sessions;
}

process.once('message', (task: HolderTask) => {
  hold(task).then(
    (sessions) => {
      report({ ready: sessions.length });
      // Held until the parent goes away: its exit (or disconnect) ends this process and every socket.
      process.once('disconnect', () => process.exit(0));
    },
    (err: unknown) => {
      report({ error: err instanceof Error ? err.message : String(err) });
      process.exit(1);
    },
  );
});
