/**
 * `mesh run [flags] -- COMMAND...` and `mesh run -f FILE` (docs/run.md): apps and their sidecars as
 * one unit. For each app, in this process: a sidecar (built as `mesh sidecar` builds it,
 * src/cli/sidecar.ts) that registers the app once its health path answers 2xx; then the app, with
 * MESH_SIDECAR (the sidecar's URL), MESH_SIDECAR_TOKEN (the token the sidecar requires; one is
 * made when --sidecar_token is not given) and PORT in its environment, its output prefixed with
 * `[NAME] `, without mesh run's own MESH_* variables. SIGINT, SIGTERM, SIGHUP or SIGQUIT: each app
 * is deregistered, --drain_delay passes, the signal is passed on, and once the app has exited its
 * sidecar drains and stops; a second signal kills the apps. An app that exits by itself (or cannot
 * be started) is deregistered and its sidecar stopped. The exit status is the app's
 * (128 + the signal's number when a signal killed it); with -f, the first app's in the file that
 * failed, else 0. Without --mtls, the apps take the mesh's mutual TLS mode (src/cli/run-mtls.ts).
 */
import { randomBytes } from 'node:crypto';
import { readConfigFile } from '../base/config/reader.js';
import { formatDuration } from '../base/util/duration.js';
import { FlagError, type Config, type ParsedArgs } from './flags.js';
import { planSidecar, sidecarRuntime, startSidecar, type SidecarPlan, type StartedSidecar } from './sidecar.js';
import { parseRunFile, RUN_FILE_ERRORS, RunFileError } from './run-file.js';
import { AppProcess, appNameProblem, describeExit, holdAppPorts, parseAppPort, parseHealthPath, type AppExit, type RunApp } from './run-app.js';
import type { Runtime } from '../process/runtime.js';
import { meshMtls, type MtlsMode } from './run-mtls.js';

/** The signals mesh run passes on to its apps (after deregistering them). */
const STOP_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];

const USAGE = 'usage: mesh run --name=NAME [flags] -- COMMAND [ARG...], or mesh run -f FILE';

/** An app ready to start: its sidecar's plan, port and token. */
interface Prepared {
  app: RunApp;
  port: number;
  token: string;
  plan: SidecarPlan;
}

interface Unit extends Prepared {
  runtime: Runtime;
  started: StartedSidecar;
  process?: AppProcess;
  exit?: AppExit;
}

export async function runRun(args: ParsedArgs): Promise<number> {
  const { config } = args;
  const apps: AppOfRun[] = config.file !== undefined ? appsOfFile(args) : [appOfFlags(args)];

  // The apps' ports, held until every sidecar has bound its own (port 0): no sidecar gets an app's port.
  const appPorts = await holdAppPorts(apps.map((a) => a.port));
  const units: Unit[] = [];
  try {
    // Without --mtls, the apps join the mesh with its mutual TLS (src/cli/run-mtls.ts).
    let mtls: MtlsMode | undefined;
    if (!args.given.has('mtls') && apps.some((a) => !a.sidecar?.given.has('mtls'))) {
      const found = await meshMtls(args.config, apps.map((a) => a.name));
      if (found.line) process.stdout.write(`mesh run: ${found.line}\n`);
      mtls = found.mode;
    }
    units.push(...(await startSidecars(args, apps, appPorts.ports, mtls)));
  } finally {
    await Promise.all(appPorts.held.map((h) => h.release()));
  }

  const killAll = () => units.forEach((u) => u.process?.signal('SIGKILL'));
  // Whatever ends this process, the apps do not outlive it.
  process.on('exit', killAll);
  let signalled = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) {
      process.stdout.write(`mesh run: ${signal} again: killing the apps\n`);
      killAll();
      return;
    }
    signalled = true;
    process.stdout.write(`mesh run: ${signal}: deregistering, then passing ${signal} on\n`);
    for (const u of units) void stopUnit(u, signal);
  };
  // A closed terminal (SIGHUP) or SIGQUIT stops the apps too, instead of leaving them running.
  for (const s of STOP_SIGNALS) process.on(s, onSignal);

  await Promise.all(units.map((u) => runUnit(u)));
  for (const s of STOP_SIGNALS) process.removeListener(s, onSignal);
  if (units.length === 1) return units[0]!.exit!.status;
  return units.find((u) => u.exit!.status !== 0)?.exit!.status ?? 0;
}

