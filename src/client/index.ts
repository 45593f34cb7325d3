/** The SHiNE client SDK: identities, E2E bodies, pair builders and the WebSocket client. */
export * from './identity.js';
export * from './e2e.js';
export * from './pairs.js';
export * from './chain.js';
export * from './client.js';
export * from './proofs.js';
export type { UserProfile, ServerDescriptor } from '../protocol/identity.js';
export type { DeliveryReceipt } from '../protocol/receipt.js';
export type { Container, MessageType } from '../protocol/container.js';
export type { Block, BlockFields, ChainProblem } from '../protocol/block.js';
export { blockHash, decodeBlock, verifyBlock } from '../protocol/block.js';
export type {
  ChainEventPayload,
  DirectMessageEvent,
  DeliveryStateChangedEvent,
  DeliveryState,
  HistoryItem,
  OpName,
  OpResults,
  PairAnswer,
} from '../protocol/ops.js';
