/** RegisterUser and GetUserProfile (SPEC §5.1): open to any socket, no session needed. */
import { ShineError } from '../../protocol/errors.js';
import type { OpResults } from '../../protocol/ops.js';
import { opSchemas } from '../../protocol/ops.js';
import type { Directory } from '../directory/service.js';
import type { OpGroup } from './registry.js';
import { op } from './registry.js';

export function directoryOps(directory: Directory): OpGroup {
  return {
    RegisterUser: op({
      auth: 'none',
      schema: opSchemas.RegisterUser,
      async handle({ profile }): Promise<OpResults['RegisterUser']> {
        return { profile: await directory.register(profile) };
      },
    }),

    GetUserProfile: op({
      auth: 'none',
      schema: opSchemas.GetUserProfile,
      async handle({ login }, session): Promise<OpResults['GetUserProfile']> {
        // Servers get only what this server knows: an import on their behalf could loop between servers.
        const profile = await directory.getProfile(login, { noImport: session.serverLogin !== null });
        if (!profile) throw new ShineError('USER_NOT_FOUND', `no user ${login}`);
        return { profile };
      },
    }),
  };
}
