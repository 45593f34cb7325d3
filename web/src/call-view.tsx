/** The call on screen: a ringing dialog for an incoming call, a bar with its state and "Hang up" otherwise. */
import { useEffect, useRef } from 'preact/hooks';
import type { CallPhase, CallState } from './calls.js';
import type { Messenger } from './messenger.js';

function phaseText(call: CallState): string {
  const texts: Record<CallPhase, string> = {
    ringing: call.outgoing ? `Calling ${call.peer}…` : `${call.peer} is calling…`,
    connecting: 'Connecting…',
    connected: `In call with ${call.peer}`,
    ended: call.reason ?? 'Call ended',
  };
  return texts[call.phase];
}

export function CallView({ messenger, call }: { messenger: Messenger; call: CallState }) {
  const answer = useRef<HTMLButtonElement>(null);
  const ringingIn = !call.outgoing && call.phase === 'ringing';
  // The dialog takes the keyboard: Enter answers at once, Tab reaches "Reject".
  useEffect(() => {
    if (ringingIn) answer.current?.focus();
  }, [ringingIn]);
  const state = (
    <span class="call-state" role="status" data-call-state={call.phase}>
      {phaseText(call)}
    </span>
  );
  if (ringingIn)
    return (
      <div class="overlay" role="dialog" aria-modal="true" aria-label="Incoming call">
        <div class="card dialog">
          <h2>Incoming call</h2>
          <p>{state}</p>
          <div class="row">
            <button type="button" ref={answer} onClick={() => void messenger.run(() => messenger.calls.answer())}>
              Answer
            </button>
            <button type="button" class="danger" onClick={() => void messenger.run(() => messenger.calls.reject())}>
              Reject
            </button>
          </div>
        </div>
      </div>
    );
  return (
    <section class={`call-bar ${call.phase}`} aria-label={`Call with ${call.peer}`}>
      {state}
      {call.phase === 'ended' ? (
        <button type="button" onClick={() => messenger.calls.dismiss()}>
          Close
        </button>
      ) : (
        <button type="button" class="danger" onClick={() => void messenger.run(() => messenger.calls.hangUp())}>
          Hang up
        </button>
      )}
      <RemoteAudio stream={messenger.calls.remoteStream} />
    </section>
  );
}

/** Plays the other side's audio; the element has no controls, the call bar is the control. */
function RemoteAudio({ stream }: { stream: MediaStream | null }) {
  const audio = useRef<HTMLAudioElement>(null);
  useEffect(() => {
    const el = audio.current;
    if (!el || el.srcObject === stream) return;
    el.srcObject = stream;
    if (stream) void el.play().catch(() => undefined);
  }, [stream]);
  return <audio ref={audio} autoplay />;
}
