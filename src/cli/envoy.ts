/**
 * `mesh envoy bootstrap`: prints the Envoy bootstrap of src/xds/bootstrap.ts, YAML by default,
 * JSON with --output=json; with --routes, an HTTP listener with the route file's routes
 * (src/xds/envoy-routes.ts), and what Envoy does differently from mesh as warnings on stderr. Every flag is checked here (exit 2 with the flag named); the files
 * given are paths on Envoy's machine, so they are not read.
 */
import { hostname } from 'node:os';
import { isIP } from 'node:net';
import { stringify } from 'yaml';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { AddressError, parseAddress, type HostPort } from '../base/util/address.js';
import { envoyBootstrap, type XdsTlsFiles } from '../xds/bootstrap.js';
import { envoyRoutes } from '../xds/envoy-routes.js';
import { loadRouteFile } from '../edge/routes/file.js';
import { refuseGateways } from '../edge/routes/live.js';

/** Envoy's admin interface unless --admin_address says otherwise: clear of mesh's own (9901 to 9904). */
export const ENVOY_ADMIN_ADDRESS = '127.0.0.1:9905';
/** Envoy's HTTP listener (with --routes) unless --listener_address says otherwise. */
export const ENVOY_LISTENER_ADDRESS = ':10000';

const USAGE = 'usage: mesh envoy bootstrap --xds_address=HOST:PORT [--node_id=ID] [--node_cluster=NAME] [--admin_address=HOST:PORT|off] [--routes=FILE [--listener_address=HOST:PORT]] [--xds_tls_ca_file=FILE [--xds_tls_cert_file=FILE --xds_tls_key_file=FILE]]';

/** Runs `mesh envoy …`; resolves with the exit code. */
export function runEnvoyCommand(positionals: string[], config: Config, io: Output): number {
  const [, noun, ...rest] = positionals;
  if (noun !== 'bootstrap') throw new UsageError(USAGE);
  if (rest.length > 0) throw new UsageError(`mesh envoy bootstrap: unexpected argument "${rest[0]}" (${USAGE})`);
  if (config.xds_address === undefined) throw new UsageError(`mesh envoy bootstrap needs --xds_address: where mesh xds listens, e.g. --xds_address=127.0.0.1:18000 (${USAGE})`);
  const xds = address(config.xds_address, '--xds_address');
  const adminText = config.admin_address ?? ENVOY_ADMIN_ADDRESS;
  const admin = adminText === 'off' ? undefined : address(adminText, '--admin_address', false);
  const nodeId = config.node_id ?? hostname();
  if (!nodeId.trim()) throw new UsageError('--node_id: must not be empty');
  if (!config.node_cluster.trim()) throw new UsageError('--node_cluster: must not be empty');
  let listeners: Array<Record<string, unknown>> | undefined;
  if (config.routes !== undefined) {
    let listen: HostPort;
    try {
      listen = parseListenerAddress(config.listener_address ?? ENVOY_LISTENER_ADDRESS);
    } catch (err) {
      if (err instanceof AddressError) throw new UsageError(err.message);
      throw err;
    }
    // A file that cannot be read or is wrong throws its RouteFileError (file, line, field): exit 1, as mesh api.
    const file = loadRouteFile(config.routes);
    refuseGateways(file, 'mesh envoy bootstrap');
    const routes = envoyRoutes(file, { address: listen, form: 'json', versionSubsets: true });
    listeners = [routes.listener];
    for (const w of routes.warnings) io.err(`mesh: warning: ${w}\n`);
  } else if (config.listener_address !== undefined) throw new UsageError('--listener_address is for --routes (the route file of Envoy\'s HTTP listener)');
  const bootstrap = envoyBootstrap({ xds, admin, nodeId, nodeCluster: config.node_cluster, tls: tlsFiles(config), listeners });
  io.out(config.output === 'json' ? JSON.stringify(bootstrap, null, 2) + '\n' : stringify(bootstrap, { aliasDuplicateObjects: false }));
  return 0;
}

/**
 * `--listener_address` (mesh envoy bootstrap, mesh xds --routes): where Envoy's HTTP listener
 * binds, an IP address and a port. Envoy binds listeners to IP addresses and resolves no name, so
 * a host name is refused here rather than by Envoy. Throws an AddressError.
 */
export function parseListenerAddress(text: string): HostPort {
  const a = parseAddress(text, { target: false, what: '--listener_address' });
  if (isIP(a.host) === 0) {
    throw new AddressError(`invalid --listener_address "${text}": Envoy listens on an IP address, not a host name (e.g. 0.0.0.0:${a.port} for every address, 127.0.0.1:${a.port} for this machine only)`);
  }
  return a;
}

function address(text: string, flag: string, target = true): HostPort {
  try {
    return parseAddress(text, { target, what: flag });
  } catch (err) {
    if (err instanceof AddressError) throw new UsageError(err.message);
    throw err;
  }
}

function tlsFiles(config: Config): XdsTlsFiles | undefined {
  const { xds_tls_ca_file: caFile, xds_tls_cert_file: certFile, xds_tls_key_file: keyFile, xds_tls_server_name: serverName, xds_tls_san: sans } = config;
  if (certFile !== undefined && keyFile === undefined) throw new UsageError('--xds_tls_cert_file needs --xds_tls_key_file (its private key)');
  if (keyFile !== undefined && certFile === undefined) throw new UsageError('--xds_tls_key_file needs --xds_tls_cert_file (the certificate it is the key of)');
  if (caFile === undefined) {
    const stray = certFile !== undefined ? '--xds_tls_cert_file' : serverName !== undefined ? '--xds_tls_server_name' : sans.length > 0 ? '--xds_tls_san' : undefined;
    if (stray) throw new UsageError(`${stray} needs --xds_tls_ca_file (the CA that signs the xDS server's certificate; TLS is on with it)`);
    return undefined;
  }
  for (const [flag, value] of [['--xds_tls_ca_file', caFile], ['--xds_tls_cert_file', certFile], ['--xds_tls_key_file', keyFile], ['--xds_tls_server_name', serverName]] as const) {
    if (value !== undefined && value.trim() === '') throw new UsageError(`${flag}: must not be empty`);
  }
  for (const san of sans) if (!san.trim() || /\s/.test(san)) throw new UsageError(`--xds_tls_san: "${san}" is not a name (spiffe:// URI, IP address or DNS name, no spaces)`);
  return { caFile, certFile, keyFile, serverName, subjectAltNames: sans };
}
