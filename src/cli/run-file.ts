/**
 * The file of `mesh run -f FILE` (docs/run.md): YAML, `apps:` a list of apps, each
 *
 *   name: greeter               the service name (required, unique)
 *   command: [python3, app.py]  the program and its arguments, run without a shell (required)
 *   port: 8601                  the app's port, or auto (default)
 *   health_path: /health        default /health; off: registered at start, no check
 *   env: {KEY: value}           more environment for the app
 *   dir: .                      working directory, relative to the file's directory (default it)
 *   log: logs/greeter.log       the app's output appended to this file too (relative to the file's directory)
 *   sidecar: {handler: proxy}   options of the app's sidecar, by flag name (those of mesh run)
 *
 * A problem is a RunFileError naming the file, the line and the field.
 */
import { dirname, resolve } from 'node:path';
import { isMap, isScalar, isSeq, type Node, type YAMLMap } from 'yaml';
import { ConfigFileError, parseConfig, type ConfigErrorStyle } from '../base/config/reader.js';
import { FlagError, parseArgs, type ParsedArgs } from './flags.js';
import { appNameProblem, parseAppPort, parseHealthPath, type RunApp } from './run-app.js';

/** Most apps one file may run. */
export const MAX_RUN_APPS = 64;

const FIELDS = ['name', 'command', 'port', 'health_path', 'env', 'dir', 'log', 'sidecar'];
/** Options mesh run sets from an app's own fields: refused under `sidecar:`. */
const OWN_FIELDS: Record<string, string> = { name: 'name', app_port: 'port', health_path: 'health_path', file: '' };

/** How a run file's errors are written (src/base/config/reader.ts): `run.yaml: line 3: <problem>`. */
export const RUN_FILE_ERRORS: ConfigErrorStyle = {
  name: 'RunFileError',
  withFile: true,
  position: 'colon-line',
  syntaxPrefix: 'not valid YAML: ',
  readReason: 'code',
  create: (p) => new RunFileError(p.file, p.line, p.field ? `${p.field}: ${p.problem}` : p.problem, p.code),
};

/** A problem of a run file: the config reader's one error type, by its name here (mesh run prints it as a flag error, exit 2). */
export class RunFileError extends ConfigFileError {
  constructor(file: string, line: number | undefined, why: string, code?: string) {
    super(RUN_FILE_ERRORS, { file, line, problem: why, code });
  }
}

/** An app of the file, with the options of its sidecar (parsed as `mesh run` flags). */
export interface FileApp extends RunApp {
  /** The `sidecar:` options as flags; `given` says which were set. */
  sidecar: ParsedArgs;
  /** Names a problem found later (the sidecar's own checks) by the file, line and field. */
  locate: (flag: string | undefined) => string;
}

