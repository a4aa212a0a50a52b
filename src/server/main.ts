/**
 * Entry point for a process that serves framework services (the examples, your own services):
 * parses the mesh flags, builds the runtime, mounts the admin interface, starts the services and
 * shuts down cleanly on SIGINT/SIGTERM.
 */
import { parseArgs, FlagError } from '../cli/flags.js';
import { Runtime } from '../runtime.js';
import type { Service } from './service.js';

export async function serveMain(argv: string[], build: (runtime: Runtime, address?: string) => Service[]): Promise<Runtime> {
  let args;
  try {
    args = parseArgs(argv);
  } catch (err) {
    if (err instanceof FlagError) {
      process.stderr.write(`mesh: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const runtime = new Runtime(args.config, { role: 'service' });
  runtime.installSignalHandlers();
  try {
    // Services share one machine, so their admin interfaces take a free port unless told otherwise.
    const admin = await runtime.startAdmin('127.0.0.1:0');
    for (const service of build(runtime, args.config.address)) {
      const record = await service.start();
      const node = record.nodes[0]!;
      process.stdout.write(`${record.name} listening on ${node.address}:${node.port} (node ${node.id})${admin ? `, admin on ${admin.host}:${admin.port}` : ''}\n`);
    }
  } catch (err) {
    process.stderr.write(`mesh: ${(err as Error).message}\n`);
    await runtime.shutdown();
    process.exit(1);
  }
  return runtime;
}
