/**
 * The auth flags of `mesh api` and `mesh sidecar` (docs/security.md): checked and their files read
 * before anything starts (a bad value or file is a flag error, exit 2, naming the line), then the
 * process's EdgeAuth: listed by admin /auth_rules, reloaded on SIGHUP.
 */
import { FlagError, type Config } from './flags.js';
import type { Runtime } from '../process/runtime.js';
import { AuthSetupError, EdgeAuth, readAuthSetup, type AuthSetup } from '../edge/auth/edge.js';

export function checkAuthFlags(config: Config): AuthSetup | undefined {
  try {
    return readAuthSetup(config);
  } catch (err) {
    if (err instanceof AuthSetupError) throw new FlagError(err.format('flag'));
    throw err;
  }
}

/** The process's EdgeAuth (undefined without auth and rules), shown by admin /auth_rules and reloaded on SIGHUP until shutdown. */
export async function startAuth(runtime: Runtime, setup: AuthSetup | undefined): Promise<EdgeAuth | undefined> {
  if (!setup) return undefined;
  const auth = new EdgeAuth(setup, { stats: runtime.stats, log: runtime.logging.get('config') });
  runtime.onShutdown(runtime.addAuthRulesSource(() => [auth.dump()]));
  runtime.onShutdown(auth.reloadOnSighup());
  await auth.start();
  return auth;
}
