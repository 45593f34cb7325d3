/**
 * Calls made in one turn of the event loop, served by one statement: the first call of a turn schedules
 * `run` for the turn's end, which gets every waiting call's input and answers each by its position (or
 * fails them all). A round trip each cost the server more than the statement's own work when the calls
 * come in bursts, as a batch of stored pairs answered in one turn makes them (docs/performance.md).
 *
 * With `keyOf`, a call whose key is already in the statement waits for the next one, so a statement holds
 * each key once: a write whose outcome depends on the row as an earlier call of the same key left it.
 */
export class PerTurn<I, R> {
  private waiting: { input: I; resolve: (r: R) => void; reject: (err: unknown) => void }[] = [];

  constructor(
    private readonly run: (inputs: I[]) => Promise<R[]>,
    private readonly keyOf?: (input: I) => string,
  ) {}

  call(input: I): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      if (this.waiting.length === 0) setImmediate(() => this.serve());
      this.waiting.push({ input, resolve, reject });
    });
  }

  private serve(): void {
    let calls = this.waiting;
    this.waiting = [];
    if (this.keyOf) {
      const keys = new Set<string>();
      const now: typeof calls = [];
      for (const call of calls) {
        const key = this.keyOf(call.input);
        if (keys.has(key)) this.waiting.push(call);
        else {
          keys.add(key);
          now.push(call);
        }
      }
      if (this.waiting.length > 0) setImmediate(() => this.serve());
      calls = now;
    }
    this.run(calls.map((c) => c.input)).then(
      (results) => calls.forEach((c, i) => c.resolve(results[i]!)),
      (err: unknown) => calls.forEach((c) => c.reject(err)),
    );
  }
}
