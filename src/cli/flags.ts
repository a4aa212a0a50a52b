/**
 * Command-line flags (DESIGN section 3): `--snake_case` names, accepted before or after the
 * command, as `--name=value` or `--name value`, and from the environment as MESH_<NAME>.
 * A bad value is an error naming the flag (exit 2), never ignored.
 */
import { parseDuration, parseSize } from '../util/duration.js';
import { parseLevel } from '../util/log.js';
import { parseAllowedHosts } from '../http/host-check.js';

type FlagType = 'string' | 'bool' | 'int' | 'duration' | 'size' | 'list';

interface FlagSpec {
  type: FlagType;
  help: string;
  default?: string;
  choices?: string[];
}

export const FLAG_SPECS = {
  registry: { type: 'string', help: 'registry backend', default: 'local', choices: ['local', 'memory', 'etcd'] },
  registry_address: { type: 'string', help: 'local: directory of the SQLite registry; etcd: [https://[user:password@]]host:port[,...]' },
  broker: { type: 'string', help: 'broker backend', default: 'http', choices: ['http', 'memory', 'nats'] },
  registry_tls_ca_file: { type: 'string', help: 'etcd over https://: PEM CA to trust instead of the system roots' },
  registry_tls_cert_file: { type: 'string', help: 'etcd over https://: PEM client certificate' },
  registry_tls_key_file: { type: 'string', help: 'etcd over https://: PEM client key' },
  broker_address: { type: 'string', help: 'http: listen host[:port] for deliveries; nats: [nats|tls]://[user:password@]host:port' },
  broker_tls_ca_file: { type: 'string', help: 'nats (TLS required): PEM CA to trust instead of the system roots' },
  broker_tls_cert_file: { type: 'string', help: 'nats (TLS required): PEM client certificate' },
  broker_tls_key_file: { type: 'string', help: 'nats (TLS required): PEM client key' },
  proxy_address: { type: 'string', help: 'run CLI commands through the sidecar at host:port' },
  client_request_timeout: { type: 'duration', help: 'budget of one outbound call', default: '5s' },
  client_retries: { type: 'int', help: 'retries on connect failure, 502, 503, timeout', default: '1' },
  client_per_try_timeout: { type: 'duration', help: 'budget of one try of an outbound call; past it the call is retried on another host (0: a try may use the whole budget)', default: '0' },
  client_hedge_delay: { type: 'duration', help: 'idempotent calls: send a second try to another host when the first has not answered after this long (0: no hedging)', default: '0' },
  stream_idle_timeout: { type: 'duration', help: 'proxied answers: how long one may wait for a client that reads nothing (0: no limit)', default: '5m' },
  max_connections: { type: 'int', help: 'connections each listener holds at once; more are closed at accept (0: no limit)', default: '10000' },
  request_headers_timeout: { type: 'duration', help: 'a request\'s whole header must arrive within this (0: no limit)', default: '10s' },
  request_timeout: { type: 'duration', help: 'a whole request, header and body, must arrive within this (0: no limit)', default: '30s' },
  drain_delay: { type: 'duration', help: 'on shutdown: time to keep serving after deregistering, so peers and load balancers stop sending', default: '1s' },
  drain_timeout: { type: 'duration', help: 'on shutdown: how long in-flight requests may take to finish before they are cut off', default: '10s' },
  lb_policy: { type: 'string', help: 'load balancing', default: 'round_robin', choices: ['round_robin', 'random', 'least_request'] },
  register_ttl: { type: 'duration', help: 'TTL of a service registration', default: '30s' },
  register_interval: { type: 'duration', help: 'how often a service registers again', default: '10s' },
  admin_address: { type: 'string', help: 'admin interface host:port, or off' },
  admin_token: { type: 'string', help: 'require Authorization: Bearer <token> on the admin interface' },
  admin_allowed_hosts: { type: 'list', help: 'Host names the admin interface and the sidecar answer besides loopback, localhost and their own IP (comma list; *.domain; * turns the check off)' },
  log_level: { type: 'string', help: 'trace, debug, info, warning, error, critical, off', default: 'info' },
  log_format: { type: 'string', help: 'logs on stderr: text (one readable line an event) or json (JSON lines); default text when stderr is a terminal, json otherwise', choices: ['text', 'json'] },
  enable_stats: { type: 'bool', help: 'serve /stats (dashboard and JSON)', default: 'false' },
  enable_tls: { type: 'bool', help: 'serve HTTPS with --tls_cert_file and --tls_key_file', default: 'false' },
  tls_cert_file: { type: 'string', help: 'PEM certificate chain' },
  tls_key_file: { type: 'string', help: 'PEM private key' },
  enable_acme: { type: 'bool', help: 'obtain certificates by ACME for --acme_hosts', default: 'false' },
  acme_hosts: { type: 'list', help: 'host names allowed to get ACME certificates' },
  acme_directory: { type: 'string', help: 'ACME directory URL', default: 'https://acme-v02.api.letsencrypt.org/directory' },
  acme_email: { type: 'string', help: 'ACME account contact' },
  acme_http_port: { type: 'string', help: 'ACME HTTP-01 challenge listener: PORT (all interfaces) or HOST:PORT', default: '80' },
  acme_cache: { type: 'string', help: 'ACME account key and certificates (default $MESH_HOME/acme or ~/.mesh/acme)' },
  max_body_size: { type: 'size', help: 'largest request body accepted', default: '4MiB' },
  cors: { type: 'list', help: 'allowed CORS origins (comma list, * for any)' },
  output: { type: 'string', help: 'text or json', default: 'text', choices: ['text', 'json'] },
  address: { type: 'string', help: 'listen address of the server this command starts' },
  advertise: { type: 'string', help: 'address to register instead of the listen address' },
  namespace: { type: 'string', help: 'service namespace of the gateway or sidecar' },
  handler: { type: 'string', help: 'gateway/sidecar handler', choices: ['api', 'rpc', 'proxy', 'event'] },
  server_name: { type: 'string', help: 'sidecar: name to register the app under' },
  server_address: { type: 'string', help: 'sidecar: host:port of the app' },
  healthcheck_url: { type: 'string', help: 'sidecar: URL checked to decide if the app is healthy' },
  healthcheck_interval: { type: 'duration', help: 'sidecar: time between health checks', default: '10s' },
  healthcheck_timeout: { type: 'duration', help: 'sidecar: health check timeout', default: '2s' },
  queue: { type: 'string', help: 'subscribe: queue group' },
  config: { type: 'string', help: 'proxy: configuration file' },
  mesh_home: { type: 'string', help: 'state directory (default $MESH_HOME or ~/.mesh)' },
} satisfies Record<string, FlagSpec>;

