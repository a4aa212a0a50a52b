/**
 * Command-line flags (DESIGN section 3): `--snake_case` names, accepted before or after the
 * command, as `--name=value` or `--name value`, and from the environment as MESH_<NAME>.
 * A bad value is an error naming the flag (exit 2), never ignored.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { parseDuration, parseSize } from '../base/util/duration.js';
import { parseLevel } from '../base/util/levels.js';
import { parseRate } from '../base/http/rate-limit.js';
import { parseRedisAddress } from '../engines/ratelimit/redis.js';
import { redactUrl } from '../base/util/redact.js';
import { VALUE_CHECKS } from '../process/options.js';
import { OtelEnvError, readOtelEnv } from '../base/tracing/otel-env.js';
import { COMMAND_NAMES, MESH_PROCESS, OPTIONS, OPTION_GROUPS, commandDefault, envName, optionEntries, optionSpec, outOfRange, type CommandName, type OptionGroup, type OptionSpec, type SchemaConfig } from '../base/options/schema.js';

/** The flags: the option schema (src/base/options/schema.ts), by schema key. */
export const FLAG_SPECS = OPTIONS;
type FlagSpec = OptionSpec;

export type FlagName = keyof typeof FLAG_SPECS;

/** The sections of `mesh <command> --help`, in the order they are printed. */
export const FLAG_GROUPS = OPTION_GROUPS;
export type FlagGroup = OptionGroup;
export { COMMAND_NAMES, type CommandName };

/** Help metadata of a flag: the section it is listed in, and the commands that use it (any other refuses it). */
export interface FlagHelp {
  group: FlagGroup;
  commands?: readonly CommandName[];
}

export const FLAG_HELP: Record<FlagName, FlagHelp> = Object.fromEntries(optionEntries().map(([key, spec]) => [key, { group: spec.group, commands: spec.commands }])) as Record<FlagName, FlagHelp>;

/** A flag's help metadata; a name that is not a flag goes by its name (log_* is logging) and is listed for every mesh process. */
export function flagHelp(name: string): Required<FlagHelp> {
  const spec = optionSpec(name);
  if (spec) return { group: spec.group, commands: spec.commands };
  return { group: name.startsWith('log_') ? 'logging' : 'other', commands: MESH_PROCESS };
}

