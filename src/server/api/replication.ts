/** Replication operations (docs/protocol.md §7); who may call them is checked by ReplicationService. */
import type { ReplicationService } from '../replication/service.js';
import type { OpRegistry } from './registry.js';

export function registerReplicationOps(r: OpRegistry, rep: ReplicationService): void {
  r.add('DmSyncBatch', { auth: 'server', handle: (p, s) => rep.dmSyncBatch(p, s) })
    .add('UserSettingsSyncBatch', { auth: 'server', handle: (p, s) => rep.settingsSyncBatch(p, s) })
    .add('MarkAllUserSettingsUnsynced', { auth: 'server', handle: (p, s) => rep.markUnsyncedOp(p, s) })
    .add('DmDigest', { auth: 'server', handle: (p, s) => rep.antiEntropy.digestOp(p, s) })
    .add('DmKeys', { auth: 'server', handle: (p, s) => rep.antiEntropy.keysOp(p, s) })
    .add('DmFetch', { auth: 'server', handle: (p, s) => rep.antiEntropy.fetchOp(p, s) });
}
