/** `mesh xds`: the registry served as Envoy xDS v3 over ADS (docs/xds.md, src/xds/). */
import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { FlagError, type ParsedArgs } from './flags.js';
import { Runtime } from '../process/runtime.js';
import { optionsFromFlags } from './options.js';
import { formatAddress, parseAddress } from '../base/util/address.js';
import { resolveSettings, retryBudgetDefaults } from '../core/upstream/config.js';
import { XdsControlPlane } from '../xds/control-plane.js';
import { ENVOY_LISTENER_ADDRESS, parseListenerAddress } from './envoy.js';
import { ENVOY_LISTENER_NAME } from '../xds/route-file.js';

/** Where `mesh xds` serves ADS unless --address says otherwise. */
export const XDS_ADDRESS = '127.0.0.1:18000';
/** The admin interface of `mesh xds` unless --admin_address says otherwise. */
export const XDS_ADMIN_ADDRESS = '127.0.0.1:9904';

export async function runXds(args: ParsedArgs): Promise<number> {
  const config = args.config;
  if (args.positionals.length > 1) throw new FlagError(`xds takes no arguments (got "${args.positionals.slice(1).join(' ')}")`);
  let listen;
  try {
    listen = parseAddress(config.address ?? XDS_ADDRESS);
  } catch (err) {
    throw new FlagError(`--address: ${(err as Error).message}`);
  }
  let routes: { file: string; address: ReturnType<typeof parseAddress> } | undefined;
  if (config.routes !== undefined) {
    try {
      routes = { file: config.routes, address: parseListenerAddress(config.listener_address ?? ENVOY_LISTENER_ADDRESS) };
    } catch (err) {
      throw new FlagError((err as Error).message);
    }
  } else if (config.listener_address !== undefined) throw new FlagError("--listener_address is for --routes (where the Envoy HTTP listener of the route file listens)");
  if (config.enable_tls && (!config.tls_cert_file || !config.tls_key_file)) throw new FlagError('--enable_tls needs --tls_cert_file and --tls_key_file');
  if (config.xds_token !== undefined && config.xds_token.length < 16) throw new FlagError('invalid value for flag --xds_token: use at least 16 characters (e.g. openssl rand -hex 32)');
  if (config.xds_tls_client_ca_file !== undefined && !config.enable_tls) throw new FlagError('--xds_tls_client_ca_file needs --enable_tls (mutual TLS is TLS)');
  const runtime = new Runtime(optionsFromFlags(config), { role: 'xds', flags: config, registryClusters: false });
  runtime.installSignalHandlers();
  try {
    const options = runtime.options;
    const settings = resolveSettings(undefined, retryBudgetDefaults(options.retryBudgetPercent, options.retryBudgetMin), options.lbPolicy, true);
    let credentials: grpc.ServerCredentials | undefined;
    if (config.enable_tls) {
      const read = (flag: string, path: string) => {
        try {
          return readFileSync(path);
        } catch (err) {
          throw new Error(`--${flag}: cannot read ${path}: ${(err as Error).message}`);
        }
      };
      const clientCa = config.xds_tls_client_ca_file !== undefined ? read('xds_tls_client_ca_file', config.xds_tls_client_ca_file) : null;
      if (clientCa && !clientCa.includes('-----BEGIN CERTIFICATE-----')) throw new FlagError(`--xds_tls_client_ca_file: ${config.xds_tls_client_ca_file} holds no PEM certificate`);
      credentials = grpc.ServerCredentials.createSsl(clientCa, [{ cert_chain: read('tls_cert_file', config.tls_cert_file!), private_key: read('tls_key_file', config.tls_key_file!) }], clientCa !== null);
    }
    const plane = new XdsControlPlane({ registry: runtime.registry, settings, stats: runtime.stats, log: runtime.logging.get('server'), credentials, routes, admission: { token: config.xds_token, nodeIds: config.xds_node_ids } });
    runtime.onShutdown(() => plane.close());
    const port = await plane.start(listen.host, listen.port);
    const admin = await runtime.startAdmin(XDS_ADMIN_ADDRESS, { clusters: plane.clustersView() });
    const snapshot = plane.snapshot!;
    process.stdout.write(
      [
        `mesh xds listening on ${credentials ? 'grpcs' : 'grpc'}://${formatAddress(listen.host, port)} (ADS, ${snapshot.resources.cluster.size} cluster${snapshot.resources.cluster.size === 1 ? '' : 's'} from the ${runtime.registry.name} registry)`,
        ...(routes ? [`mesh xds serves Envoy listener ${ENVOY_LISTENER_NAME} on ${formatAddress(routes.address.host, routes.address.port)} with the routes of ${routes.file}`] : []),
        admin ? `mesh xds admin on http://${formatAddress(admin.host, admin.port)}` : 'mesh xds admin off',
      ].join('\n') + '\n',
    );
  } catch (err) {
    await runtime.shutdown();
    throw err;
  }
  return -1; // keep running until a signal or /quitquitquit
}