export { envName };

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
export function editDistance(a: string, b: string): number {
  const d: number[][] = [];
  for (let i = 0; i <= a.length; i++) d.push([i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 0; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidates closest to `input` (case, "-" and "_" ignored), best first, at most 3; none when
 * nothing is close (a distance up to a third of the input's length, at least 1, or a prefix of 3+
 * characters).
 */
export function suggest(input: string, candidates: readonly string[]): string[] {
  const norm = (s: string) => s.toLowerCase().replace(/-/g, '_');
  const want = norm(input);
  if (want === '' || input.length > 100) return [];
  const limit = Math.max(1, Math.floor(want.length / 3));
  const scored = candidates
    .map((c) => {
      const n = norm(c);
      const dist = editDistance(want, n);
      return { c, dist: want.length >= 3 && n.startsWith(want) ? Math.min(dist, limit) : dist };
    })
    .filter((s) => s.dist <= limit)
    .sort((x, y) => x.dist - y.dist || (x.c < y.c ? -1 : 1));
  if (scored.length === 0) return [];
  const best = scored[0]!.dist;
  return scored.filter((s) => s.dist === best).slice(0, 3).map((s) => s.c);
}

/** ", did you mean X?" or "" (X quoted by `show`). */
export function didYouMean(input: string, candidates: readonly string[], show: (c: string) => string = (c) => c): string {
  const s = suggest(input, candidates);
  return s.length === 0 ? '' : `: did you mean ${s.map(show).join(' or ')}?`;
}

/** The parsed flags (types from the schema); --concurrency and --tracing_sample_rate come out as numbers. */
export type Config = Omit<SchemaConfig, 'concurrency' | 'tracing_sample_rate'> & {
  /** Worker processes (--concurrency; `auto` resolved to os.availableParallelism()). */
  concurrency: number;
  tracing_sample_rate: number;
};

/** Most worker processes --concurrency accepts. */
export const MAX_CONCURRENCY = 256;

/** --concurrency: `auto` (os.availableParallelism()) or a whole number from 1 to MAX_CONCURRENCY. */
export function parseConcurrency(raw: string): number {
  if (raw === 'auto') return Math.min(MAX_CONCURRENCY, availableParallelism());
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_CONCURRENCY) throw new Error(`use a number of worker processes from 1 to ${MAX_CONCURRENCY}, or auto`);
  return Number(raw);
}

/**
 * The OTEL_* variables (src/base/tracing/otel-env.ts) of a command that traces: checked here (a
 * malformed one is a FlagError naming it, exit 2), and the tracing flags that were not given are
 * left unset so that the process options take them from the variables (a flag wins over OTEL_*,
 * which wins over the defaults). With --tracing=off given the variables are not read.
 */
function tracingFromOtelEnv(config: Record<string, unknown>, given: ReadonlySet<FlagName>, env: NodeJS.ProcessEnv): void {
  if (given.has('tracing') && config.tracing === 'off') return;
  try {
    readOtelEnv(env);
  } catch (err) {
    if (err instanceof OtelEnvError) throw new FlagError(err.message);
    throw err;
  }
  for (const name of ['tracing', 'tracing_address', 'tracing_sample_rate'] as const) if (!given.has(name)) config[name] = undefined;
}

/**
 * The options that name a file holding a secret (`fileOf` in the schema: --admin_token_file for
 * --admin_token): each file given is read once, its trailing newlines dropped, and its content
 * becomes the secret option's value, as if given (so the secret never is on the command line).
 * Giving both, or a file that cannot be read, is empty or has more than one line, is a FlagError.
 */
function secretsFromFiles(config: Record<string, unknown>, given: Set<FlagName>, fromEnv: ReadonlySet<FlagName>): void {
  for (const [name, spec] of optionEntries()) {
    const target = spec.fileOf as FlagName | undefined;
    const path = config[name];
    if (target === undefined || typeof path !== 'string') continue;
    if (given.has(target)) throw new FlagError(`give ${flagLabel(target, fromEnv.has(target)).replace(/^flag /, '')} or ${flagLabel(name, fromEnv.has(name)).replace(/^flag /, '')}, not both`);
    const fail = (why: string): never => {
      throw new FlagError(`invalid value "${path}" for ${flagLabel(name, fromEnv.has(name))}: ${why}`);
    };
    let text = '';
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      fail(`cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    text = text.replace(/[\r\n]+$/, '');
    if (text === '') fail(`the file is empty (it should hold --${target})`);
    if (/[\r\n]/.test(text)) fail(`the file has more than one line (it should hold --${target} alone)`);
    if (/\s/.test(text)) fail(`the file holds white space (a --${target} has none)`);
    config[target] = text;
    given.add(target);
  }
}

export class FlagError extends Error {
  readonly exitCode = 2;
  constructor(message: string) {
    super(message);
    this.name = 'FlagError';
  }
}

export interface ParsedArgs {
  config: Config;
  positionals: string[];
  /** Flags that were given explicitly (command line or environment). */
  given: Set<FlagName>;
  /** Special switches: --help, --version, --hot-restart-version. */
  switches: Set<string>;
  /** Flags whose value came from the environment (MESH_<NAME>), not from the command line. */
  fromEnv: Set<FlagName>;
  /** The arguments after `--`, as given (mesh run's command); undefined without `--`. */
  rest?: string[];
}

const SWITCHES = new Set(['help', 'version', 'hot-restart-version', 'h']);
const SHORT_SWITCHES = new Map<string, string>([['-h', 'help'], ['-v', 'version']]);
/** Short flags that take a value: mesh proxy -c FILE, mesh run -f FILE, -o json. */
const SHORT_VALUES = new Map<string, { name: FlagName; what: string }>([['-c', { name: 'config', what: 'the configuration file' }], ['-f', { name: 'file', what: 'the file of apps' }], ['-o', { name: 'output', what: 'text or json' }]]);

/** How an error names a flag: `flag --client_retries`, or `MESH_CLIENT_RETRIES (--client_retries)` when the environment set it. */
export function flagLabel(name: string, fromEnv: boolean): string {
  return fromEnv ? `${envName(name)} (--${name})` : `flag --${name}`;
}

/**
 * A FlagError message of a command runner (`invalid value "x" for flag --namespace: ...`) naming
 * the environment variable when the value came from there.
 */
export function attributeFlagError(message: string, fromEnv: ReadonlySet<string>): string {
  return message.replace(/\bfor flag --([a-z0-9_]+)/, (all, name: string) => (fromEnv.has(name) ? `for ${flagLabel(name, true)}` : all));
}

function convert(name: string, spec: FlagSpec, raw: string, fromEnv = false): unknown {
  const fail = (why: string): never => {
    throw new FlagError(`invalid value "${redactUrl(raw)}" for ${flagLabel(name, fromEnv)}: ${why}`);
  };
  switch (spec.type) {
    case 'string':
      if (spec.choices && !spec.choices.includes(raw)) fail(`use one of ${spec.choices.join(', ')}`);
      return raw;
    case 'bool':
      if (['true', '1', 'yes', ''].includes(raw.toLowerCase())) return true;
      if (['false', '0', 'no'].includes(raw.toLowerCase())) return false;
      return fail('use true or false');
    case 'int':
      if (!/^\d+$/.test(raw)) fail('not a non-negative integer');
      return Number(raw);
    case 'duration':
      try {
        return parseDuration(raw);
      } catch (err) {
        return fail((err as Error).message);
      }
    case 'size':
      try {
        return parseSize(raw);
      } catch (err) {
        return fail((err as Error).message);
      }
    case 'list':
      return raw
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
  }
}

/**
 * How parseArgs treats the command (the first positional). `command: true` (the `mesh` program):
 * a flag on the command line that the command does not use is refused (FlagError naming the flag
 * and the commands that use it), and a MESH_* variable it does not use is ignored. `false`
 * (runService, whose positionals are its own): every flag is taken.
 */
export interface ParseOptions {
  command?: boolean;
}

/** The commands that use a flag, as a refusal names them. */
export function commandsUsing(name: string): readonly CommandName[] {
  return optionSpec(name)?.commands ?? [];
}

/** The refusal of a flag the command does not use (exit 2). */
export function unusedFlagMessage(command: string, flag: string, name: string): string {
  const users = commandsUsing(name);
  return `flag ${flag} is not used by mesh ${command} (${users.length === 0 ? 'no command uses it' : `the commands that use it: ${users.join(', ')}`})`;
}

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env, opts: ParseOptions = {}): ParsedArgs {
  const onCommandLine: Array<[FlagName, string]> = [];
  const values = new Map<FlagName, string>();
  const given = new Set<FlagName>();
  const fromEnv = new Set<FlagName>();
  const switches = new Set<string>();
  const positionals: string[] = [];
  let rest: string[] | undefined;

  // Environment first; the command line wins.
  for (const name of Object.keys(FLAG_SPECS) as FlagName[]) {
    const v = env[`MESH_${name.toUpperCase()}`];
    if (v !== undefined && v !== '') {
      values.set(name, v);
      given.add(name);
      fromEnv.add(name);
    }
  }

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      rest = argv.slice(i + 1);
      positionals.push(...rest);
      break;
    }
    const shortValue = SHORT_VALUES.get(arg);
    if (shortValue) {
      const next = argv[++i];
      if (next === undefined) throw new FlagError(`flag ${arg} needs a value (${shortValue.what})`);
      values.set(shortValue.name, next);
      given.add(shortValue.name);
      fromEnv.delete(shortValue.name);
      onCommandLine.push([shortValue.name, arg]);
      continue;
    }
    const short = SHORT_SWITCHES.get(arg);
    if (short) {
      switches.add(short);
      continue;
    }
    if (!arg.startsWith('--') || arg === '--') {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const rawName = arg.slice(2, eq === -1 ? undefined : eq);
    if (SWITCHES.has(rawName)) {
      switches.add(rawName === 'h' ? 'help' : rawName);
      continue;
    }
    const name = rawName.replace(/-/g, '_') as FlagName;
    const spec: FlagSpec | undefined = Object.hasOwn(FLAG_SPECS, name) ? (FLAG_SPECS as Record<string, FlagSpec>)[name] : undefined;
    if (!spec) {
      const hint = didYouMean(rawName, [...Object.keys(FLAG_SPECS), 'help', 'version', 'hot-restart-version'], (c) => `--${c}`);
      throw new FlagError(`unknown flag --${rawName}${hint} (see mesh --help)`);
    }
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (spec.type === 'bool') value = 'true';
    else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new FlagError(`flag --${rawName} needs a value`);
      value = next;
      i++;
    }
    values.set(name, value);
    given.add(name);
    fromEnv.delete(name);
    onCommandLine.push([name, `--${rawName}`]);
  }

  const command = positionals[0];
  const known = (opts.command ?? true) && command !== undefined && command !== 'help' && (COMMAND_NAMES as readonly string[]).includes(command);
  if (known) {
    for (const [name, flag] of onCommandLine) {
      if (!commandsUsing(name).includes(command as CommandName) && !switches.has('help')) throw new FlagError(unusedFlagMessage(command, flag, name));
    }
    for (const name of fromEnv) {
      if (commandsUsing(name).includes(command as CommandName)) continue;
      values.delete(name);
      given.delete(name);
      fromEnv.delete(name);
    }
  }

  const config: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(FLAG_SPECS) as Array<[FlagName, FlagSpec]>) {
    // A command may have a default of its own (mesh dev: --mtls=strict).
    const raw = values.get(name) ?? commandDefault(spec, known ? (command as CommandName) : undefined);
    config[name] = raw === undefined ? (spec.type === 'list' ? [] : undefined) : convert(name, spec, raw, fromEnv.has(name));
  }
  if (!switches.has('help')) secretsFromFiles(config, given, fromEnv);
  const check = (name: FlagName, fn: () => void, shownValue = String(config[name])) => {
    try {
      fn();
    } catch (err) {
      throw new FlagError(`invalid value "${redactUrl(shownValue)}" for ${flagLabel(name, fromEnv.has(name))}: ${(err as Error).message}`);
    }
  };
  // The checks shared with the library (VALUE_CHECKS, src/process/options.ts), in the order of the flag's refusals.
  check('admin_allowed_hosts', () => (config.admin_allowed_hosts = VALUE_CHECKS.admin_allowed_hosts(config.admin_allowed_hosts as string[])), (config.admin_allowed_hosts as string[]).join(','));
  check('metrics_address', () => VALUE_CHECKS.metrics_address(config.metrics_address as string));
  check('concurrency', () => (config.concurrency = parseConcurrency(config.concurrency as string)));
  check('cors', () => (config.cors = VALUE_CHECKS.cors(config.cors as string[])), (config.cors as string[]).join(','));
  check('grpc_retry_on', () => (config.grpc_retry_on = VALUE_CHECKS.grpc_retry_on(config.grpc_retry_on as string[])), (config.grpc_retry_on as string[]).join(','));
  check('rate_limit', () => parseRate(config.rate_limit as string));
  check('rate_limit_burst', () => {
    if (config.rate_limit_burst === 0) throw new Error('must be at least 1 (leave it out for one second\'s worth of --rate_limit)');
  });
  check('rate_limit_store', () => {
    const tlsFiles = config.rate_limit_store_tls_ca_file ?? config.rate_limit_store_tls_cert_file ?? config.rate_limit_store_tls_key_file;
    if (config.rate_limit_store === 'local') {
      if (tlsFiles !== undefined) throw new Error('the --rate_limit_store_tls_* files are for a rediss:// store');
      return;
    }
    if (!parseRedisAddress(config.rate_limit_store as string).tls && tlsFiles !== undefined) throw new Error('the --rate_limit_store_tls_* files need rediss:// (TLS)');
  }, redactUrl(String(config.rate_limit_store)));
  check('rpc_allow', () => {
    for (const p of config.rpc_allow as string[]) if (!/^[A-Za-z0-9._*?-]+$/.test(p)) throw new Error(`"${p}" is not a service name glob: letters, digits, . _ - and the wildcards * ?`);
  }, (config.rpc_allow as string[]).join(','));
  check('tracing_address', () => VALUE_CHECKS.tracing_address(config.tracing_address as string));
  check('tracing_sample_rate', () => (config.tracing_sample_rate = VALUE_CHECKS.tracing_sample_rate(config.tracing_sample_rate as string)));
  // A command that traces, or the flags of a framework service's process (runService: no command).
  if ((known && commandsUsing('tracing').includes(command as CommandName)) || opts.command === false) tracingFromOtelEnv(config, given, env);
  // The flag is forgiving where the library is not: parseLevel takes other spellings (warn, fatal,
  // silent, any case) and refuses junk with its own message before the shared check.
  check('log_level', () => VALUE_CHECKS.log_level(parseLevel(config.log_level as string)));
  if (config.access_log === '') {
    throw new FlagError(`invalid value "" for ${flagLabel('access_log', fromEnv.has('access_log'))}: use off, stdout or a file path`);
  }
  if (config.access_log_format !== undefined) check('access_log_format', () => VALUE_CHECKS.access_log_format(config.access_log_format as string));
  const headers = config.request_headers_timeout as number;
  const whole = config.request_timeout as number;
  if (whole > 0 && headers > whole) {
    throw new FlagError(`invalid value "${values.get('request_headers_timeout') ?? '10s'}" for ${flagLabel('request_headers_timeout', fromEnv.has('request_headers_timeout'))}: longer than --request_timeout (${values.get('request_timeout') ?? '30s'})`);
  }
  // Ranges declared in the schema (min, max, range), in the table's order.
  for (const [name, spec] of optionEntries()) {
    if (spec.range === undefined || typeof config[name] !== 'number') continue;
    const why = outOfRange(name, config[name] as number);
    if (why !== undefined) throw new FlagError(`invalid value "${values.get(name) ?? spec.default ?? ''}" for ${flagLabel(name, fromEnv.has(name))}: ${why}`);
  }
  if (/^$|[\s*>]/.test(config.broker_dlq_suffix as string)) {
    throw new FlagError(`invalid value "${values.get('broker_dlq_suffix') ?? ''}" for ${flagLabel('broker_dlq_suffix', fromEnv.has('broker_dlq_suffix'))}: must be non-empty, without whitespace, '*' or '>'`);
  }
  return { config: config as unknown as Config, positionals, given, switches, fromEnv, rest };
}

