/**
 * Audio calls (docs/protocol.md §5.6, docs/web-client.md): WebRTC between the two browsers, the servers relaying only the
 * signalling. The offer travels in CallInviteBroadcast, the answer and ICE candidates in CallSignal;
 * payloads are JSON ({sdp} or a candidate) sealed for the other side (the SDK's sealCallPayload), so
 * the servers never see the addresses in them. No ICE servers: host candidates only, so media
 * never goes anywhere but the other browser.
 */
import type { CallSignalKind } from '../../src/protocol/ops.js';
import { fromUtf8, toBase64, utf8 } from '../../src/protocol/bytes.js';

export type CallPhase = 'ringing' | 'connecting' | 'connected' | 'ended';

export interface CallState {
  callId: string;
  peer: string;
  outgoing: boolean;
  phase: CallPhase;
  /** Why an ended call ended, in words for a person. */
  reason: string | null;
}

/** How the controller reaches the other side: the SDK's call ops on the live connection. */
export interface CallSignalling {
  invite(peer: string, callId: string, payloadB64: string): Promise<unknown>;
  signal(peer: string, callId: string, kind: CallSignalKind, payloadB64?: string): Promise<unknown>;
  /** A value as a payload only peer can open. */
  seal(peer: string, callId: string, value: unknown): Promise<string>;
  /** The value in a payload from fromLogin, or null when it is not one sealed for this user. */
  open(fromLogin: string, callId: string, payloadB64: string): unknown;
}

interface CallEvent {
  fromLogin: string;
  callId: string;
  payloadB64: string;
}

/** An unanswered outgoing call stops ringing after this long. */
export const RING_TIMEOUT_MS = 45_000;

const REASONS: Partial<Record<CallSignalKind, string>> = {
  reject: 'Call declined',
  busy: 'Busy',
  hangup: 'Call ended',
  cancel: 'Missed call',
};

/** The bytes a call payload seals: the value as JSON. */
export const encodeValue = (value: unknown): Uint8Array => utf8(JSON.stringify(value));

/** The value in opened payload bytes, or null when they are not JSON. */
export function decodeValue(bytes: Uint8Array | null): unknown {
  if (!bytes) return null;
  try {
    return JSON.parse(fromUtf8(bytes)) as unknown;
  } catch {
    return null;
  }
}

function sdpOf(value: unknown): string | null {
  const p = value as { sdp?: unknown } | null;
  return typeof p?.sdp === 'string' ? p.sdp : null;
}

