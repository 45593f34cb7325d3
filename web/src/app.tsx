/** The screens: Welcome (no identity yet) and Home (conversations, the open chat). */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { CallView } from './call-view.js';
import { ChatView } from './chat-view.js';
import { LogView } from './log-view.js';
import type { MessengerState } from './messenger.js';
import { Messenger, createAccount, describeError, serverWsUrl } from './messenger.js';
import type { Account } from './vault.js';
import { MIN_PASSPHRASE_LENGTH, exportBackup, importBackup, loadAccount, saveAccount } from './vault.js';

export function App() {
  const [account, setAccount] = useState<Account | null | undefined>(undefined);
  const [loadError, setLoadError] = useState<string | null>(null);
  useEffect(() => {
    loadAccount().then(setAccount, (err: unknown) => {
      setLoadError(describeError(err));
      setAccount(null);
    });
  }, []);
  if (account === undefined) return <p class="loading">Loading…</p>;
  if (account === null)
    return (
      <Welcome
        initialError={loadError}
        onReady={async (a) => {
          await saveAccount(a);
          setAccount(a);
        }}
      />
    );
  return <Home account={account} />;
}

/** A form's action: busy while it runs, and its failure as a message a person can read. */
function useAction(initialError: string | null = null) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(initialError);
  const run = async (action: () => Promise<void>) => {
    setBusy(true);
    setError(null);
    try {
      await action();
    } catch (err) {
      setError(describeError(err));
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, setError, run };
}

/** Subscribes a component to the messenger's state. */
function useMessengerState(m: Messenger): MessengerState {
  const [state, setState] = useState(m.state);
  useEffect(() => {
    setState(m.state);
    return m.subscribe(() => setState(m.state));
  }, [m]);
  return state;
}

function Welcome(props: { initialError: string | null; onReady: (a: Account) => Promise<void> }) {
  const [login, setLogin] = useState('');
  const [file, setFile] = useState<File | null>(null);
  const [passphrase, setPassphrase] = useState('');
  const { busy, error, setError, run } = useAction(props.initialError);
  const attempt = (make: () => Promise<Account>) => run(async () => props.onReady(await make()));
  return (
    <main class="welcome">
      <h1>SHiNE</h1>
      <p>End-to-end encrypted messages. Your keys stay in this browser.</p>
      <form
        class="card"
        onSubmit={(e) => {
          e.preventDefault();
          void attempt(() => createAccount(login.trim(), serverWsUrl()));
        }}
      >
        <h2>New identity</h2>
        <label for="login">Login</label>
        <LoginInput id="login" autocomplete="username" value={login} onValue={setLogin} />
        <button type="submit" disabled={busy}>
          Create identity
        </button>
      </form>
      <form
        class="card"
        onSubmit={(e) => {
          e.preventDefault();
          const f = file;
          if (!f) return setError('Choose a backup file.');
          void attempt(async () => importBackup(await f.text(), passphrase));
        }}
      >
        <h2>Restore from a backup</h2>
        <label for="backup-file">Backup file</label>
        <input
          id="backup-file"
          type="file"
          accept=".json,application/json"
          onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)}
        />
        <label for="backup-passphrase">Passphrase</label>
        <input
          id="backup-passphrase"
          type="password"
          autocomplete="current-password"
          value={passphrase}
          onInput={(e) => setPassphrase(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          Import backup
        </button>
      </form>
      {busy && <p role="status">Working…</p>}
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
    </main>
  );
}

function Home({ account }: { account: Account }) {
  const messenger = useMemo(() => new Messenger(account, serverWsUrl()), [account]);
  useEffect(() => {
    messenger.start();
    return () => messenger.stop();
  }, [messenger]);
  const state = useMessengerState(messenger);
  const [backupOpen, setBackupOpen] = useState(false);
  return (
    <div class={`home ${state.chat || state.log ? 'chat-open' : ''}`}>
      <header class="topbar">
        <span class="me">
          <strong>{account.identity.login}</strong>@{account.profile.accessServers[0]}
        </span>
        <span class="tools">
          <button
            type="button"
            aria-pressed={state.log?.mine === true}
            onClick={() => void messenger.run(() => messenger.openLog())}
          >
            My public log
          </button>
          <NotificationsToggle messenger={messenger} enabled={state.notifications} />
          <button type="button" onClick={() => setBackupOpen(true)}>
            Back up identity
          </button>
        </span>
      </header>
      {state.status !== 'online' && (
        <p role="status" class="offline">
          {state.status === 'connecting' ? 'Connecting…' : 'Offline — reconnecting…'}
        </p>
      )}
      {state.notice && (
        <p role="alert" class="error notice">
          {state.notice}{' '}
          <button type="button" class="link" onClick={() => messenger.dismissNotice()}>
            Dismiss
          </button>
        </p>
      )}
      {state.call && <CallView messenger={messenger} call={state.call} />}
      <div class="panes">
        <nav class="sidebar" aria-label="Chats">
          <NewChat messenger={messenger} />
          <ConversationList messenger={messenger} state={state} />
        </nav>
        {state.log ? (
          <LogView messenger={messenger} log={state.log} online={state.status === 'online'} />
        ) : state.chat ? (
          <ChatView
            messenger={messenger}
            chat={state.chat}
            online={state.status === 'online'}
            inCall={state.call !== null && state.call.phase !== 'ended'}
          />
        ) : (
          <section class="chat empty" aria-label="No chat open">
            <p>Choose a conversation or start a new chat.</p>
          </section>
        )}
      </div>
      {backupOpen && <BackupDialog account={account} onClose={() => setBackupOpen(false)} />}
    </div>
  );
}

