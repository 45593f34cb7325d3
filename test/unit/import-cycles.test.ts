/**
 * Dependencies point one way (protocol ← store ← areas ← api ← transport ← app): no module of src/
 * may reach itself through its imports, type-only imports and re-exports included. A new cycle fails
 * here with its path.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';

const SRC = resolve(import.meta.dirname, '../../src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sourceFiles(p);
    return p.endsWith('.ts') ? [p] : [];
  });
}

/** Relative imports of a file (static, dynamic and `import('…')` types, re-exports), as .ts paths. */
export function importsOf(file: string, text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]!);
  return specs.map((s) => resolve(dirname(file), s.replace(/\.js$/, '.ts')));
}

/** Every cycle's path, each found once from its first module in file order. */
export function findCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string): void => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (state.get(next) === 'open') cycles.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of graph.keys()) if (!state.has(node)) visit(node);
  return cycles;
}

describe('import graph of src/', () => {
  it('finds a cycle when there is one (the check itself)', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
    ]);
    assert.deepEqual(findCycles(graph), [['a', 'b', 'c', 'a']]);
    assert.deepEqual(importsOf('/x/y.ts', "import type { T } from '../z.js';\nexport * from './w.js';"), [
      '/z.ts',
      '/x/w.ts',
    ]);
  });

  it('has no cycle, type-only imports included', () => {
    const files = sourceFiles(SRC);
    const graph = new Map(files.map((f) => [f, importsOf(f, readFileSync(f, 'utf8'))]));
    const cycles = findCycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(' → '));
    assert.deepEqual(cycles, []);
  });
});
