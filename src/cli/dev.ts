/** `mesh dev` / `npm start`: the demo on the embedded default, with what to try printed. */
import { tlsEnabled } from '../tls/index.js';
import type { ParsedArgs } from './flags.js';
import { frontEdgeFromFlags, optionsFromFlags } from './options.js';
import { newMesh } from './auth-flags.js';
import { greeterApi, greeterBackend } from '../demo/greeter.js';
import { DEFAULT_ADDRESS, DEFAULT_NAMESPACE, Gateway } from '../fronts/gateway/server.js';
import { checkGatewayFlags } from './api.js';
import { Sidecar, SIDECAR_NAMESPACE } from '../fronts/sidecar/server.js';
import { formatAddress, isWildcard } from '../base/util/address.js';
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';
import { errorMessage } from '../base/util/option-error.js';
import { defaultCaDir } from '../tls/workload/index.js';
import type { ResolvedOptions } from '../process/options.js';
import { parseGatewayPorts } from '../fronts/gateway/listeners.js';
import { warnRpcOpenToAll } from './api.js';

/** The banner's line on mutual TLS: the mode, where the certificates come from, how to change it. */
export function mtlsLine(o: Pick<ResolvedOptions, 'mtls' | 'caDir' | 'meshHome' | 'mtlsCertFile'>): string {
  if (o.mtls === 'off') return 'mTLS:     off (--mtls=strict: the services accept only callers with a mesh certificate)';
  const from = o.mtlsCertFile !== undefined ? `--mtls_cert_file ${o.mtlsCertFile}` : `the mesh CA in ${defaultCaDir(o.caDir, o.meshHome)}`;
  return `mTLS:     ${o.mtls}, certificates from ${from} (--mtls=off turns it off)`;
}

export async function runDev(args: ParsedArgs): Promise<number> {
  checkGatewayFlags(args);
  const config = args.config;
  // mesh dev shows the requests it serves: its access log is on stdout unless --access_log says otherwise.
  const mesh = newMesh(optionsFromFlags({ ...config, access_log: config.access_log ?? 'stdout' }), 'dev');
  const runtime = mesh.runtime;
  runtime.installSignalHandlers();
  try {
    // The gateway (mesh api, in this process). Built before the admin so admin /routes shows its table.
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
    });
    const admin = await runtime.startAdmin('127.0.0.1:9901');
    // With --mtls (strict by default here), the gateway's identity is opened first: it is what
    // every call of this one process presents (the gateway's, the sidecar's and the API greeter's),
    // while each service serves its own.
    try {
      await runtime.workloadTls(CALLER_NAMES.gateway);
    } catch (err) {
      // The user may not know the demo uses a CA at all: say why it needs one, and how not to.
      if (args.given.has('mtls')) throw err;
      throw new Error(`${errorMessage(err, 'flag')} (mesh dev runs with --mtls=strict unless told otherwise; --mtls=off runs the demo without mutual TLS)`);
    }
    const backend = greeterBackend(mesh);
    const api = greeterApi(mesh);
    await backend.start();
    await api.start();
    const bound = await gateway.start();
    warnRpcOpenToAll(runtime, config, bound);
    const gatewayHost = isWildcard(bound.address) ? 'localhost' : bound.address;
    const gatewayUrl = `${tlsEnabled(runtime.options) ? 'https' : 'http'}://${formatAddress(gatewayHost, bound.port)}`;

    // ---- sidecar: the sidecar helper starts `mesh sidecar` here (same runtime) and adds its lines below ----
    const sidecarLines: string[] = [];
    {
      const sidecar = new Sidecar(runtime, { namespace: SIDECAR_NAMESPACE, handler: 'rpc' });
      try {
        const sc = await sidecar.start(config.sidecar_address);
        sidecarLines.push(`  sidecar:  ${tlsEnabled(runtime.options) ? 'https' : 'http'}://${formatAddress(sc.address, sc.port)} (mesh --proxy_address=${formatAddress(sc.address, sc.port)} list services)`);
      } catch (err) {
        // Another sidecar may own the port: the demo runs without this one.
        sidecarLines.push(`  sidecar:  not started (${config.sidecar_address}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
    }
    // ---- end of sidecar ----

    const home = config.registry === 'local' ? ` (registry: ${config.registry_address ?? process.env.MESH_HOME ?? '~/.mesh'})` : '';
    const curlTarget = gatewayUrl.replace(/^http:\/\//, '');
    process.stdout.write(
      [
        `mesh dev is running${home}.`,
        `  services: go.mesh.srv.greeter, go.mesh.api.greeter`,
        `  gateway:  ${gatewayUrl} (listening on ${formatAddress(bound.address, bound.port)})`,
        ...sidecarLines,
        `  ${mtlsLine(runtime.options)}`,
        admin ? `  admin:    http://${formatAddress(admin.host, admin.port)}/help` : '  admin:    off',
        '',
        'Try, in another terminal:',
        `  curl '${curlTarget}/greeter/say/hello?name=John'`,
        `  curl -XPOST ${curlTarget}/rpc -d '{"service":"go.mesh.srv.greeter","method":"Say.Hello","request":{"name":"John"}}' -H 'content-type: application/json'`,
        '  npx mesh list services',
        admin ? `  curl http://${admin.host}:${admin.port}/clusters` : '',
        `  npx mesh call go.mesh.srv.greeter Say.Hello '{"name":"John"}'`,
        '',
        'Ctrl-C stops everything.',
        '',
      ].join('\n'),
    );
  } catch (err) {
    await runtime.shutdown();
    throw err;
  }
  return -1; // keep running until a signal
}