/** The WebPush opt-in: a button that says what pressing it does. */
function NotificationsToggle({ messenger, enabled }: { messenger: Messenger; enabled: boolean }) {
  const [busy, setBusy] = useState(false);
  const toggle = async () => {
    setBusy(true);
    await messenger.run(() => (enabled ? messenger.disableNotifications() : messenger.enableNotifications()));
    setBusy(false);
  };
  return (
    <button type="button" disabled={busy} onClick={() => void toggle()}>
      {enabled ? 'Disable notifications' : 'Enable notifications'}
    </button>
  );
}

/** A textbox for a login: no capitals, no spell check. */
function LoginInput(props: {
  id: string;
  value: string;
  onValue: (value: string) => void;
  autocomplete?: string;
  placeholder?: string;
}) {
  return (
    <input
      id={props.id}
      autocomplete={props.autocomplete ?? 'off'}
      autocapitalize="none"
      spellcheck={false}
      placeholder={props.placeholder}
      value={props.value}
      onInput={(e) => props.onValue(e.currentTarget.value)}
      required
    />
  );
}

function NewChat({ messenger }: { messenger: Messenger }) {
  const [login, setLogin] = useState('');
  const [busy, setBusy] = useState(false);
  return (
    <form
      class="new-chat"
      onSubmit={async (e) => {
        e.preventDefault();
        setBusy(true);
        if (await messenger.run(() => messenger.startChat(login))) setLogin('');
        setBusy(false);
      }}
    >
      <label for="new-chat">New chat with</label>
      <div class="row">
        <LoginInput id="new-chat" placeholder="login" value={login} onValue={setLogin} />
        <button type="submit" disabled={busy}>
          Start chat
        </button>
      </div>
    </form>
  );
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dateFormat = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short' });

/** "14:05" today, "3 Dec" before. */
export function shortTime(ms: number, now = Date.now()): string {
  return new Date(ms).toDateString() === new Date(now).toDateString() ? timeFormat.format(ms) : dateFormat.format(ms);
}

function ConversationList({ messenger, state }: { messenger: Messenger; state: MessengerState }) {
  return (
    <ul class="conversations" aria-label="Conversations">
      {state.conversations.length === 0 && <li class="hint">No conversations yet.</li>}
      {state.conversations.map((c) => (
        <li key={c.peerLogin} aria-label={c.peerLogin}>
          <button
            type="button"
            class={state.chat?.peer === c.peerLogin ? 'current' : ''}
            aria-current={state.chat?.peer === c.peerLogin ? 'true' : undefined}
            onClick={() => void messenger.run(() => messenger.openChat(c.peerLogin))}
          >
            <span class="peer">{c.peerLogin}</span>
            <time dateTime={new Date(c.lastTimeMs).toISOString()}>{shortTime(c.lastTimeMs)}</time>
            {c.unreadCount > 0 && (
              <span class="badge" aria-label={`${c.unreadCount} unread`}>
                {c.unreadCount}
              </span>
            )}
          </button>
        </li>
      ))}
    </ul>
  );
}

function BackupDialog({ account, onClose }: { account: Account; onClose: () => void }) {
  const [passphrase, setPassphrase] = useState('');
  const { busy, error, run } = useAction();
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => e.key === 'Escape' && onClose();
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  }, [onClose]);
  return (
    <div class="overlay" role="dialog" aria-modal="true" aria-label="Back up identity">
      <form
        class="card dialog"
        onSubmit={(e) => {
          e.preventDefault();
          void run(async () => {
            const text = await exportBackup(account, passphrase);
            const a = document.createElement('a');
            a.href = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
            a.download = `shine-${account.identity.login}.backup.json`;
            a.click();
            URL.revokeObjectURL(a.href);
            onClose();
          });
        }}
      >
        <h2>Back up identity</h2>
        <p>
          The file holds your secret keys, encrypted with this passphrase. Import it in another browser to use SHiNE
          there too.
        </p>
        <label for="export-passphrase">Backup passphrase</label>
        <input
          id="export-passphrase"
          type="password"
          autocomplete="new-password"
          minLength={MIN_PASSPHRASE_LENGTH}
          value={passphrase}
          onInput={(e) => setPassphrase(e.currentTarget.value)}
          autofocus
          required
        />
        {error && (
          <p role="alert" class="error">
            {error}
          </p>
        )}
        <div class="row">
          <button type="submit" disabled={busy}>
            Download backup
          </button>
          <button type="button" onClick={onClose}>
            Cancel
          </button>
        </div>
      </form>
    </div>
  );
}
