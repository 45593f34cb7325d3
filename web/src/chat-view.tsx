/** One open chat: history (older pages while scrolling up), ticks, read receipts on view, the composer. */
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { ChatMessage, Tick } from './chat.js';
import { TICK_TEXT, evidenceOf, explainTick, formatClock, tickOf } from './chat.js';
import type { Messenger, OpenChat } from './messenger.js';

/** A message counts as shown when half of it (or half of the visible area, for a tall one) is in view. */
function shownEnough(e: IntersectionObserverEntry): boolean {
  if (!e.isIntersecting) return false;
  const rootHeight = e.rootBounds?.height ?? Infinity;
  return e.intersectionRatio >= 0.5 || e.intersectionRect.height >= rootHeight / 2;
}

export function ChatView({
  messenger,
  chat,
  online,
  inCall,
}: {
  messenger: Messenger;
  chat: OpenChat;
  online: boolean;
  inCall: boolean;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const list = useRef<HTMLUListElement>(null);
  const topSentinel = useRef<HTMLDivElement>(null);
  const atBottom = useRef(true);
  const before = useRef<{ first?: string; last?: string; height: number }>({ height: 0 });
  const [editing, setEditing] = useState<ChatMessage | null>(null);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const messages = chat.log.list();

  // Keep the reader's place: follow new messages only when at the bottom; older pages grow upwards.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const first = messages[0]?.baseKey;
    const last = messages.at(-1)?.baseKey;
    const prev = before.current;
    if (last !== prev.last && (atBottom.current || messages.at(-1)?.mine)) el.scrollTop = el.scrollHeight;
    else if (first !== prev.first && prev.first !== undefined) el.scrollTop += el.scrollHeight - prev.height;
    before.current = { first, last, height: el.scrollHeight };
  }, [chat.version, chat.log]);

  // Read receipts for the peer's messages that are in view while the page is visible.
  const inView = useRef(new Set<string>());
  const observer = useRef<IntersectionObserver | null>(null);
  useEffect(() => {
    const seen = inView.current;
    const markVisible = () => {
      if (document.visibilityState === 'visible') for (const key of seen) messenger.markShown(key);
    };
    const io = new IntersectionObserver(
      (entries) => {
        for (const e of entries) {
          const key = (e.target as HTMLElement).dataset.baseKey;
          if (!key) continue;
          if (shownEnough(e)) seen.add(key);
          else seen.delete(key);
        }
        markVisible();
      },
      { root: scroller.current, threshold: [0, 0.25, 0.5, 0.75, 1] },
    );
    observer.current = io;
    document.addEventListener('visibilitychange', markVisible);
    return () => {
      io.disconnect();
      seen.clear();
      document.removeEventListener('visibilitychange', markVisible);
    };
  }, [messenger, chat.log]);
  useLayoutEffect(() => {
    const io = observer.current;
    if (!io || !list.current) return;
    io.disconnect();
    for (const el of list.current.querySelectorAll('li[data-unread]')) io.observe(el);
    // A receipt that failed while offline is sent again once online, for what is still in view.
    if (online && document.visibilityState === 'visible') for (const key of inView.current) messenger.markShown(key);
  }, [chat.version, chat.log, online]);

  // Older history when the top of the list scrolls into view.
  useEffect(() => {
    const el = topSentinel.current;
    if (!el || !chat.hasMore) return;
    const io = new IntersectionObserver(
      (entries) => {
        if (entries.some((e) => e.isIntersecting)) void messenger.run(() => messenger.loadOlder());
      },
      { root: scroller.current },
    );
    io.observe(el);
    return () => io.disconnect();
  }, [messenger, chat.hasMore, chat.next]);

  return (
    <section class="chat" aria-label={`Chat with ${chat.peer}`}>
      <header class="chat-head">
        <button type="button" class="back" onClick={() => messenger.closeChat()}>
          <span aria-hidden="true">←</span> Back
        </button>
        <h2>{chat.peer}</h2>
        <button type="button" onClick={() => void messenger.run(() => messenger.openLog(chat.peer))}>
          Public log
        </button>
        <button
          type="button"
          onClick={() => void messenger.run(() => messenger.startCall())}
          disabled={inCall || !online}
        >
          Call
        </button>
        <button type="button" onClick={() => setConfirmDelete(true)} disabled={confirmDelete}>
          Delete conversation
        </button>
      </header>
      {confirmDelete && (
        <ConfirmBar
          peer={chat.peer}
          onConfirm={async () => {
            if (await messenger.run(() => messenger.deleteConversation())) setConfirmDelete(false);
          }}
          onCancel={() => setConfirmDelete(false)}
        />
      )}
      <div
        class="messages"
        ref={scroller}
        onScroll={(e) => {
          const el = e.currentTarget;
          atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
        }}
      >
        <div ref={topSentinel} class="sentinel" />
        {chat.hasMore && (
          <button
            type="button"
            class="link older"
            disabled={chat.loadingOlder}
            onClick={() => void messenger.run(() => messenger.loadOlder())}
          >
            {chat.loadingOlder ? 'Loading…' : 'Load older messages'}
          </button>
        )}
        <ul aria-label="Messages" ref={list}>
          {messages.map((m) => (
            <MessageItem
              key={m.baseKey}
              m={m}
              onEdit={() => setEditing(m)}
              onDelete={() => void messenger.run(() => messenger.deleteMessage(m.baseKey))}
            />
          ))}
        </ul>
        {messages.length === 0 && <p class="hint">No messages yet. Say hello.</p>}
      </div>
      <Composer
        key={chat.peer}
        id="composer"
        label="Message"
        submitLabel="Send"
        editing={editing}
        onCancelEdit={() => setEditing(null)}
        onSubmit={(text) =>
          editing
            ? messenger.run(() => messenger.edit(editing.baseKey, text)).then((ok) => (ok && setEditing(null), ok))
            : messenger.run(() => messenger.send(text))
        }
      />
    </section>
  );
}

