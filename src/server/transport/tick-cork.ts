/**
 * Frames written to one socket in one tick leave in one write (docs/performance.md, "one write a tick").
 *
 * A group commit settles the requests of many clients at once, and a server's answers and calls to one
 * peer server then go out in the same tick. ws writes each frame at once, one `writev` each; held until the
 * tick's microtasks have run, a socket's frames go to the kernel together and reach the other side in one
 * read. Nothing waits longer than the current tick.
 */
import type { Writable } from 'node:stream';

const held = new WeakSet<Writable>();

/** Holds the socket's writes until the end of this tick; call it before each write. */
export function holdForTick(socket: Writable): void {
  if (held.has(socket)) return;
  held.add(socket);
  socket.cork();
  process.nextTick(release, socket);
}

function release(socket: Writable): void {
  held.delete(socket);
  // After end() or destroy() the socket is already uncorked: uncork() then does nothing.
  socket.uncork();
}
