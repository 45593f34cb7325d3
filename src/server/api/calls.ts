/** Call signalling (docs/protocol.md §5.6): thin bindings of the registry to the call service. */
import type { CallService } from '../calls/service.js';
import type { OpRegistry } from './registry.js';

export function registerCallOps(r: OpRegistry, calls: CallService): void {
  r.add('CallInviteBroadcast', { auth: 'user', handle: (p, s) => calls.invite(p, s) })
    .add('CallSignal', { auth: 'user', handle: (p, s) => calls.signal(p, s) })
    .add('ReceiveCallSignal', { auth: 'server', handle: (p, s) => calls.receive(p, s) });
}
