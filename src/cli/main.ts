#!/usr/bin/env node
/** `mesh`: the one command-line program (DESIGN section 3). */
import { parseArgs, flagsHelp, FlagError, type ParsedArgs } from './flags.js';
import { runPlatformCommand } from './commands.js';
import { MeshError } from '../errors.js';
import { packageVersion } from '../admin/build-info.js';

const USAGE = `usage: mesh [global flags] <command> [flags]

commands:
  dev                                  the demo: example services, gateway and sidecar on the embedded default
  api                                  the API gateway (default :8080, admin 127.0.0.1:9901)
  sidecar                              the sidecar (default 127.0.0.1:8081, admin 127.0.0.1:9902)
  proxy -c FILE                        the stand-alone L7 proxy: listeners, routes, clusters (admin 127.0.0.1:9903)
  list services                        service names, one per line
  get service NAME                     one service: nodes and endpoints
  register service JSON                register a service ({"Name":..,"Nodes":[{"Id","Address","Port"}]})
  deregister service JSON              deregister the nodes given
  call SERVICE Endpoint.Method [JSON]  call a service by RPC
  publish TOPIC MESSAGE                publish a message
  subscribe TOPIC [--queue Q]          print messages as they arrive
  health SERVICE                       Debug.Health of every node

switches: --help, --version, --hot-restart-version

flags (also as MESH_<NAME> in the environment):
`;

export type CommandRunner = (args: ParsedArgs) => Promise<number>;

/** Long-running server commands, loaded only when asked for. */
const SERVER_COMMANDS: Record<string, () => Promise<CommandRunner>> = {
  dev: async () => (await import('./dev.js')).runDev,
  api: async () => (await import('./api.js')).runApi,
  sidecar: async () => (await import('./sidecar.js')).runSidecar,
  proxy: async () => (await import('./proxy.js')).runProxy,
};

export async function main(argv: string[]): Promise<number> {
  let args: ParsedArgs;
  try {
    args = parseArgs(argv);
  } catch (err) {
    if (err instanceof FlagError) {
      process.stderr.write(`mesh: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (args.switches.has('help')) {
    process.stdout.write(USAGE + flagsHelp() + '\n');
    return 0;
  }
  if (args.switches.has('version')) {
    process.stdout.write(`mesh ${packageVersion()}\n`);
    return 0;
  }
  if (args.switches.has('hot-restart-version')) {
    const { hotRestartVersion } = await import('../admin/hot-restart.js');
    process.stdout.write(hotRestartVersion());
    return 0;
  }
  const command = args.positionals[0];
  if (!command) {
    process.stderr.write(USAGE + flagsHelp() + '\n');
    return 2;
  }
  try {
    const server = SERVER_COMMANDS[command];
    if (server) return await (await server())(args);
    return await runPlatformCommand(args.positionals, args.config, {
      out: (t) => process.stdout.write(t),
      err: (t) => process.stderr.write(t),
    });
  } catch (err) {
    if (err instanceof FlagError) {
      process.stderr.write(`mesh: ${err.message}\n`);
      return 2;
    }
    if (err instanceof MeshError) {
      process.stderr.write(args.config.output === 'json' ? err.toBody() + '\n' : `mesh: ${err.detail} (${err.code} ${err.statusText})\n`);
      return 1;
    }
    process.stderr.write(`mesh: ${(err as Error).message}\n`);
    return 1;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    // Server commands keep running until a signal; short commands exit with their code.
    if (code >= 0) process.exitCode = code;
    if (code >= 0) setImmediate(() => process.exit(code));
  },
  (err: unknown) => {
    process.stderr.write(`mesh: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
