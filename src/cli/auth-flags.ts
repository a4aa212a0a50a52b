/**
 * The auth flags (docs/security.md): checked and their files read before anything starts (a bad
 * value or file is a flag error, exit 2, naming the line). `mesh api` and `mesh sidecar`: the
 * process's EdgeAuth, listed by admin /auth_rules, reloaded on SIGHUP. The processes that serve
 * framework services (`mesh dev`, runService): the Mesh, which reads --authz_rules.
 */
import { FlagError, type Config } from './flags.js';
import type { Runtime } from '../process/runtime.js';
import type { ResolvedOptions } from '../process/options.js';
import { AuthSetupError, EdgeAuth, readAuthSetup, type AuthSetup } from '../edge/auth/edge.js';
import { AuthzSetupError, readAuthzSetup, ServiceAuthz, type AuthzSetup } from '../edge/auth/authz.js';
import { Mesh } from '../framework/mesh.js';

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

/** The Mesh of a process that serves framework services: a bad --authz_rules file or --authz_default is a flag error (exit 2). */
export function newMesh(options: ResolvedOptions, role: string): Mesh {
  try {
    return new Mesh(options, role);
  } catch (err) {
    if (err instanceof AuthzSetupError) throw new FlagError(err.format('flag'));
    throw err;
  }
}

/** The authz flags of a process that is not a Mesh (`mesh sidecar`): checked and the file read before anything starts (exit 2 naming the line). */
export function checkAuthzFlags(config: Config): AuthzSetup | undefined {
  try {
    return readAuthzSetup(config);
  } catch (err) {
    if (err instanceof AuthzSetupError) throw new FlagError(err.format('flag'));
    throw err;
  }
}

/** The process's ServiceAuthz (undefined without rules), shown by admin /auth_rules and reloaded on SIGHUP until shutdown. */
export function startAuthz(runtime: Runtime, setup: AuthzSetup | undefined): ServiceAuthz | undefined {
  if (!setup) return undefined;
  const authz = new ServiceAuthz(setup, { stats: runtime.stats, log: runtime.logging.get('config') });
  runtime.onShutdown(runtime.addAuthRulesSource(() => [authz.dump()]));
  runtime.onShutdown(authz.reloadOnSighup());
  return authz;
}