function ConfirmBar(props: { peer: string; onConfirm: () => Promise<void>; onCancel: () => void }) {
  const confirm = useRef<HTMLButtonElement>(null);
  useEffect(() => confirm.current?.focus(), []);
  return (
    <div class="confirm" role="group" aria-label="Confirm deleting the conversation">
      <span>Delete every message with {props.peer}, for both of you?</span>
      <button type="button" class="danger" ref={confirm} onClick={() => void props.onConfirm()}>
        Delete for both
      </button>
      <button type="button" onClick={props.onCancel}>
        Cancel
      </button>
    </div>
  );
}

function MessageItem({ m, onEdit, onDelete }: { m: ChatMessage; onEdit: () => void; onDelete: () => void }) {
  const tick = tickOf(m);
  const evidence = evidenceOf(m);
  const explanation = explainTick(m);
  const [explained, setExplained] = useState(false);
  return (
    <li
      class={m.mine ? 'msg mine' : 'msg theirs'}
      data-delivery-state={tick ?? undefined}
      data-verified={evidence === undefined ? undefined : String(evidence?.verified === true)}
      data-base-key={m.baseKey}
      data-unread={!m.mine && m.readAtMs === null ? '' : undefined}
    >
      <p class="text">{m.text ?? <em>This message could not be opened ({m.problem}).</em>}</p>
      <span class="meta">
        {m.revisionTimeMs > 0 && <span class="edited">edited</span>}
        <time dateTime={new Date(m.timeMs).toISOString()}>{formatClock(m.timeMs)}</time>
        {tick && (
          <Ticks
            tick={tick}
            verified={evidence?.verified === true}
            explanation={explanation}
            expanded={explained}
            onToggle={() => setExplained(!explained)}
          />
        )}
      </span>
      {explained && explanation !== null && (
        <span class="proof-note" role="note">
          {explanation}
        </span>
      )}
      <span class="actions">
        {m.mine && m.text !== null && (
          <button type="button" class="link" onClick={onEdit}>
            Edit
          </button>
        )}
        <button type="button" class="link" onClick={onDelete}>
          Delete
        </button>
      </span>
    </li>
  );
}

/**
 * The seed's ticks: ✓ grey (accepted), ✓ light (delivered), ✓✓ (read), red ! (failed). A delivered or
 * read tick is a button: filled when a signature backs it, outlined when not; its title (hover) and a
 * tap say why (docs/web-client.md, "Verified ticks").
 */
function Ticks(props: {
  tick: Tick;
  verified: boolean;
  explanation: string | null;
  expanded: boolean;
  onToggle: () => void;
}) {
  const { tick, verified, explanation } = props;
  const icon = <span aria-hidden="true">{tick === 'failed' ? '!' : tick === 'read' ? '✓✓' : '✓'}</span>;
  if (explanation === null)
    return (
      <span class={`ticks ${tick}`}>
        {icon}
        <span class={tick === 'failed' ? 'failed-text' : 'sr-only'}>{TICK_TEXT[tick]}</span>
      </span>
    );
  return (
    <button
      type="button"
      class={`ticks ${tick} ${verified ? 'verified' : 'unverified'}`}
      title={explanation}
      aria-label={`${TICK_TEXT[tick]}, ${verified ? 'verified' : 'not verified'}`}
      aria-expanded={props.expanded}
      onClick={props.onToggle}
    >
      {icon}
      <span class="sr-only">{TICK_TEXT[tick]}</span>
    </button>
  );
}

/**
 * A text box with its button: Enter submits, Shift+Enter starts a new line; with `editing`, Escape or
 * "Cancel edit" leaves the edit. The chat's composer and the Public log's.
 */
export function Composer(props: {
  id: string;
  label: string;
  submitLabel: string;
  placeholder?: string;
  editing?: ChatMessage | null;
  onCancelEdit?: () => void;
  onSubmit: (text: string) => Promise<boolean>;
}) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const input = useRef<HTMLTextAreaElement>(null);
  // In the commit that shows the edit, not after the next paint: text typed at once after "Edit" (or a
  // message sent at once after the edit is saved) must not be overwritten by the message's old text.
  useLayoutEffect(() => {
    setText(props.editing?.text ?? '');
    input.current?.focus();
  }, [props.editing]);
  const submit = async () => {
    const value = text.trim();
    if (!value || busy) return;
    setBusy(true);
    if (await props.onSubmit(value)) setText('');
    setBusy(false);
    input.current?.focus();
  };
  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
    >
      {props.editing && (
        <p class="editing">
          Editing a message{' '}
          <button type="button" class="link" onClick={props.onCancelEdit}>
            Cancel edit
          </button>
        </p>
      )}
      <div class="row">
        <label for={props.id} class="sr-only">
          {props.label}
        </label>
        <textarea
          id={props.id}
          ref={input}
          rows={1}
          placeholder={props.placeholder}
          value={text}
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={(e) => {
            // Enter sends, Shift+Enter starts a new line; Escape leaves an edit.
            if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
              e.preventDefault();
              void submit();
            } else if (e.key === 'Escape' && props.editing) props.onCancelEdit?.();
          }}
        />
        <button type="submit" disabled={busy}>
          {props.editing ? 'Save' : props.submitLabel}
        </button>
      </div>
    </form>
  );
}
