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
        // Only a logged-in user's request may make this server ask others: an import for a server could
        // loop between servers, and one for an anonymous socket would let anyone make it call every peer.
        const profile = await directory.getProfile(login, { noImport: session.login === null });
        if (!profile) throw new ShineError('USER_NOT_FOUND', `no user ${login}`);
        return { profile };
      },
    }),
  };
}
