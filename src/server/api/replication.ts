/** Replication operations (SPEC §7); who may call them is checked by ReplicationService. */
import { opSchemas } from '../../protocol/ops.js';
import type { ReplicationService } from '../replication/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function replicationOps(rep: ReplicationService): OpGroup {
  return {
    DmSyncBatch: op({ auth: 'server', schema: opSchemas.DmSyncBatch, handle: (p, s) => rep.dmSyncBatch(p, s) }),
    UserSettingsSyncBatch: op({
      auth: 'server',
      schema: opSchemas.UserSettingsSyncBatch,
      handle: (p, s) => rep.settingsSyncBatch(p, s),
    }),
    MarkAllUserSettingsUnsynced: op({
      auth: 'server',
      schema: opSchemas.MarkAllUserSettingsUnsynced,
      handle: (p, s) => rep.markUnsyncedOp(p, s),
    }),
  };
}
