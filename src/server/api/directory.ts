/**
 * RegisterUser, GetUserProfile and GetServerDescriptor (docs/protocol.md §5.1, §13.1): open to any socket, no
 * session needed.
 */
import { ShineError } from '../../protocol/errors.js';
import type { Directory } from '../directory/service.js';
import type { OpRegistry } from './registry.js';

export function registerDirectoryOps(r: OpRegistry, directory: Directory): void {
  r.add('RegisterUser', {
    auth: 'none',
    handle: async ({ profile }) => ({ profile: await directory.register(profile) }),
  })
    .add('GetUserProfile', {
      auth: 'none',
      async handle({ login }, session) {
        // Only a logged-in user's request may make this server ask others: an import for a server could
        // loop between servers, and one for an anonymous socket would let anyone make it call every peer.
        const profile = await directory.getProfile(login, { noImport: session.login === null });
        if (!profile) throw new ShineError('USER_NOT_FOUND', `no user ${login}`);
        return { profile };
      },
    })
    .add('GetServerDescriptor', {
      auth: 'none',
      async handle({ serverLogin }) {
        const descriptor = await directory.pinnedServer(serverLogin);
        if (!descriptor) throw new ShineError('SERVER_NOT_FOUND', `no server ${serverLogin} is known here`);
        return { descriptor };
      },
    });
}
