/** AuthChallenge and AuthLogin (docs/protocol.md §5.1): a user session bound to one login and device. */
import { randomBytes } from 'node:crypto';
import { toBase64 } from '../../protocol/bytes.js';
import type { SignatureVerifier } from '../../protocol/ed25519.js';
import { ShineError } from '../../protocol/errors.js';
import { authSigningText, verifyText } from '../../protocol/identity.js';
import type { Clock } from '../clock.js';
import type { KeyedLimiter } from '../cluster/limits.js';
import type { Config } from '../config/config.js';
import type { Directory } from '../directory/service.js';
import type { Logger } from '../log.js';
import type { SessionHub, UserSession } from '../sessions.js';
import type { OpRegistry } from './registry.js';

export interface AuthDeps {
  config: Config;
  clock: Clock;
  directory: Directory;
  hub: SessionHub;
  verifier: SignatureVerifier;
  log: Logger;
  /** AuthChallenge requests per source address (docs/protocol.md §5). */
  challenges: KeyedLimiter;
  /** Runs after the AuthLogin answer has been sent (replay of the device's events). */
  onLogin(session: UserSession): Promise<void>;
}

const CHALLENGE_BYTES = 32;

export function registerAuthOps(r: OpRegistry, deps: AuthDeps): void {
  const { config, clock, directory, hub, verifier } = deps;
  r.add('AuthChallenge', {
    auth: 'none',
    async handle(_payload, session) {
      if (!(await deps.challenges.take(session.remoteAddress)))
        throw new ShineError('RATE_LIMITED', 'too many AuthChallenge requests from this address');
      const challengeB64 = toBase64(randomBytes(CHALLENGE_BYTES));
      const expiresAtMs = clock.now() + config.authChallengeTtlMs;
      // Only the latest challenge of a socket is valid: issuing one replaces the previous.
      session.challenge = { challengeB64, expiresAtMs };
      return { serverLogin: config.serverLogin, challengeB64, expiresAtMs };
    },
  });

  r.add('AuthLogin', {
    auth: 'none',
    async handle({ login, deviceId, signatureB64 }, session, call) {
      if (session.login || session.serverLogin)
        throw new ShineError('FORBIDDEN', 'this socket is already authenticated');
      // Consumed by every attempt, successful or not, so a challenge can never be tried twice.
      const challenge = session.challenge;
      session.challenge = null;
      if (!challenge || clock.now() > challenge.expiresAtMs)
        throw new ShineError('AUTH_FAILED', 'no valid challenge: call AuthChallenge first');
      const user = await directory.lookup(login, { noImport: true });
      const text = authSigningText({
        server: config.serverLogin,
        challengeB64: challenge.challengeB64,
        login,
        deviceId,
      });
      if (!user || !verifyText(text, signatureB64, user.profile.signKeyB64, verifier)) {
        throw new ShineError('AUTH_FAILED', 'unknown login or bad signature');
      }
      if (!directory.isAccessServerOf(user)) {
        throw new ShineError(
          'LOCAL_SERVER_NOT_ACCESS_SERVER',
          `${config.serverLogin} is not an access server of ${login}`,
        );
      }
      const bound = Object.assign(session, { login, deviceId });
      hub.bindUser(bound, login);
      call.log.debug('user logged in', { login, deviceId });
      call.afterAnswer(() => deps.onLogin(bound));
      return { login, deviceId, sessionId: bound.id };
    },
  });
}