type AppOfRun = RunApp & { sidecar?: ParsedArgs; locate?: (flag: string | undefined) => string };

/**
 * The sidecars of the apps, started in order, each for its app at `ports[i]`. Everything is checked
 * before anything starts (exit 2 naming the flag or the file's line).
 */
async function startSidecars(args: ParsedArgs, apps: AppOfRun[], ports: number[], meshMode: MtlsMode | undefined): Promise<Unit[]> {
  const { config } = args;
  const prepared: Prepared[] = [];
  for (const [i, app] of apps.entries()) {
    const port = ports[i]!;
    const own = app.sidecar;
    const merged = { ...config } as Record<string, unknown>;
    // The mesh's mode, unless the app's own sidecar options say.
    if (meshMode !== undefined) merged.mtls = meshMode;
    if (own) for (const key of own.given) merged[key] = own.config[key];
    // With -f each app has a token of its own (one app cannot call through another's sidecar), unless its sidecar options set one.
    const ownToken = config.file !== undefined ? (own?.given.has('sidecar_token') ? (own.config.sidecar_token as string | undefined) : undefined) : (merged.sidecar_token as string | undefined);
    const token = ownToken ?? randomBytes(32).toString('hex');
    merged.sidecar_token = token;
    merged.server_name = app.name;
    merged.server_address = `127.0.0.1:${port}`;
    merged.healthcheck_url = app.healthPath !== undefined ? `http://127.0.0.1:${port}${app.healthPath}` : undefined;
    let plan: SidecarPlan;
    try {
      plan = planSidecar(merged as Config, args.given.has('register_ttl') || Boolean(own?.given.has('register_ttl')));
    } catch (err) {
      // From a file: the app's line, or the line of the sidecar option named.
      if (err instanceof FlagError && app.locate) throw new FlagError(`${app.locate(/\bflag --([a-z0-9_]+)/.exec(err.message)?.[1])}: ${err.message}`);
      throw err;
    }
    // The app is only starting: run's own warning (watchHealth) says when it is slow to answer.
    // Any 2xx is healthy, as health paths of web frameworks answer 204 as often as 200.
    if (plan.app) Object.assign(plan.app, { quietStart: true, any2xx: true });
    prepared.push({ app, port, token, plan });
  }

  const units: Unit[] = [];
  try {
    for (const p of prepared) {
      const runtime = sidecarRuntime(p.plan);
      const started = await startSidecar(p.plan, runtime, 'off');
      units.push({ ...p, runtime, started });
      process.stdout.write(started.lines.map((line) => `mesh run: ${p.app.name}: ${line}\n`).join(''));
    }
  } catch (err) {
    await Promise.all(units.map((u) => u.runtime.shutdown()));
    throw err;
  }
  return units;
}

/**
 * mesh run's environment without its own MESH_* settings (a store's password, the admin token, the
 * broker's secret): the app gets those only from the file's env. MESH_SIDECAR and MESH_SIDECAR_TOKEN
 * are set for it.
 */
export function appEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([key]) => !key.startsWith('MESH_')));
}

/** Starts the app and waits until it has exited and its sidecar has stopped. */
async function runUnit(u: Unit): Promise<void> {
  const { app, port, token, started, runtime } = u;
  const env = { ...appEnvironment(process.env), ...app.env, MESH_SIDECAR: started.url, MESH_SIDECAR_TOKEN: token, PORT: String(port) };
  const proc = new AppProcess(app, env);
  u.process = proc;
  process.stdout.write(`mesh run: ${app.name}: started ${app.command.join(' ')} (pid ${proc.pid ?? 'none'}, PORT=${port})\n`);
  const stopWatch = watchHealth(u);
  const exit = await proc.exited;
  stopWatch();
  u.exit = exit;
  process.stdout.write(`mesh run: ${app.name} ${describeExit(exit)}\n`);
  // Deregistered first (the drain), then the sidecar stops.
  await runtime.shutdown();
}

