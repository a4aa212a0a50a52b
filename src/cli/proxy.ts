/** `mesh proxy -c FILE`: the stand-alone L7 proxy (docs/proxy.md, src/fronts/proxy/). */
import { CALLER_NAMES } from '../base/mtls/workload-tls.js';
import { FlagError, type ParsedArgs } from './flags.js';
import { Runtime } from '../process/runtime.js';
import { tlsEnabled } from '../tls/index.js';
import { checkTlsFlags } from './tls-flags.js';
import { formatAddress } from '../base/util/address.js';
import { optionsFromFlags } from './options.js';
import { loadProxyConfig, PROXY_ADMIN_ADDRESS } from '../fronts/proxy/config.js';
import { Proxy } from '../fronts/proxy/server.js';
import { isPrimaryOf, runPrimary, WorkerLink } from './concurrency.js';
import { listenFailure } from '../base/util/listen-error.js';

export async function runProxy(args: ParsedArgs): Promise<number> {
  const config = args.config;
  if (args.positionals.length > 1) throw new FlagError(`proxy takes no arguments (got "${args.positionals.slice(1).join(' ')}"): use -c FILE`);
  if (!config.config) throw new FlagError('the proxy needs a configuration file: mesh proxy -c FILE (see docs/proxy.md)');
  checkTlsFlags(config);
  // Every problem of the file is found here, before anything starts (exit 1, naming file and field).
  const file = loadProxyConfig(config.config);

  const adminLine = (admin: { host: string; port: number } | undefined) =>
    admin ? `mesh proxy admin on http://${formatAddress(admin.host, admin.port)}` : 'mesh proxy admin off';
  // --concurrency above 1: this process runs the workers and the admin (src/cli/concurrency.ts).
  if (isPrimaryOf(config)) {
    const listens = file.listeners.map((l) => ({
      address: l.address,
      error: (e: NodeJS.ErrnoException) => `listener ${l.name} cannot listen on ${l.address}: ${listenFailure(e, l.address, 'address in its configuration')}`,
    }));
    return runPrimary({ role: 'proxy', config, defaultAdminAddress: file.adminAddress ?? PROXY_ADMIN_ADDRESS, adminLine, adminLineIndex: file.listeners.length, listens });
  }
  const worker = WorkerLink.join(config);
  const runtime = new Runtime(worker ? worker.options(config) : optionsFromFlags(config), { role: 'proxy', staticClusters: file.clusters, registryClusters: file.usesRegistry, reusePort: worker?.reusePort });
  runtime.installSignalHandlers();
  worker?.attach(runtime);
  try {
    await runtime.startTls();
    // With --mtls, the proxy's own identity (mesh.proxy): what its calls to mesh nodes present.
    await runtime.workloadTls(CALLER_NAMES.proxy);
    const proxy = new Proxy(runtime, file);
    const admin = await runtime.startAdmin(file.adminAddress ?? PROXY_ADMIN_ADDRESS);
    const bound = await proxy.start();
    const scheme = tlsEnabled(runtime.options) ? 'https' : 'http';
    const lines = bound.map(({ name, address }) => {
      const listener = proxy.listeners.find((l) => l.name === name)!;
      const routes = listener.config.routes.length;
      const fromFile = listener.routes ? `, ${listener.routes.routes.length} from ${listener.config.routeFile}` : '';
      return `mesh proxy listener ${name} on ${scheme}://${formatAddress(address.address, address.port)} (${routes} route${routes === 1 ? '' : 's'}${fromFile})`;
    });
    lines.push(adminLine(admin));
    lines.push(`mesh proxy ready: ${file.clusters.length} static cluster${file.clusters.length === 1 ? '' : 's'}, ${file.usesRegistry ? 'registry services' : 'no registry'}`);
    if (worker) worker.ready(runtime, lines);
    else process.stdout.write(lines.join('\n') + '\n');
  } catch (err) {
    await runtime.shutdown();
    throw err;
  }
  return -1; // keep running until a signal or /quitquitquit
}