export type FlagName = keyof typeof FLAG_SPECS;

export interface Config {
  registry: string;
  registry_address?: string;
  broker: string;
  registry_tls_ca_file?: string;
  registry_tls_cert_file?: string;
  registry_tls_key_file?: string;
  broker_address?: string;
  broker_tls_ca_file?: string;
  broker_tls_cert_file?: string;
  broker_tls_key_file?: string;
  proxy_address?: string;
  client_request_timeout: number;
  client_retries: number;
  client_per_try_timeout: number;
  client_hedge_delay: number;
  stream_idle_timeout: number;
  max_connections: number;
  request_headers_timeout: number;
  request_timeout: number;
  drain_delay: number;
  drain_timeout: number;
  lb_policy: 'round_robin' | 'random' | 'least_request';
  register_ttl: number;
  register_interval: number;
  admin_address?: string;
  admin_token?: string;
  admin_allowed_hosts: string[];
  log_level: string;
  /** undefined: text on a terminal, json otherwise. */
  log_format?: 'text' | 'json';
  enable_stats: boolean;
  enable_tls: boolean;
  tls_cert_file?: string;
  tls_key_file?: string;
  enable_acme: boolean;
  acme_hosts: string[];
  acme_directory: string;
  acme_email?: string;
  acme_http_port: string;
  acme_cache?: string;
  max_body_size: number;
  cors: string[];
  output: 'text' | 'json';
  address?: string;
  advertise?: string;
  namespace?: string;
  handler?: 'api' | 'rpc' | 'proxy' | 'event';
  server_name?: string;
  server_address?: string;
  healthcheck_url?: string;
  healthcheck_interval: number;
  healthcheck_timeout: number;
  queue?: string;
  config?: string;
  mesh_home?: string;
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
}

const SWITCHES = new Set(['help', 'version', 'hot-restart-version', 'h']);

function convert(name: string, spec: FlagSpec, raw: string): unknown {
  const fail = (why: string): never => {
    throw new FlagError(`invalid value "${raw}" for flag --${name}: ${why}`);
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

export function parseArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const values = new Map<FlagName, string>();
  const given = new Set<FlagName>();
  const switches = new Set<string>();
  const positionals: string[] = [];

  // Environment first; the command line wins.
  for (const name of Object.keys(FLAG_SPECS) as FlagName[]) {
    const v = env[`MESH_${name.toUpperCase()}`];
    if (v !== undefined && v !== '') {
      values.set(name, v);
      given.add(name);
    }
  }

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (arg === '-c') {
      const next = argv[++i];
      if (next === undefined) throw new FlagError('flag -c needs a value (the configuration file)');
      values.set('config', next);
      given.add('config');
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
    if (!spec) throw new FlagError(`unknown flag --${rawName} (see mesh --help)`);
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
  }

  const config: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(FLAG_SPECS) as Array<[FlagName, FlagSpec]>) {
    const raw = values.get(name) ?? spec.default;
    config[name] = raw === undefined ? (spec.type === 'list' ? [] : undefined) : convert(name, spec, raw);
  }
  try {
    config.admin_allowed_hosts = parseAllowedHosts(config.admin_allowed_hosts as string[]);
  } catch (err) {
    throw new FlagError(`invalid value "${(config.admin_allowed_hosts as string[]).join(',')}" for flag --admin_allowed_hosts: ${(err as Error).message}`);
  }
  try {
    parseLevel(config.log_level as string);
  } catch (err) {
    throw new FlagError(`invalid value "${String(config.log_level)}" for flag --log_level: ${(err as Error).message}`);
  }
  const headers = config.request_headers_timeout as number;
  const whole = config.request_timeout as number;
  if (whole > 0 && headers > whole) {
    throw new FlagError(`invalid value "${values.get('request_headers_timeout') ?? '10s'}" for flag --request_headers_timeout: longer than --request_timeout (${values.get('request_timeout') ?? '30s'})`);
  }
  return { config: config as unknown as Config, positionals, given, switches };
}

export function flagsHelp(): string {
  const lines: string[] = [];
  for (const [name, spec] of Object.entries(FLAG_SPECS) as Array<[string, FlagSpec]>) {
    const def = spec.default !== undefined ? ` (default ${spec.default})` : '';
    lines.push(`  --${name.padEnd(24)} ${spec.help}${def}`);
  }
  return lines.join('\n');
}