function newCallId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return toBase64(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** At most one call at a time; a second invite meanwhile is answered `busy`. */
export class CallController {
  state: CallState | null = null;
  /** The other side's audio, for an <audio> element. */
  remoteStream: MediaStream | null = null;
  private pc: RTCPeerConnection | null = null;
  private local: MediaStream | null = null;
  private offerSdp: string | null = null;
  /** Candidates that came before the remote description could take them. */
  private pendingIce: RTCIceCandidateInit[] = [];
  /** Own candidates wait until the invite or answer has reached the server, so the peer gets that first. */
  private iceGate: Promise<void> = Promise.resolve();
  private openIceGate: () => void = () => undefined;
  private ringTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly me: string,
    private readonly signalling: () => CallSignalling,
    private readonly changed: () => void,
  ) {}

  private get active(): boolean {
    return this.state !== null && this.state.phase !== 'ended';
  }

  private update(changes: Partial<CallState>): void {
    if (!this.state) return;
    this.state = { ...this.state, ...changes };
    this.changed();
  }

  /** Calls peer: microphone, offer, invite; rings until answered, declined or RING_TIMEOUT_MS. */
  async start(peer: string): Promise<void> {
    if (this.active) throw new Error('A call is already going on.');
    const callId = newCallId();
    this.reset();
    this.state = { callId, peer, outgoing: true, phase: 'ringing', reason: null };
    this.changed();
    try {
      const pc = await this.connect(callId);
      const offer = await pc.createOffer();
      await pc.setLocalDescription(offer);
      const signalling = this.signalling();
      await signalling.invite(peer, callId, await signalling.seal(peer, callId, { sdp: offer.sdp }));
      this.openIceGate();
    } catch (err) {
      this.end(callId, 'Call failed');
      throw err;
    }
    this.ringTimer = setTimeout(() => void this.hangUp('No answer'), RING_TIMEOUT_MS);
  }

  onInvite(ev: CallEvent): void {
    if (this.state?.callId === ev.callId) return;
    if (this.active) {
      void this.signalling()
        .signal(ev.fromLogin, ev.callId, 'busy')
        .catch(() => undefined);
      return;
    }
    const sdp = sdpOf(this.signalling().open(ev.fromLogin, ev.callId, ev.payloadB64));
    if (!sdp) return;
    this.reset();
    this.offerSdp = sdp;
    this.state = { callId: ev.callId, peer: ev.fromLogin, outgoing: false, phase: 'ringing', reason: null };
    this.changed();
  }

  onSignal(ev: CallEvent & { kind: CallSignalKind }): void {
    const s = this.state;
    if (!s || s.callId !== ev.callId || s.phase === 'ended') return;
    if (ev.fromLogin === this.me) {
      // Another of my devices answered, declined or hung up: this one stops ringing.
      if (!s.outgoing && s.phase === 'ringing')
        this.end(ev.callId, ev.kind === 'answer' ? 'Answered on another device' : 'Call ended');
      return;
    }
    if (ev.fromLogin !== s.peer) return;
    switch (ev.kind) {
      case 'answer':
        void this.onAnswer(ev.callId, this.signalling().open(ev.fromLogin, ev.callId, ev.payloadB64));
        break;
      case 'ice':
        void this.onIce(this.signalling().open(ev.fromLogin, ev.callId, ev.payloadB64));
        break;
      default:
        this.end(ev.callId, REASONS[ev.kind] ?? 'Call ended');
    }
  }

  /** The callee takes the ringing call. */
  async answer(): Promise<void> {
    const s = this.state;
    if (!s || s.outgoing || s.phase !== 'ringing' || !this.offerSdp) return;
    this.update({ phase: 'connecting' });
    try {
      const pc = await this.connect(s.callId);
      await pc.setRemoteDescription({ type: 'offer', sdp: this.offerSdp });
      await this.takePendingIce();
      const answer = await pc.createAnswer();
      await pc.setLocalDescription(answer);
      const signalling = this.signalling();
      await signalling.signal(s.peer, s.callId, 'answer', await signalling.seal(s.peer, s.callId, { sdp: answer.sdp }));
      this.openIceGate();
    } catch (err) {
      await this.hangUp('Call failed');
      throw err;
    }
  }

  async reject(): Promise<void> {
    const s = this.state;
    if (!s || s.outgoing || s.phase !== 'ringing') return;
    this.end(s.callId, 'Call declined');
    await this.signalling().signal(s.peer, s.callId, 'reject');
  }

  /** Ends the call from this side: `cancel` while still ringing out, `hangup` otherwise. */
  async hangUp(reason = 'Call ended'): Promise<void> {
    const s = this.state;
    if (!s || s.phase === 'ended') return;
    const kind: CallSignalKind = s.outgoing && s.phase === 'ringing' ? 'cancel' : 'hangup';
    this.end(s.callId, reason);
    await this.signalling().signal(s.peer, s.callId, kind);
  }

  /** Closes the "Call ended" bar. */
  dismiss(): void {
    if (this.active) return;
    this.state = null;
    this.changed();
  }

  /** Microphone and a peer connection whose candidates and state changes drive this call. */
  private async connect(callId: string): Promise<RTCPeerConnection> {
    this.local = await navigator.mediaDevices.getUserMedia({ audio: true });
    if (this.state?.callId !== callId || this.state.phase === 'ended') {
      this.reset();
      throw new Error('The call ended meanwhile.');
    }
    const pc = new RTCPeerConnection({ iceServers: [] });
    this.pc = pc;
    this.iceGate = new Promise((resolve) => (this.openIceGate = resolve));
    for (const track of this.local.getTracks()) pc.addTrack(track, this.local);
    pc.onicecandidate = (e) => {
      const s = this.state;
      if (!e.candidate || !s || s.callId !== callId) return;
      const candidate = e.candidate.toJSON();
      void this.iceGate
        .then(async () => {
          const signalling = this.signalling();
          await signalling.signal(s.peer, callId, 'ice', await signalling.seal(s.peer, callId, candidate));
        })
        .catch(() => undefined);
    };
    pc.ontrack = (e) => {
      this.remoteStream = e.streams[0] ?? new MediaStream([e.track]);
      this.changed();
    };
    pc.onconnectionstatechange = () => {
      if (this.pc !== pc) return;
      if (pc.connectionState === 'connected') this.update({ phase: 'connected' });
      else if (pc.connectionState === 'failed') void this.hangUp('Connection lost');
    };
    return pc;
  }

  private async onAnswer(callId: string, value: unknown): Promise<void> {
    const sdp = sdpOf(value);
    const pc = this.pc;
    if (!sdp || !pc || this.state?.phase !== 'ringing') return;
    this.clearRingTimer();
    this.update({ phase: 'connecting' });
    try {
      await pc.setRemoteDescription({ type: 'answer', sdp });
      await this.takePendingIce();
    } catch {
      if (this.state?.callId === callId) await this.hangUp('Call failed');
    }
  }

  private async onIce(value: unknown): Promise<void> {
    const candidate = value as RTCIceCandidateInit | null;
    if (!candidate || typeof candidate !== 'object') return;
    if (!this.pc?.remoteDescription) {
      this.pendingIce.push(candidate);
      return;
    }
    // A candidate the browser cannot use (another network, a typo) is not worth ending the call for.
    await this.pc.addIceCandidate(candidate).catch(() => undefined);
  }

  private async takePendingIce(): Promise<void> {
    const pending = this.pendingIce;
    this.pendingIce = [];
    for (const c of pending) await this.pc?.addIceCandidate(c).catch(() => undefined);
  }

  private end(callId: string, reason: string): void {
    if (this.state?.callId !== callId) return;
    this.reset();
    this.update({ phase: 'ended', reason });
  }

  private clearRingTimer(): void {
    if (this.ringTimer !== null) clearTimeout(this.ringTimer);
    this.ringTimer = null;
  }

  /** Microphone off, connection closed, nothing pending. */
  private reset(): void {
    this.clearRingTimer();
    for (const t of this.local?.getTracks() ?? []) t.stop();
    this.pc?.close();
    this.pc = null;
    this.local = null;
    this.remoteStream = null;
    this.offerSdp = null;
    this.pendingIce = [];
  }
}
