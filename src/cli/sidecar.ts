/**
 * `mesh sidecar`: see docs/sidecar.md and src/fronts/sidecar/server.ts. planSidecar and
 * startSidecar build one sidecar from the flags; `mesh run` (src/cli/run.ts) starts its apps'
 * sidecars with them too.
 */
import type { AddressInfo } from 'node:net';
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';
import { FlagError, type Config, type ParsedArgs } from './flags.js';
import { Runtime } from '../process/runtime.js';
import { formatAddress, parseAddress, type HostPort } from '../base/util/address.js';
import { serviceNameProblem } from '../engines/registry/validate.js';
import { isPrimaryOf, runPrimary, WorkerLink } from './concurrency.js';
import { checkTlsFlags } from './tls-flags.js';
import { frontEdgeFromFlags, optionsFromFlags } from './options.js';
import { checkAuthFlags, checkAuthzFlags, startAuth, startAuthz } from './auth-flags.js';
import { inboundCluster } from '../fronts/sidecar/inbound.js';
import { AppFlagError, appOptionsFromFlags, parseAppAddress, type AppOptions } from '../fronts/sidecar/health-checker.js';
import { Sidecar, SIDECAR_DEFAULT_ADDRESS, SIDECAR_DEFAULT_ADMIN, SIDECAR_NAMESPACE, type SidecarHandler } from '../fronts/sidecar/server.js';
import { listenFailure } from '../base/util/listen-error.js';

/** A sidecar's settings, checked: what planSidecar found in the flags. */
export interface SidecarPlan {
  config: Config;
  handler: SidecarHandler;
  address: string;
  namespace: string;
  app?: AppOptions;
  appAddress?: HostPort;
  /** With --mtls and an app: the app is registered at the inbound listener. */
  inbound: boolean;
  inboundAddress: string;
  authSetup: ReturnType<typeof checkAuthFlags>;
  authzSetup: ReturnType<typeof checkAuthzFlags>;
}

/**
 * Everything that can be checked before starting anything: a FlagError (exit 2) naming the flag.
 * `ttlGiven`: --register_ttl was given explicitly.
 */
export function planSidecar(config: Config, ttlGiven: boolean): SidecarPlan {
  const handler = (config.handler ?? 'rpc') as string;
  if (handler !== 'rpc' && handler !== 'proxy') {
    throw new FlagError(`invalid value "${handler}" for flag --handler: the sidecar serves rpc (the default) or proxy`);
  }
  const address = config.address ?? SIDECAR_DEFAULT_ADDRESS;
  try {
    parseAddress(address);
  } catch (err) {
    throw new FlagError(`invalid value "${address}" for flag --address: ${(err as Error).message}`);
  }
  const namespace = config.namespace ?? SIDECAR_NAMESPACE;
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(namespace)) {
    throw new FlagError(`invalid value "${namespace}" for flag --namespace: dotted names only (e.g. go.mesh.srv)`);
  }
  let app;
  try {
    app = appOptionsFromFlags(config, ttlGiven);
  } catch (err) {
    if (err instanceof AppFlagError) throw new FlagError(err.format('flag'));
    throw err;
  }
  checkTlsFlags(config);
  const authSetup = checkAuthFlags(config);
  // With --mtls and an app, the app is registered at the sidecar's inbound listener (mutual TLS, --authz_rules).
  const mtls = config.mtls ?? 'off';
  const inbound = mtls !== 'off' && app !== undefined;
  const authzSetup = checkAuthzFlags(config);
  if (!inbound) {
    const needs = mtls === 'off' ? '--mtls=permissive or --mtls=strict' : '--server_name and --server_address';
    if (config.inbound_address !== undefined) throw new FlagError(`flag --inbound_address needs ${needs} (the inbound listener terminates mutual TLS for the app)`);
    if (authzSetup) throw new FlagError(`flag --authz_rules needs ${needs} on a sidecar (the rules are checked on the inbound listener of the app)`);
  }
  const appAddress = app ? parseAppAddress(app.address) : undefined;
  const inboundAddress = config.inbound_address ?? (appAddress ? formatAddress(appAddress.host, 0) : '');
  if (inbound) {
    try {
      parseAddress(inboundAddress);
    } catch (err) {
      throw new FlagError(`invalid value "${inboundAddress}" for flag --inbound_address: ${(err as Error).message}`);
    }
  }
  for (const name of config.inbound_auth_callers) {
    const problem = serviceNameProblem(name);
    if (problem) throw new FlagError(`invalid value ${JSON.stringify(name)} for flag --inbound_auth_callers: ${problem}`);
  }
  if (config.sidecar_token !== undefined && config.sidecar_token.length < 16) {
    throw new FlagError('invalid value for flag --sidecar_token: use at least 16 characters (e.g. openssl rand -hex 32)');
  }
  return { config, handler, address, namespace, app, appAddress, inbound, inboundAddress, authSetup, authzSetup };
}

