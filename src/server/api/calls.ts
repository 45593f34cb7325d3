/** Call signalling (SPEC §5.6): thin bindings of the registry to the call service. */
import { opSchemas } from '../../protocol/ops.js';
import type { CallService } from '../calls/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function callOps(calls: CallService): OpGroup {
  return {
    CallInviteBroadcast: op({
      auth: 'user',
      schema: opSchemas.CallInviteBroadcast,
      handle: (p, s) => calls.invite(p, s),
    }),
    CallSignal: op({ auth: 'user', schema: opSchemas.CallSignal, handle: (p, s) => calls.signal(p, s) }),
    ReceiveCallSignal: op({
      auth: 'server',
      schema: opSchemas.ReceiveCallSignal,
      handle: (p, s) => calls.receive(p, s),
    }),
  };
}
