/** Builders of signed container pairs (docs/protocol.md §3): the incoming copy for the peer, the outgoing one for the sender. */
import { randomBytes } from '@noble/hashes/utils.js';
import { fromUtf8, toBase64, utf8 } from '../protocol/bytes.js';
import type { Container, ContainerFields, MessageType } from '../protocol/container.js';
import {
  MAX_BODY,
  deleteTargetBaseKey,
  encodeDeleteConversationBody,
  encodeDeleteMessageBody,
  encodeReceiptBody,
  encodeSigned,
  parseDeleteConversationBody,
  parseReceiptBody,
  receiptTargetBaseKey,
} from '../protocol/container.js';
import { E2E_OVERHEAD, decryptBody, encryptBody, messageAad } from './e2e.js';
import type { Identity } from './identity.js';

/** What building a pair needs of the sender; an Identity has it. */
export type PairSender = Pick<Identity, 'login' | 'signSeed' | 'encPublicKey'>;

/** The peer of a text message: its login and X25519 encKey (from its profile). */
export interface TextRecipient {
  login: string;
  encKey: Uint8Array;
}

/** The identity of one logical message, enough to point at it. */
export interface MessageRef {
  fromLogin: string;
  toLogin: string;
  timeMs: number;
  nonce: number;
}

/** When and as which revision a pair is made; defaults: now, a random nonce, revision 0/0. */
export interface PairStamp {
  timeMs?: number;
  nonce?: number;
  revisionTimeMs?: number;
  reencryptedAtMs?: number;
}

export interface BuiltPair {
  incoming: Container;
  outgoing: Container;
  incomingBlobB64: string;
  outgoingBlobB64: string;
}

/** The largest text (in UTF-8 bytes) that fits one container after encryption. */
export const MAX_TEXT_BYTES = MAX_BODY - E2E_OVERHEAD;

/** A uniformly random u32 for a container's nonce. */
export function randomNonce(): number {
  const b = randomBytes(4);
  return new DataView(b.buffer, b.byteOffset, 4).getUint32(0);
}

/** Signs both copies of one event; bodyFor gets each copy's fields so encrypted bodies can bind to them. */
function buildPair(
  sender: PairSender,
  toLogin: string,
  incomingType: 1 | 3 | 5 | 7,
  stamp: PairStamp,
  bodyFor: (fields: Omit<ContainerFields, 'body'>) => Uint8Array,
): BuiltPair {
  const common = {
    fromLogin: sender.login,
    toLogin,
    timeMs: stamp.timeMs ?? Date.now(),
    nonce: stamp.nonce ?? randomNonce(),
    revisionTimeMs: stamp.revisionTimeMs ?? 0,
    reencryptedAtMs: stamp.reencryptedAtMs ?? 0,
  };
  const copy = (messageType: MessageType): Container => {
    const fields = { ...common, messageType };
    return encodeSigned({ ...fields, body: bodyFor(fields) }, sender.signSeed);
  };
  const incoming = copy(incomingType);
  const outgoing = copy((incomingType + 1) as MessageType);
  return { incoming, outgoing, incomingBlobB64: toBase64(incoming.bytes), outgoingBlobB64: toBase64(outgoing.bytes) };
}

/** Types 1/2: the text encrypted once to the recipient and once to the sender. */
export function textPair(sender: PairSender, recipient: TextRecipient, text: string, stamp: PairStamp = {}): BuiltPair {
  const plaintext = utf8(text);
  if (plaintext.length > MAX_TEXT_BYTES)
    throw new RangeError(`text is ${plaintext.length} bytes; at most ${MAX_TEXT_BYTES} fit`);
  return buildPair(sender, recipient.login, 1, stamp, (f) =>
    encryptBody(plaintext, f.messageType === 1 ? recipient.encKey : sender.encPublicKey, messageAad(f)),
  );
}

/** Types 1/2 as an edit: same timeMs and nonce (so the same messageKey), revisionTimeMs = the edit time. */
export function editTextPair(
  sender: PairSender,
  recipient: TextRecipient,
  original: Pick<MessageRef, 'timeMs' | 'nonce'>,
  newText: string,
  editTimeMs: number,
): BuiltPair {
  if (!(editTimeMs > 0)) throw new RangeError('an edit needs a positive revisionTimeMs');
  return textPair(sender, recipient, newText, {
    timeMs: original.timeMs,
    nonce: original.nonce,
    revisionTimeMs: editTimeMs,
  });
}

/** Types 3/4: the reader tells the message's sender it was read at readAtMs. */
export function receiptPair(
  reader: PairSender,
  message: MessageRef,
  readAtMs: number,
  stamp: PairStamp = {},
): BuiltPair {
  if (message.toLogin !== reader.login) throw new Error('a read receipt is sent by the recipient of the message');
  const body = encodeReceiptBody({ readAtMs, targetTimeMs: message.timeMs, targetNonce: message.nonce });
  return buildPair(reader, message.fromLogin, 3, stamp, () => body);
}

/** Types 5/6: deletes one message of the sender's dialog (sent by either side) at both sides. */
export function deleteMessagePair(sender: PairSender, target: MessageRef, stamp: PairStamp = {}): BuiltPair {
  const sentByMe = target.fromLogin === sender.login;
  if (!sentByMe && target.toLogin !== sender.login) throw new Error('the message is not in the sender’s dialog');
  const body = encodeDeleteMessageBody({
    targetTimeMs: target.timeMs,
    targetNonce: target.nonce,
    targetSender: sentByMe ? 0 : 1,
  });
  return buildPair(sender, sentByMe ? target.toLogin : target.fromLogin, 5, stamp, () => body);
}

/** Types 7/8: deletes every message of the dialog with timeMs ≤ deleteBeforeMs. */
export function deleteConversationPair(
  sender: PairSender,
  peerLogin: string,
  deleteBeforeMs: number,
  stamp: PairStamp = {},
): BuiltPair {
  const body = encodeDeleteConversationBody({ deleteBeforeMs });
  return buildPair(sender, peerLogin, 7, stamp, () => body);
}

/** What one copy says, by type. */
export type CopyContent =
  | { kind: 'text'; text: string }
  | { kind: 'receipt'; readAtMs: number; targetBaseKey: string }
  | { kind: 'deleteMessage'; targetBaseKey: string }
  | { kind: 'deleteConversation'; deleteBeforeMs: number };

/** Reads a copy's body (the inverse of the builders); text opens with the owner's X25519 secret or throws E2eError. */
export function contentOf(c: ContainerFields, ownerEncSecret: Uint8Array): CopyContent {
  switch (c.messageType) {
    case 1:
    case 2:
      return { kind: 'text', text: fromUtf8(decryptBody(c.body, ownerEncSecret, messageAad(c))) };
    case 3:
    case 4:
      return { kind: 'receipt', readAtMs: parseReceiptBody(c).readAtMs, targetBaseKey: receiptTargetBaseKey(c) };
    case 5:
    case 6:
      return { kind: 'deleteMessage', targetBaseKey: deleteTargetBaseKey(c) };
    default:
      return { kind: 'deleteConversation', deleteBeforeMs: parseDeleteConversationBody(c).deleteBeforeMs };
  }
}