/** The runtime of a sidecar (with the app's static cluster when the app is behind the inbound listener). */
export function sidecarRuntime(plan: SidecarPlan, worker?: WorkerLink): Runtime {
  const { config, inbound, app, appAddress } = plan;
  // The command line, with the listen address in use, is what admin /config_dump shows.
  return new Runtime(worker ? worker.options(config) : optionsFromFlags(config), { role: 'sidecar', flags: { ...config, address: plan.address }, staticClusters: inbound ? [inboundCluster(app!.name, appAddress!)] : undefined, reusePort: worker?.reusePort, processName: app?.name });
}

export interface StartedSidecar {
  sidecar: Sidecar;
  bound: AddressInfo;
  /** http(s)://host:port of the sidecar's listener. */
  url: string;
  /** What `mesh sidecar` prints once started (listener, admin, app, inbound). */
  lines: string[];
}

/**
 * Starts the sidecar of the plan in the runtime: TLS, the admin (`defaultAdmin` unless
 * --admin_address), the listener and the app's registration. On an error the runtime is shut down.
 */
export async function startSidecar(plan: SidecarPlan, runtime: Runtime, defaultAdmin = SIDECAR_DEFAULT_ADMIN): Promise<StartedSidecar> {
  const { config, handler, namespace, app, inbound, inboundAddress, authSetup, authzSetup, address } = plan;
  const mtls = config.mtls ?? 'off';
  try {
    // TLS first: a missing, unreadable or mismatched file (or a bad ACME set-up) is a start-up error naming it (exit 1).
    await runtime.startTls();
    // With --mtls, the sidecar calls as the app it fronts (--server_name), or as mesh.sidecar.
    // The same certificate is presented by the inbound listener.
    const workload = await runtime.workloadTls(app?.name ?? CALLER_NAMES.sidecar);
    const admin = await runtime.startAdmin(defaultAdmin);
    const inboundOptions = inbound && workload ? { address: inboundAddress, advertise: config.advertise, workload, authz: startAuthz(runtime, authzSetup), authCallers: config.inbound_auth_callers } : undefined;
    const sidecar = new Sidecar(runtime, { namespace, handler, app, ...frontEdgeFromFlags(config, runtime, { role: 'sidecar', namespace }), auth: await startAuth(runtime, authSetup), sidecarToken: config.sidecar_token, inbound: inboundOptions, routesFile: config.routes, http2: config.enable_http2 });
    // A listener that cannot bind says which, why, and the flag to change.
    const bound = await sidecar.start(address);
    const scheme = sidecar.secure ? 'https' : 'http';
    const url = `${scheme}://${formatAddress(bound.address, bound.port)}`;
    const lines = [`mesh sidecar listening on ${url} (handler ${handler}, namespace ${namespace}${sidecar.routes ? `, ${routeCount(sidecar.routes.routes.length)} from ${config.routes}` : ''})`, adminLine(admin)];
    if (app) {
      lines.push(
        app.healthcheckUrl
          ? `app ${app.name} at ${app.address}: checked at ${app.healthcheckUrl} every ${config.healthcheck_interval}ms (timeout ${app.timeoutMs}ms)`
          : `app ${app.name} at ${app.address}: registered (no health check)`,
      );
      const ib = sidecar.inboundBound;
      if (ib) lines.push(`inbound listening on ${formatAddress(ib.address, ib.port)} for ${app.name} (mutual TLS, --mtls=${mtls}${inboundOptions?.authz ? ', --authz_rules' : ''})`);
    }
    return { sidecar, bound, url, lines };
  } catch (err) {
    await runtime.shutdown();
    throw err;
  }
}

function adminLine(admin: { host: string; port: number } | undefined): string {
  return admin ? `admin listening on http://${formatAddress(admin.host, admin.port)}` : 'admin off';
}

export async function runSidecar(args: ParsedArgs): Promise<number> {
  const config = args.config;
  const plan = planSidecar(config, args.given.has('register_ttl'));
  // --concurrency above 1: this process runs the workers and the admin (src/cli/concurrency.ts).
  if (isPrimaryOf(config)) {
    const listens = [{ address: plan.address, error: (e: NodeJS.ErrnoException) => `sidecar cannot listen on ${plan.address}: ${listenFailure(e, plan.address, '--address')}` }];
    if (plan.inbound) listens.push({ address: plan.inboundAddress, error: (e) => `inbound listener cannot listen on ${plan.inboundAddress}: ${listenFailure(e, plan.inboundAddress, '--inbound_address')}` });
    return runPrimary({ role: 'sidecar', config, defaultAdminAddress: SIDECAR_DEFAULT_ADMIN, adminLine, adminLineIndex: 1, listens });
  }
  const worker = WorkerLink.join(config);
  const runtime = sidecarRuntime(plan, worker);
  runtime.installSignalHandlers();
  worker?.attach(runtime);
  const { lines } = await startSidecar(plan, runtime);
  if (worker) worker.ready(runtime, lines);
  else process.stdout.write(lines.join('\n') + '\n');
  return -1;
}

function routeCount(n: number): string {
  return `${n} route${n === 1 ? '' : 's'}`;
}
