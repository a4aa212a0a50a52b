#!/usr/bin/env node
/**
 * `mesh`: the one command-line program (DESIGN section 3). Help, version and completion are
 * answered from this file and the light modules it imports (flags, help, build-info); everything
 * that starts the runtime is imported only when a command needs it.
 */
import { parseArgs, FlagError, attributeFlagError, didYouMean, type ParsedArgs } from './flags.js';
import { COMMANDS, allFlagsHelp, commandHelp, findCommand, mainHelp } from './help.js';
import { packageVersion } from '../admin/build-info.js';
import { cliOutput, type CliOutput } from './output.js';
import { errorMessage } from '../base/util/option-error.js';
import { OPTIONS } from '../base/options/schema.js';

export type CommandRunner = (args: ParsedArgs) => Promise<number>;

/** Long-running server commands, loaded only when asked for. */
const SERVER_COMMANDS: Record<string, () => Promise<CommandRunner>> = {
  dev: async () => (await import('./dev.js')).runDev,
  api: async () => (await import('./api.js')).runApi,
  sidecar: async () => (await import('./sidecar.js')).runSidecar,
  proxy: async () => (await import('./proxy.js')).runProxy,
  run: async () => (await import('./run.js')).runRun,
  xds: async () => (await import('./xds.js')).runXds,
};

function unknownCommand({ err }: CliOutput, words: string[], candidates: string[]): number {
  const hint = didYouMean(words.join(' '), candidates, (c) => `"${c}"`);
  err(`mesh: unknown command "${words.join(' ')}"${hint} (see mesh --help)\n`);
  return 2;
}

/** `mesh help [TOPIC]` and `--help`: stdout, exit 0; an unknown topic exits 2 with a suggestion. */
function help(io: CliOutput, topic: string | undefined): number {
  const { out } = io;
  if (topic === undefined) out(mainHelp());
  else if (topic === 'flags') out(allFlagsHelp());
  else {
    const command = findCommand(topic);
    if (!command) return unknownCommand(io, [topic], [...COMMANDS.map((c) => c.name), 'flags']);
    out(commandHelp(command));
  }
  return 0;
}

export async function main(argv: string[], io: CliOutput): Promise<number> {
  const { out, err } = io;
  let args: ParsedArgs;
  try {
    args = parseArgs(argv);
  } catch (e) {
    if (e instanceof FlagError) {
      err(`mesh: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const [command, sub] = args.positionals;
  if (args.switches.has('help')) return help(io, command === 'help' ? sub : command);
  if (command === 'help') return help(io, sub);
  if (args.switches.has('version') || command === 'version') {
    out(`mesh ${packageVersion()}\n`);
    return 0;
  }
  if (args.switches.has('hot-restart-version')) {
    const { hotRestartVersion } = await import('../admin/hot-restart.js');
    out(hotRestartVersion());
    return 0;
  }
  if (!command) {
    err(mainHelp());
    return 2;
  }
  const info = findCommand(command);
  if (!info) return unknownCommand(io, [command], COMMANDS.map((c) => c.name));
  if (info.subcommands && (sub === undefined || !info.subcommands.includes(sub))) {
    if (sub === undefined) {
      err(`mesh: usage: mesh ${info.name} ${info.args}\n`);
      return 2;
    }
    const hint = didYouMean(sub, info.subcommands, (s) => `"${command} ${s}"`);
    err(`mesh: unknown command "${command} ${sub}"${hint} (usage: mesh ${info.name} ${info.args})\n`);
    return 2;
  }
  try {
    if (command === 'completion') {
      const { completionScript } = await import('./completion.js');
      out(completionScript(sub as 'bash' | 'zsh'));
      return 0;
    }
    if (command === 'new') {
      const { runNewService } = await import('./new-service.js');
      return runNewService(args.positionals.slice(2), io, args.config.mesh);
    }
    if (command === 'ca') {
      const { runCaCommand } = await import('./ca.js');
      return await runCaCommand(args.positionals, args.config, io, args.fromEnv);
    }
    if (command === 'envoy') {
      const { runEnvoyCommand } = await import('./envoy.js');
      return runEnvoyCommand(args.positionals, args.config, io);
    }
    if (command === 'stat' || command === 'edges') {
      const { runStat, runEdges } = await import('./stat.js');
      return await (command === 'stat' ? runStat : runEdges)(args.positionals, args.config, io);
    }
    if (command === 'ps' || command === 'stop') {
      const { runPs, runStop } = await import('./ps.js');
      return await (command === 'ps' ? runPs : runStop)(args.positionals, args.config, io);
    }
    if (command === 'top') {
      if (args.positionals.length > 1) throw new FlagError(`mesh top takes no argument (got "${args.positionals[1]}")`);
      const { runTop } = await import('./top.js');
      return await runTop(args.config, args.given, io);
    }
    if (command === 'tap' && args.positionals[1] === 'replay') {
      const { runTapReplay } = await import('./tap-replay.js');
      return await runTapReplay(args.positionals.slice(2), args.config, io);
    }
    if (command === 'tap') {
      if (args.positionals.length > 1) throw new FlagError(`mesh tap takes no argument (got "${args.positionals[1]}"); the processes are named with --admin=HOST:PORT, or found in the registry`);
      const { runTap } = await import('./tap.js');
      return await runTap(args.config, args.given, io);
    }
    if (command === 'check') {
      if (args.positionals.length > 1) throw new FlagError(`mesh check takes no argument (got "${args.positionals[1]}")`);
      const { runCheck } = await import('./check.js');
      return await runCheck(args.config, args.given, io);
    }
    const server = SERVER_COMMANDS[command];
    if (server) {
      // Before anything starts: the process may be replaced by itself with a smaller young generation.
      const { letIdleHeapShrink, notAppliedWarning, sizeYoungGeneration } = await import('./heap-size.js');
      if ((OPTIONS.semi_space_mb.commands as readonly string[]).includes(command)) {
        const size = args.config.semi_space_mb as number;
        const warning = notAppliedWarning(size, sizeYoungGeneration(size), args.given.has('semi_space_mb'));
        if (warning) err(warning);
      }
      // A server logs for as long as it runs; its output is not the short commands' output.
      io.detach();
      const code = await (await server())(args);
      // Started: what the start-up allocated may be given back once the server is idle.
      if (code < 0) letIdleHeapShrink();
      return code;
    }
    const { runPlatformCommand } = await import('./commands.js');
    return await runPlatformCommand(args.positionals, args.config, io, args.given);
  } catch (e) {
    if (e instanceof FlagError) {
      err(`mesh: ${attributeFlagError(e.message, args.fromEnv)}\n`);
      return 2;
    }
    const { MeshError } = await import('../base/errors.js');
    if (e instanceof MeshError) {
      err(args.config.output === 'json' ? e.toBody() + '\n' : `mesh: ${e.detail} (${e.code} ${e.statusText})\n`);
      return 1;
    }
    err(`mesh: ${errorMessage(e, 'flag')}\n`);
    return 1;
  }
}

const io = cliOutput();
main(process.argv.slice(2), io).then(
  // Server commands keep running until a signal; short commands exit with their code once their output is written.
  (code) => (code >= 0 ? io.exit(code) : undefined),
  (e: unknown) => {
    io.err(`mesh: ${(e as Error)?.stack ?? String(e)}\n`);
    return io.exit(1);
  },
);
