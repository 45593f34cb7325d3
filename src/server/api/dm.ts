/** DM and settings operations (SPEC §5.2): thin bindings of the registry to the DM service. */
import { opSchemas } from '../../protocol/ops.js';
import type { DmService } from '../dm/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function dmOps(dm: DmService): OpGroup {
  return {
    SendMessagePair: op({
      auth: 'user',
      schema: opSchemas.SendMessagePair,
      handle: (p, s) => dm.acceptPair('SendMessagePair', p, s),
    }),
    DeleteMessage: op({
      auth: 'user',
      schema: opSchemas.DeleteMessage,
      handle: (p, s) => dm.acceptPair('DeleteMessage', p, s),
    }),
    DeleteConversation: op({
      auth: 'user',
      schema: opSchemas.DeleteConversation,
      handle: (p, s) => dm.acceptPair('DeleteConversation', p, s),
    }),
    GetDirectMessages: op({ auth: 'user', schema: opSchemas.GetDirectMessages, handle: (p, s) => dm.history(p, s) }),
    GetConversations: op({
      auth: 'user',
      schema: opSchemas.GetConversations,
      handle: (p, s) => dm.conversations(p, s),
    }),
    AckSessionDelivery: op({ auth: 'user', schema: opSchemas.AckSessionDelivery, handle: (p, s) => dm.ack(p, s) }),
    SetUserSetting: op({ auth: 'user', schema: opSchemas.SetUserSetting, handle: (p, s) => dm.setSetting(p, s) }),
    GetUserSettings: op({ auth: 'user', schema: opSchemas.GetUserSettings, handle: (p, s) => dm.getSettings(p, s) }),
  };
}