/** Parses the file's text; `file` names it in errors and its directory is the base of `dir`. */
export function parseRunFile(text: string, file: string): FileApp[] {
  const doc = parseConfig(text, { file, style: RUN_FILE_ERRORS });
  const lineAt = (node: unknown) => doc.lineOf(node);
  const fail = (node: unknown, why: string): never => {
    throw new RunFileError(file, lineAt(node), why);
  };
  const root = doc.contents;
  if (!isMap(root)) return fail(root, 'the file must be a mapping with apps: a list of apps');
  for (const item of root.items) {
    const key = keyOf(item.key);
    if (key !== 'apps') fail(item.key, `unknown field "${key}" (the file has one field, apps: a list of apps)`);
  }
  const list = root.get('apps', true);
  if (!isSeq(list) || list.items.length === 0) return fail(list ?? root, 'apps: must be a non-empty list of apps');
  if (list.items.length > MAX_RUN_APPS) fail(list, `apps: more than ${MAX_RUN_APPS} apps`);
  const base = dirname(resolve(file));
  const names = new Map<string, number>();
  const ports = new Map<number, string>();
  const logs = new Map<string, string>();
  return list.items.map((node, i) => {
    const where = `apps[${i}]`;
    if (!isMap(node)) return fail(node, `${where}: must be a mapping (name, command, port, health_path, env, dir, sidecar)`);
    const field = (name: string) => node.get(name, true) as Node | undefined;
    const fieldLine = (name: string) => lineAt(field(name)) ?? lineAt(node);
    const at = (name: string, why: string): never => {
      throw new RunFileError(file, fieldLine(name), `${where}.${name}: ${why}`);
    };
    for (const item of node.items) {
      const key = keyOf(item.key);
      if (!FIELDS.includes(key)) fail(item.key, `${where}: unknown field "${key}" (use ${FIELDS.join(', ')})`);
    }
    const scalarText = (name: string): string | undefined => {
      const v = field(name);
      if (v === undefined || (isScalar(v) && v.value === null)) return undefined;
      if (!isScalar(v) || (typeof v.value !== 'string' && typeof v.value !== 'number') || String(v.value) === '') return at(name, 'must be a non-empty string');
      return String(v.value);
    };
    const name = scalarText('name') ?? at('name', 'required: the service name the app is registered under');
    const nameProblem = appNameProblem(name);
    if (nameProblem) at('name', nameProblem);
    const twin = names.get(name);
    if (twin !== undefined) at('name', `"${name}" is also the name of apps[${twin}]; each app needs its own name`);
    names.set(name, i);
    const where2 = `${where} (${name})`;
    const atApp = (f: string, why: string): never => {
      throw new RunFileError(file, fieldLine(f), `${where2}.${f}: ${why}`);
    };

    const commandNode = field('command');
    if (commandNode === undefined) atApp('command', 'required: the program and its arguments, as a list (e.g. [python3, app.py])');
    if (!isSeq(commandNode)) return atApp('command', 'must be a list: the program and its arguments (e.g. [python3, app.py]); it is run without a shell');
    const command = commandNode.items.map((c) => (isScalar(c) && (typeof c.value === 'string' || typeof c.value === 'number') ? String(c.value) : atApp('command', 'each element must be a string')));
    if (command.length === 0 || command[0] === '') atApp('command', 'must name the program to run');
    if (command.some((c) => c.includes('\0'))) atApp('command', 'contains a NUL character (\\0), which no program or argument can hold');

    const portText = scalarText('port') ?? 'auto';
    const port = parseAppPort(portText);
    if (typeof port === 'object') return atApp('port', `invalid value "${portText}": ${port.problem}`);
    if (typeof port === 'number') {
      const other = ports.get(port);
      if (other !== undefined) atApp('port', `${port} is also the port of ${other}`);
      ports.set(port, name);
    }
    const healthText = scalarText('health_path') ?? '/health';
    const healthPath = parseHealthPath(healthText);
    if (typeof healthPath === 'object') return atApp('health_path', `invalid value "${healthText}": ${healthPath.problem}`);

    const env: Record<string, string> = {};
    const envNode = field('env');
    if (envNode !== undefined && !(isScalar(envNode) && envNode.value === null)) {
      if (!isMap(envNode)) return atApp('env', 'must be a mapping of variable names to values');
      for (const item of envNode.items) {
        const key = keyOf(item.key);
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) fail(item.key, `${where2}.env: "${key}" is not a variable name (letters, digits and _, not starting with a digit)`);
        const v = item.value;
        if (!isScalar(v) || v.value === null || typeof v.value === 'object') fail(v ?? item.key, `${where2}.env.${key}: must be a string, a number or a boolean`);
        env[key] = String((v as { value: unknown }).value);
        if (env[key].includes('\0')) fail(v, `${where2}.env.${key}: contains a NUL character (\\0), which no variable can hold`);
      }
    }
    const dirText = scalarText('dir');
    if (dirText?.includes('\0')) atApp('dir', 'contains a NUL character (\\0), which no path can hold');
    const dir = dirText === undefined ? base : resolve(base, dirText);
    const logText = scalarText('log');
    if (logText?.includes('\0')) atApp('log', 'contains a NUL character (\\0), which no path can hold');
    const log = logText === undefined ? undefined : resolve(base, logText);
    const other = log === undefined ? undefined : logs.get(log);
    if (other !== undefined) atApp('log', `${logText} is also the log of ${other}`);
    if (log !== undefined) logs.set(log, name);

    const sidecarNode = field('sidecar');
    const locate = (flag: string | undefined) => {
      const pair = flag !== undefined && isMap(sidecarNode) ? sidecarNode.items.find((p) => keyOf(p.key).replace(/-/g, '_') === flag) : undefined;
      return pair ? `${file}: line ${lineAt(pair.value ?? pair.key)}: ${where2}.sidecar.${flag}` : `${file}: line ${lineAt(node)}: ${where2}`;
    };
    return { name, command, port, healthPath, env, dir, log, sidecar: sidecarOptions(sidecarNode, `${where2}.sidecar`, file, lineAt), locate };
  });
}

/** The `sidecar:` mapping as mesh run flags, each checked as on the command line. */
function sidecarOptions(node: Node | undefined, where: string, file: string, lineAt: (node: unknown) => number | undefined): ParsedArgs {
  const argv = ['run'];
  if (node !== undefined && !(isScalar(node) && node.value === null)) {
    if (!isMap(node)) throw new RunFileError(file, lineAt(node), `${where}: must be a mapping of mesh run options (e.g. handler: proxy)`);
    for (const item of (node as YAMLMap).items) {
      const key = keyOf(item.key).replace(/-/g, '_');
      const own = OWN_FIELDS[key];
      if (own !== undefined) throw new RunFileError(file, lineAt(item.key), `${where}.${key}: ${own ? `set the app's ${own} field instead` : 'not an option of an app'}`);
      const v = item.value;
      let text: string;
      if (isScalar(v) && v.value !== null && typeof v.value !== 'object') text = String(v.value);
      else if (isSeq(v) && v.items.every((x) => isScalar(x) && typeof x.value !== 'object')) text = v.items.map((x) => String((x as { value: unknown }).value)).join(',');
      else throw new RunFileError(file, lineAt(v ?? item.key), `${where}.${key}: must be a value or a list of values`);
      argv.push(`--${key}=${text}`);
      try {
        // Each alone first, so the error names its line.
        parseArgs(['run', `--${key}=${text}`], {});
      } catch (err) {
        if (err instanceof FlagError) throw new RunFileError(file, lineAt(v ?? item.key), `${where}.${key}: ${err.message.replace(/^flag --[a-z0-9_]+ is not used by mesh run/, 'not an option of mesh run')}`);
        throw err;
      }
    }
  }
  try {
    return parseArgs(argv, {});
  } catch (err) {
    if (err instanceof FlagError) throw new RunFileError(file, lineAt(node), `${where}: ${err.message}`);
    throw err;
  }
}

function keyOf(key: unknown): string {
  return String(isScalar(key) ? key.value : key);
}
