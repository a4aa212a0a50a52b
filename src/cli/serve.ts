/**
 * runService: the entry point of a process that serves framework services (your own, the
 * examples): parses the mesh flags, builds the Mesh, lets `build` add services, starts them with
 * the admin interface (127.0.0.1:0 unless --admin_address says otherwise), prints one line per
 * service and drains on SIGINT/SIGTERM. A bad flag exits 2; a failed start exits 1.
 */
import { parseArgs, FlagError } from './flags.js';
import { optionsFromFlags } from './options.js';
import type { Mesh } from '../framework/mesh.js';
import { newMesh } from './auth-flags.js';
import { formatAddress } from '../base/util/address.js';
import { errorMessage } from '../base/util/option-error.js';

/** Services share one machine, so their admin interfaces take a free port unless told otherwise. */
export const SERVICE_ADMIN_ADDRESS = '127.0.0.1:0';

/**
 * Runs a flag-driven service process. `argv` defaults to `process.argv.slice(2)`; `build` adds
 * the services (`mesh.service(...)`) and may be async. Resolves with the started Mesh.
 */
export async function runService(build: (mesh: Mesh) => void | Promise<void>, argv: string[] = process.argv.slice(2)): Promise<Mesh> {
  let mesh: Mesh;
  try {
    const { config } = parseArgs(argv, process.env, { command: false });
    const options = optionsFromFlags(config, { address: config.address, adminAddress: config.admin_address ?? SERVICE_ADMIN_ADDRESS });
    mesh = newMesh(options, 'service');
  } catch (err) {
    process.stderr.write(`mesh: ${errorMessage(err, 'flag')}\n`);
    process.exit(err instanceof FlagError ? 2 : 1);
  }
  mesh.installSignalHandlers();
  try {
    await build(mesh);
    const { services, admin } = await mesh.start();
    for (const record of services) {
      const node = record.nodes[0]!;
      process.stdout.write(`${record.name} listening on ${formatAddress(node.address, node.port)} (node ${node.id})${admin ? `, admin on ${formatAddress(admin.host, admin.port)}` : ''}\n`);
    }
  } catch (err) {
    process.stderr.write(`mesh: ${errorMessage(err, 'flag')}\n`);
    await mesh.close();
    process.exit(1);
  }
  return mesh;
}
