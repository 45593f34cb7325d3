/** The Public log of one user: verified blocks newest first, an honest alert for one that fails, the owner's composer. */
import { Composer } from './chat-view.js';
import type { Messenger } from './messenger.js';
import type { LogEntry, OpenLog } from './public-log.js';
import { verifiedTitle } from './public-log.js';

const stampFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

export function LogView({ messenger, log, online }: { messenger: Messenger; log: OpenLog; online: boolean }) {
  const owner = log.mine ? 'Your' : `${log.login}’s`;
  const entries = [...log.entries].reverse();
  return (
    <section class="chat public-log" aria-label={`Public log of ${log.login}`}>
      <header class="chat-head">
        <button type="button" class="back" onClick={() => messenger.closeLog()}>
          <span aria-hidden="true">←</span> Back
        </button>
        <h2>{owner} public log</h2>
        <button
          type="button"
          disabled={log.loading || !online}
          onClick={() => void messenger.run(() => messenger.refreshLog())}
        >
          Refresh
        </button>
      </header>
      <div class="messages">
        {log.problem && (
          <p role="alert" class="log-problem" data-failed-index={log.problem.index}>
            <span aria-hidden="true">✗ </span>
            {log.problem.text}
          </p>
        )}
        {!log.loading && !log.problem && (
          <p role="status" class="log-summary">
            {log.entries.length === 0
              ? log.mine
                ? 'Nothing posted yet. What you post here is public and signed with your key.'
                : `${log.login} has not posted anything yet.`
              : `All ${log.entries.length} block${log.entries.length === 1 ? '' : 's'} verified in this browser with ${log.login}’s key.`}
          </p>
        )}
        {log.loading && <p class="hint">Loading and verifying…</p>}
        <ol aria-label="Blocks" class="blocks" reversed>
          {entries.map((e) => (
            <BlockItem key={e.index} login={log.login} entry={e} />
          ))}
        </ol>
      </div>
      {log.mine && (
        <Composer
          id="log-post"
          label="Post to your public log"
          placeholder="Post to your public log"
          submitLabel="Post"
          onSubmit={(text) => messenger.run(() => messenger.postToLog(text))}
        />
      )}
    </section>
  );
}

function BlockItem({ login, entry }: { login: string; entry: LogEntry }) {
  return (
    <li class="block" data-index={entry.index} data-verified="true">
      {entry.text !== null ? (
        <p class="text">{entry.text}</p>
      ) : (
        <p class="text opaque">
          Block of kind {entry.kind}, {entry.size} byte{entry.size === 1 ? '' : 's'} (not a text post)
        </p>
      )}
      <span class="meta">
        <span class="index">#{entry.index}</span>
        <time dateTime={new Date(entry.timeMs).toISOString()}>{stampFormat.format(entry.timeMs)}</time>
        <span class="verified-mark" title={verifiedTitle(login, entry)}>
          <span aria-hidden="true">✓</span> Verified
        </span>
      </span>
    </li>
  );
}
