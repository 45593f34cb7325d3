/** DM and settings operations (docs/protocol.md §5.2): thin bindings of the registry to the DM service. */
import type { DmService } from '../dm/service.js';
import type { OpRegistry } from './registry.js';

export function registerDmOps(r: OpRegistry, dm: DmService): void {
  r.add('SendMessagePair', { auth: 'user', handle: (p, s) => dm.acceptPair('SendMessagePair', p, s) })
    .add('DeleteMessage', { auth: 'user', handle: (p, s) => dm.acceptPair('DeleteMessage', p, s) })
    .add('DeleteConversation', { auth: 'user', handle: (p, s) => dm.acceptPair('DeleteConversation', p, s) })
    .add('GetDirectMessages', { auth: 'user', handle: (p, s) => dm.history(p, s) })
    .add('GetConversations', { auth: 'user', handle: (p, s) => dm.conversations(p, s) })
    .add('AckSessionDelivery', { auth: 'user', handle: (p, s) => dm.ack(p, s) })
    .add('SetUserSetting', { auth: 'user', handle: (p, s) => dm.setSetting(p, s) })
    .add('GetUserSettings', { auth: 'user', handle: (p, s) => dm.getSettings(p, s) });
}
