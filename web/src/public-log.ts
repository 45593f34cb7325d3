/**
 * The Public log: a user's chain (docs/protocol.md §14) as the web client shows it — pure rules, no I/O.
 * Every block shown was verified in this browser with the user's key (the SDK's getChain / checkChainItems).
 */
import type { Block, VerifiedChain } from '../../src/client/index.js';
import { TEXT_POST_KIND, blockHash, chainProblemWords } from '../../src/client/index.js';
import { strictUtf8 } from '../../src/protocol/bytes.js';

/** One verified block as the list shows it. */
export interface LogEntry {
  index: number;
  blockHash: string;
  timeMs: number;
  kind: number;
  /** The body as text for a text post (kind 1) that is valid UTF-8; null otherwise. */
  text: string | null;
  size: number;
}

/** The Public log of one user, open in the right pane. */
export interface OpenLog {
  login: string;
  /** The signed-in user's own log: it has a composer. */
  mine: boolean;
  /** Verified blocks, oldest first. */
  entries: LogEntry[];
  /** The last verified block: new blocks must follow it. */
  head: Block | null;
  /** The first block that failed, in words; blocks after it are not shown. */
  problem: { index: number; text: string } | null;
  loading: boolean;
  /** Grows with every change, so views keyed on it re-render. */
  version: number;
}

export function entryOf(block: Block): LogEntry {
  const text = block.kind === TEXT_POST_KIND ? strictUtf8(block.body) : null;
  return {
    index: block.index,
    blockHash: blockHash(block),
    timeMs: block.timeMs,
    kind: block.kind,
    text,
    size: block.body.length,
  };
}

export function emptyLog(login: string, mine: boolean): OpenLog {
  return { login, mine, entries: [], head: null, problem: null, loading: true, version: 0 };
}

/** The log after verified blocks (that follow its head) and the problem the check stopped at, if any. */
export function withBlocks(log: OpenLog, blocks: readonly Block[], problem: VerifiedChain['problem']): OpenLog {
  return {
    ...log,
    entries: [...log.entries, ...blocks.map(entryOf)],
    head: blocks.at(-1) ?? log.head,
    problem: problem && { index: problem.index, text: problemSentence(log.login, problem) },
    loading: false,
    version: log.version + 1,
  };
}

/** "Block 3 failed verification: it is not signed by alice's key. …" — what the alert says. */
export function problemSentence(login: string, problem: NonNullable<VerifiedChain['problem']>): string {
  const what = chainProblemWords(problem, { owner: login, apostrophe: '’' });
  return `Block ${problem.index} failed verification: it ${what}. It and the blocks after it are not shown.`;
}

/** The verified mark's hover text: what was checked. */
export function verifiedTitle(login: string, entry: LogEntry): string {
  const link = entry.index === 0 ? 'the first block of the log' : `follows block ${entry.index - 1}`;
  return `Verified in this browser: signed with ${login}’s key; ${link}; hash ${entry.blockHash.slice(0, 16)}…`;
}
