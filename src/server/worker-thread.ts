/**
 * Worker threads whose code is CommonJS text run with `eval`: the same text runs under tsx and from the
 * built package, where no separate worker file exists. The packages the text requires are resolved here
 * and passed in `workerData.paths`, since an eval'd thread cannot resolve them from its own location.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * Starts `source` on a thread with `workerData = { ...data, paths }`, where `paths[name]` is the resolved
 * entry of each package in `packages`. The thread starts unref'd: while idle it keeps no process alive
 * (see BusyRef for the time it has work).
 */
export function evalWorker(source: string, packages: readonly string[], data: Record<string, unknown> = {}): Worker {
  const require = createRequire(import.meta.url);
  const paths = Object.fromEntries(packages.map((p) => [p, require.resolve(p)]));
  const worker = new Worker(source, { eval: true, workerData: Object.assign({}, data, { paths }) });
  worker.unref();
  return worker;
}

/** Keeps the process alive while a thread has work in flight, and only then. */
export class BusyRef {
  private n = 0;

  constructor(private readonly worker: Worker) {}

  begin(): void {
    if (this.n++ === 0) this.worker.ref();
  }

  end(): void {
    if (this.n > 0 && --this.n === 0) this.worker.unref();
  }
}

/** Collects the items added during one turn of the event loop and hands them to `flush` together after it. */
export function perTurn<T>(flush: (items: T[]) => void): (item: T) => void {
  let items: T[] = [];
  return (item) => {
    if (items.length === 0)
      setImmediate(() => {
        const all = items;
        items = [];
        flush(all);
      });
    items.push(item);
  };
}

/**
 * Bundles a TypeScript entry into one ES module for Node.js, its packages left as imports (esbuild, a
 * development package: for tests and for threads started under tsx, whose loader a thread does not inherit).
 */
export async function bundleForNode(entry: string, outfile: string): Promise<void> {
  const { build } = await import('esbuild');
  await build({
    entryPoints: [entry],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    outfile,
    logLevel: 'error',
  });
}