/** On a signal: deregister, let --drain_delay pass, pass the signal on; runUnit does the rest once the app exits. */
async function stopUnit(u: Unit, signal: NodeJS.Signals): Promise<void> {
  if (u.exit) return;
  try {
    await u.runtime.state.fail();
  } catch (err) {
    u.runtime.logging.get('main').error({ app: u.app.name, err: (err as Error).message }, 'deregistering the app failed');
  }
  const delay = u.runtime.options.drainDelay;
  if (delay > 0 && !u.exit) await new Promise((r) => setTimeout(r, delay));
  u.process?.signal(signal);
}

/**
 * Until the app is healthy for the first time: a warning every 5 health check intervals (at least
 * 1s) saying it is not registered and why. Returns the stop function.
 */
function watchHealth(u: Unit): () => void {
  const registration = u.started.sidecar.app;
  const url = u.plan.app?.healthcheckUrl;
  if (!registration || !url) return () => {};
  const every = Math.max(1000, 5 * u.plan.app!.intervalMs);
  const since = Date.now();
  const log = u.runtime.logging.get('hc');
  const timer = setInterval(() => {
    const state = registration.state;
    if (state.health === 'healthy') {
      clearInterval(timer);
      return;
    }
    log.warn({ app: u.app.name, url, for: formatDuration(Date.now() - since), reason: state.reason }, `app ${u.app.name} is not healthy yet (no 2xx answer from ${url}): not registered`);
  }, every);
  timer.unref();
  return () => clearInterval(timer);
}

/** The one app of `mesh run --name=NAME -- COMMAND...`. */
function appOfFlags(args: ParsedArgs): RunApp {
  const { config, rest } = args;
  if (config.name === undefined) throw new FlagError(`mesh run needs --name=NAME, the service name the app is registered under (${USAGE})`);
  if (!rest || rest.length === 0) throw new FlagError(`mesh run needs the app's command after -- (${USAGE})`);
  if (args.positionals.length !== 1 + rest.length) throw new FlagError(`unexpected argument "${args.positionals[1]}": the app's command goes after -- (${USAGE})`);
  const nameProblem = appNameProblem(config.name);
  if (nameProblem) throw new FlagError(`invalid value "${config.name}" for flag --name: ${nameProblem}`);
  const port = parseAppPort(config.app_port);
  if (typeof port === 'object') throw new FlagError(`invalid value "${config.app_port}" for flag --app_port: ${port.problem}`);
  const healthPath = parseHealthPath(config.health_path);
  if (typeof healthPath === 'object') throw new FlagError(`invalid value "${config.health_path}" for flag --health_path: ${healthPath.problem}`);
  return { name: config.name, command: rest, port, healthPath, env: {} };
}

/** The apps of `mesh run -f FILE`. */
function appsOfFile(args: ParsedArgs) {
  const file = args.config.file!;
  for (const flag of ['name', 'app_port', 'health_path'] as const) {
    if (args.given.has(flag) && !args.fromEnv.has(flag)) throw new FlagError(`flag --${flag} is for one app (mesh run --name=NAME -- COMMAND); with -f each app sets its own in the file`);
  }
  if (args.rest !== undefined || args.positionals.length > 1) throw new FlagError(`mesh run -f FILE takes no command (each app's command is in the file): ${USAGE}`);
  let text: string;
  try {
    text = readConfigFile(file, RUN_FILE_ERRORS);
  } catch (err) {
    if (!(err instanceof RunFileError)) throw err;
    throw new FlagError(`invalid value "${file}" for flag -f: ${err.problem.replace(/^cannot read: /, 'cannot read it: ')}`);
  }
  try {
    return parseRunFile(text, file);
  } catch (err) {
    // A problem of the file is one of the flag -f: mesh prints it as a flag error (exit 2).
    if (err instanceof RunFileError) throw new FlagError(err.message);
    throw err;
  }
}
