/** `mesh api`: the API gateway (docs/gateway.md). */
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';
import { FlagError, type ParsedArgs } from './flags.js';
import { Runtime } from '../process/runtime.js';
import { DEFAULT_ADDRESS, DEFAULT_NAMESPACE, Gateway, describeHandler } from '../fronts/gateway/server.js';
import { tlsEnabled } from '../tls/index.js';
import { checkTlsFlags } from './tls-flags.js';
import { frontEdgeFromFlags, optionsFromFlags } from './options.js';
import { formatAddress, isLoopback } from '../base/util/address.js';
import { parseGatewayPorts } from '../fronts/gateway/listeners.js';
import { checkAuthFlags, startAuth } from './auth-flags.js';
import { isPrimaryOf, runPrimary, WorkerLink } from './concurrency.js';
import { listenFailure } from '../base/util/listen-error.js';

/** The admin interface of `mesh api` unless --admin_address says otherwise. */
export const API_ADMIN_ADDRESS = '127.0.0.1:9901';

export function checkGatewayFlags(args: ParsedArgs): void {
  const config = args.config;
  checkTlsFlags(config);
  if (config.namespace !== undefined && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?$/.test(config.namespace)) {
    throw new FlagError(`invalid value "${config.namespace}" for flag --namespace: use dot-separated names like go.mesh.api`);
  }
}

/** --rpc_allow unset or a bare `*`: /rpc may call any service. */
function rpcOpenToAll(allow: readonly string[] | undefined): boolean {
  return allow === undefined || allow.length === 0 || allow.includes('*');
}

/**
 * The gateway's warning at start (`mesh api` and `mesh dev`): POST /rpc may call every service
 * and the gateway listens beyond loopback. Said once (by the only process, or the first worker).
 */
export function warnRpcOpenToAll(runtime: Runtime, config: ParsedArgs['config'], bound: { address: string; port: number }): void {
  if (!config.enable_rpc || !rpcOpenToAll(config.rpc_allow) || isLoopback(bound.address)) return;
  runtime.logging.get('gateway').warn(
    { address: formatAddress(bound.address, bound.port) },
    'POST /rpc may call every service and the gateway listens beyond loopback: list the services it may call with --rpc_allow (or --enable_rpc=false)',
  );
}

export async function runApi(args: ParsedArgs): Promise<number> {
  checkGatewayFlags(args);
  const config = args.config;
  const authSetup = checkAuthFlags(config);
  const adminLine = (admin: { host: string; port: number } | undefined) =>
    admin ? `mesh api admin on http://${formatAddress(admin.host, admin.port)}` : 'mesh api admin off';
  // --concurrency above 1: this process runs the workers and the admin (src/cli/concurrency.ts).
  if (isPrimaryOf(config)) {
    const address = config.address ?? DEFAULT_ADDRESS;
    const listens = [{ address, error: (e: NodeJS.ErrnoException) => `gateway cannot listen on ${address}: ${listenFailure(e, address, '--address')}` }];
    return runPrimary({ role: 'api', config, defaultAdminAddress: API_ADMIN_ADDRESS, adminLine, adminLineIndex: 1, listens });
  }
  const worker = WorkerLink.join(config);
  const runtime = new Runtime(worker ? worker.options(config) : optionsFromFlags(config), { role: 'api', flags: { ...config, address: config.address ?? DEFAULT_ADDRESS }, reusePort: worker?.reusePort });
  runtime.installSignalHandlers();
  worker?.attach(runtime);
  try {
    // TLS first: a bad certificate file, ACME cache or challenge port is a start-up error naming it.
    await runtime.startTls();
    // With --mtls, the gateway's own identity (mesh.api): what its calls to the services present.
    await runtime.workloadTls(CALLER_NAMES.gateway);
    const gateway = new Gateway(runtime, {
      address: config.address ?? DEFAULT_ADDRESS,
      namespace: config.namespace ?? DEFAULT_NAMESPACE,
      handler: config.handler,
      routesFile: config.routes,
      gatewayPorts: parseGatewayPorts(config.gateway_ports),
      enableStats: config.enable_stats,
      enableRpc: config.enable_rpc,
      http2: config.enable_http2,
      rpcAllow: config.rpc_allow,
      ...frontEdgeFromFlags(config, runtime, { role: 'api', namespace: config.namespace ?? DEFAULT_NAMESPACE }),
      auth: await startAuth(runtime, authSetup),
    });
    const admin = await runtime.startAdmin(API_ADMIN_ADDRESS);
    const bound = await gateway.start();
    if ((worker?.index ?? 0) === 0) warnRpcOpenToAll(runtime, config, bound);
    const scheme = tlsEnabled(runtime.options) ? 'https' : 'http';
    const lines = [
      `mesh api listening on ${scheme}://${formatAddress(bound.address, bound.port)} (namespace ${gateway.namespace}, ${describeHandler(gateway.handler)}${gateway.routes ? `, ${gateway.routes.routes.length} route${gateway.routes.routes.length === 1 ? '' : 's'} from ${config.routes}` : ''})`,
      ...gateway.gatewayPorts.map((p) => `mesh api Gateway port ${p.port} on ${p.url} (${p.listeners.join(', ')})`),
      adminLine(admin),
    ];
    if (worker) worker.ready(runtime, lines);
    else process.stdout.write(lines.join('\n') + '\n');
  } catch (err) {
    await runtime.shutdown();
    throw err;
  }
  return -1; // keep running until a signal or /quitquitquit
}
