/**
 * `mesh --help`, `mesh help [COMMAND]`, `mesh <command> --help`: the commands, and for each the
 * flags its code reads, grouped, with defaults and allowed values. Light on purpose: it imports
 * only flags.ts, so help never loads the runtime.
 */
import { COMMAND_NAMES, FLAG_GROUPS, FLAG_SPECS, flagHelp, type CommandName, type FlagGroup } from './flags.js';
import { commandDefault, commandDefaultsText, type OptionSpec } from '../base/options/schema.js';

export interface CommandInfo {
  name: CommandName;
  /** What follows `mesh <name>` in the usage line. */
  args: string;
  summary: string;
  /** More lines for `mesh <name> --help`. */
  details?: string[];
  /** Words that may follow the command (completion, and the check of `mesh list servics`). */
  subcommands?: string[];
  /** Defaults of this command that differ from the flag's own (e.g. --address). */
  defaults?: Partial<Record<keyof typeof FLAG_SPECS, string>>;
  /** Allowed values of this command that differ from the flag's own (the sidecar's --handler). */
  choices?: Partial<Record<keyof typeof FLAG_SPECS, string[]>>;
}

/** Every command, in the order `mesh --help` lists them. Defaults here are checked against the code by test/cli/cli-help.test.ts. */
export const COMMANDS: CommandInfo[] = [
  {
    name: 'dev',
    args: '',
    summary: 'the demo: example services, gateway and sidecar on the embedded registry',
    defaults: { address: ':8080', admin_address: '127.0.0.1:9901', namespace: 'go.mesh.api', access_log: 'stdout' },
  },
  {
    name: 'api',
    args: '',
    summary: 'the API gateway (default :8080, admin 127.0.0.1:9901)',
    details: ['Maps HTTP requests to services (see docs/gateway.md). Without --handler it routes by the registry and falls back to the api handler.'],
    defaults: { address: ':8080', admin_address: '127.0.0.1:9901', namespace: 'go.mesh.api', access_log: 'off' },
  },
  {
    name: 'sidecar',
    args: '',
    summary: 'the sidecar for apps in any language (default 127.0.0.1:8081, admin 127.0.0.1:9902)',
    details: ['With --server_name and --server_address it registers the app and health-checks it (see docs/sidecar.md).'],
    defaults: { address: '127.0.0.1:8081', admin_address: '127.0.0.1:9902', namespace: 'go.mesh.srv', handler: 'rpc', access_log: 'off' },
    choices: { handler: ['rpc', 'proxy'] },
  },
  {
    name: 'run',
    args: '--name=NAME -- COMMAND... | -f FILE',
    summary: 'run an app with its own sidecar: registered once its health path answers, logs prefixed, signals passed on',
    details: [
      'The app gets MESH_SIDECAR (the sidecar URL), MESH_SIDECAR_TOKEN and PORT; the command runs without a shell. Exits with the app\'s status.',
      '-f FILE: several apps from a YAML file, each with its sidecar (see docs/run.md).',
    ],
    defaults: { namespace: 'go.mesh.srv', handler: 'rpc', access_log: 'off', mtls: "the mesh's: strict if every node in the registry serves mutual TLS, permissive if some do, else off" },
    choices: { handler: ['rpc', 'proxy'] },
  },
  {
    name: 'proxy',
    args: '-c FILE',
    summary: 'the stand-alone L7 proxy: listeners, routes, clusters (admin 127.0.0.1:9903)',
    details: ['Listeners, routes and clusters come from the YAML or JSON file (see docs/proxy.md); the file may set the admin address.'],
    defaults: { admin_address: '127.0.0.1:9903', access_log: 'off' },
  },
  {
    name: 'xds',
    args: '',
    summary: 'the xDS control plane: the registry as Envoy xDS v3 over ADS, for Envoy and proxyless gRPC (default 127.0.0.1:18000, admin 127.0.0.1:9904)',
    details: ['Serves clusters, endpoints, listeners and routes of every registry service (see docs/xds.md).'],
    defaults: { address: '127.0.0.1:18000', admin_address: '127.0.0.1:9904' },
  },
  { name: 'list', args: 'services', summary: 'service names, one per line', subcommands: ['services'] },
  { name: 'get', args: 'service NAME', summary: 'one service: nodes and endpoints', subcommands: ['service'] },
  {
    name: 'register',
    args: 'service JSON',
    summary: 'register a service ({"Name": .., "Nodes": [{"Id", "Address", "Port"}]})',
    details: ['With --register_ttl the nodes expire unless registered again within it; without it they stay until deregistered.'],
    defaults: { register_ttl: 'none' },
    subcommands: ['service'],
  },
  { name: 'deregister', args: 'service JSON', summary: 'deregister the nodes given', subcommands: ['service'] },
  { name: 'call', args: 'SERVICE Endpoint.Method [JSON]', summary: 'call a service by RPC' },
  { name: 'publish', args: 'TOPIC MESSAGE', summary: 'publish a message' },
  { name: 'subscribe', args: 'TOPIC [--queue Q] [--ack --durable NAME]', summary: 'print messages as they arrive (--ack: at least once)' },
  {
    name: 'dlq',
    args: 'list|replay TOPIC',
    summary: 'dead letters of a durable topic: list them, or publish them to TOPIC again',
    details: ['Dead letters are messages that failed --broker_max_deliver times; they wait in TOPIC.dlq (see docs/cluster.md, Durable events).'],
    subcommands: ['list', 'replay'],
  },
  {
    name: 'consumers',
    args: 'list TOPIC | rm TOPIC NAME',
    summary: 'durable consumer names of a topic: list them (pending messages, last active), or remove one',
    details: ['A name no subscriber used for --broker_inactive_threshold is removed by itself; a topic has at most --broker_max_consumers names (see docs/cluster.md, Durable events).'],
    subcommands: ['list', 'rm'],
  },
  { name: 'health', args: 'SERVICE', summary: 'Debug.Health of every node' },
  {
    name: 'ca',
    args: 'init|show|rotate|status|token|revoke|serve',
    summary: 'the mesh CA in --ca_dir: make it, list its roots, rotate its root, warn before a root expires, serve certificates to other machines',
    details: [
      'init: a new root (ECDSA P-256), or your own root or intermediate with --ca_cert_file and --ca_key_file; an existing CA is never overwritten.',
      'show: each trusted root: SHA-256 fingerprint, subject, expiry. status: the same, exit 1 when one expires within 30 days.',
      'rotate: a new root signs from now on; the old ones stay trusted until rotate --finish (after one --mtls_cert_ttl, every workload certificate is from the new root).',
      'token: a join token for --services (globs) valid --ttl (default 1h). serve: the signing service at --address (default 127.0.0.1:9943) for processes started with --ca_server, --ca_token and --ca_root_fingerprint; a process renews without a token for --ca_join_lifetime (default 168h) after its join.',
      'revoke: mesh ca serve refuses renewals of a certificate (--serial), of a service (--service) or of what joined with a token, and the token itself (--token_id=ID).',
      'Whoever can read --ca_dir can issue any identity (see docs/mesh-ca.md and docs/mesh-ca-multi-host.md).',
    ],
    subcommands: ['init', 'show', 'rotate', 'status', 'token', 'revoke', 'serve'],
  },
  {
    name: 'check',
    args: '',
    summary: 'what is wrong with this mesh: one line per error or warning; exit 1 on an error',
    details: [
      'Checks the registry (read and write), the broker (nats: connects; http: --broker_secret_file), each node (Debug.Health within 3s; a service with no healthy node is an error),',
      'the modes of $MESH_HOME (0700 directory, 0600 files), the mesh CA in --ca_dir and --tls_cert_file (expiring within 30 days), and the Node.js version (past its end of life: a warning).',
      'With --routes=FILE, the route file: a route whose backendRefs do not resolve (ResolvedRefs False: another kind, a service the registry does not know) is an error, a rule that answers 500 (no backendRefs) a warning.',
    ],
  },
  {
    name: 'new',
    args: 'service NAME [DIR] [--mesh=PATH|TARBALL]',
    summary: 'write a new TypeScript service project (NAME: go.mesh.srv.hello or hello)',
    details: [
      'NAME without a dot becomes go.mesh.srv.NAME; DIR defaults to ./<last part of NAME> and must not exist or be empty.',
      'The project depends on @mesh-platform/mesh; its README says how to build, start and call it.',
      '--mesh=PATH|TARBALL: depend on that checkout or npm pack tarball instead (file:, the absolute path).',
    ],
    subcommands: ['service'],
  },
  {
    name: 'envoy',
    args: 'bootstrap --xds_address=HOST:PORT',
    summary: 'print an Envoy bootstrap that takes its clusters and endpoints (and listeners) from mesh xds',
    details: [
      'bootstrap: YAML (--output=json: JSON) for envoy -c FILE: node --node_id and --node_cluster, ADS over gRPC to --xds_address (cluster xds_cluster),',
      'Envoy\'s admin interface on --admin_address (default 127.0.0.1:9905, clear of mesh\'s own; off: none); TLS with --xds_tls_ca_file, mutual TLS with --xds_tls_cert_file and --xds_tls_key_file (see docs/xds.md).',
      'With --routes=FILE (HTTPRoute documents, as mesh api\'s), an HTTP listener on --listener_address (default :10000) with its routes; the clusters and endpoints they name come from mesh xds.',
    ],
    defaults: { admin_address: '127.0.0.1:9905', listener_address: ':10000' },
    subcommands: ['bootstrap'],
  },
  {
    name: 'tap',
    args: '[--admin=HOST:PORT,...] | replay FILE',
    summary: 'watch live requests: the admin /tap streams of one or more processes, merged, one line per request',
    details: [
      'Filters: --service (the upstream service), --route, --path (a prefix), --method, --status (2xx..5xx or a code), --identity, --min_duration, --sample (0 to 1).',
      '--rate caps the events each process sends a second; over it (or while this command cannot keep up) events are dropped and a line on stderr says how many.',
      '-o json: one JSON event a line, with the admin it came from. A stream that ends is reported and opened again; Ctrl-C or SIGTERM ends the command (exit 0).',
      'The processes to tap: --admin, else every process this registry records (see mesh ps). With --admin_token the token is sent (see docs/admin.md, /tap).',
      '--bodies: the events carry the request and response bodies, on processes started with --tap_bodies_max_bytes (others refuse the tap).',
      'replay FILE: sends again the requests of the events mesh tap --bodies -o json wrote (--line=N: only that line), to the front end each names or to --to=URL; an event whose body was not captured, was truncated or redacted is refused (exit 1).',
    ],
  },
  {
    name: 'top',
    args: '[--admin=HOST:PORT[,HOST:PORT...]]',
    summary: 'the busiest paths, live: requests per service, method and path since it started, with success rate and best, worst and last duration, drawn again in place',
    details: [
      'Reads the /tap streams of every process mesh ps lists (or of --admin), with mesh tap\'s filters (--service, --path, --method, --status...); --interval: how often the table is drawn (default 1s).',
      'It counts what the taps send: at most --rate events a second from each process (default 100); more are dropped there, and a line on stderr says so.',
    ],
  },
  {
    name: 'ps',
    args: '',
    summary: 'the mesh processes of this registry: id, kind, name, pid, host, admin, uptime, mutual TLS mode, listeners',
    details: [
      'Every process that serves an admin interface (dev, api, sidecar, run, proxy, xds) records itself in the registry while it runs; -o json: the records as JSON.',
      'A process killed without a chance to clean up stays listed until its record expires (30 s).',
    ],
  },
  {
    name: 'stop',
    args: 'ID|NAME|KIND|PID',
    summary: 'stop one mesh process of this registry (see mesh ps): it drains and exits, and the command waits until its record is gone',
    details: [
      'Asks the process\'s admin interface to quit (POST /quitquitquit); with --admin_token the token is sent. A NAME, KIND or PID that names several processes is refused: name one by its ID.',
    ],
  },
  {
    name: 'stat',
    args: 'services|routes|identities',
    summary: 'per service (route file rule, caller identity): requests, requests a second, success rate, p50/p95/p99 and the share over mutual TLS, from the processes\' own counters',
    details: [
      'Reads admin /traffic of every process mesh ps lists (or of --admin) twice, --window apart (default 10s; 0: since each process started); -o json: the rows as JSON.',
      'The percentiles are the upper bounds of the latency buckets that hold them (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500 ms...); a rule\'s only with --stats_endpoints.',
    ],
    subcommands: ['services', 'routes', 'identities'],
  },
  {
    name: 'edges',
    args: '',
    summary: 'who calls whom: caller → service, with requests, requests a second, success rate, p99 and the share over mutual TLS',
    details: ['The caller is a process\'s service (a sidecar\'s app) or its kind (api, proxy...); read as mesh stat reads (--window, --admin, -o json).'],
  },
  {
    name: 'completion',
    args: 'bash|zsh',
    summary: 'print a shell completion script',
    details: ['bash: source <(mesh completion bash)   (or save it in ~/.local/share/bash-completion/completions/mesh)', 'zsh:  source <(mesh completion zsh)    (after compinit; or save it as _mesh in a directory of $fpath)'],
    subcommands: ['bash', 'zsh'],
  },
  { name: 'help', args: '[COMMAND|flags]', summary: 'this help; a command\'s flags; every flag' },
  { name: 'version', args: '', summary: 'print the version (also -v, --version)' },
];

/** Commands that start a mesh process, and so take mesh flags. */
const TAKES_FLAGS = new Set<CommandName>(['dev', 'api', 'sidecar', 'run', 'proxy', 'list', 'get', 'register', 'deregister', 'call', 'publish', 'subscribe', 'dlq', 'consumers', 'health', 'ca', 'check', 'xds', 'new', 'envoy', 'tap', 'top', 'ps', 'stop', 'stat', 'edges']);

export function findCommand(name: string | undefined): CommandInfo | undefined {
  return COMMANDS.find((c) => c.name === name);
}

export function commandNames(): readonly string[] {
  return COMMAND_NAMES;
}

type Spec = OptionSpec;

function specs(): Array<[string, Spec]> {
  return Object.entries(FLAG_SPECS) as Array<[string, Spec]>;
}

/** The flags a command uses: those its help lists, and the only ones it accepts. */
export function commandFlags(command: CommandName): string[] {
  if (!TAKES_FLAGS.has(command)) return [];
  return specs()
    .map(([name]) => name)
    .filter((name) => flagHelp(name).commands.includes(command));
}

/** The allowed values of a flag for a command (bool flags: true, false). */
export function flagChoices(name: string, command?: CommandName): readonly string[] | undefined {
  const spec = (FLAG_SPECS as Record<string, Spec>)[name];
  if (!spec) return undefined;
  const own = command ? findCommand(command)?.choices?.[name as keyof typeof FLAG_SPECS] : undefined;
  if (own) return own;
  if (spec.type === 'bool') return ['true', 'false'];
  return spec.choices;
}

/** The width help is written for: a line longer than this is wrapped at a space. */
export const HELP_WIDTH = 100;

/**
 * `text` as lines of at most HELP_WIDTH columns: the first starts with `first` (padded to
 * `indent`), the next ones with `indent` spaces. A word longer than a line stays whole.
 */
function wrap(first: string, indent: number, text: string): string[] {
  const lines: string[] = [];
  let line = first.padEnd(indent);
  let empty = true;
  for (const word of text.split(' ')) {
    if (!empty && line.length + 1 + word.length > HELP_WIDTH) {
      lines.push(line);
      line = ''.padEnd(indent);
      empty = true;
    }
    line += empty ? word : ` ${word}`;
    empty = false;
  }
  lines.push(line);
  return lines;
}

function flagLine(name: string, command?: CommandName): string[] {
  const spec = (FLAG_SPECS as Record<string, Spec>)[name]!;
  const info = command ? findCommand(command) : undefined;
  const def = info?.defaults?.[name as keyof typeof FLAG_SPECS] ?? commandDefault(spec, command);
  const head = `  --${name}${spec.type === 'bool' ? '' : ` ${spec.type}`}`;
  let text = spec.help + (def !== undefined ? ` (default ${def}${!command && spec.commandDefaults ? `; ${commandDefaultsText(spec)}` : ''})` : '');
  const choices = spec.type === 'bool' ? undefined : flagChoices(name, command);
  if (choices) text += `; one of ${choices.join(', ')}`;
  if (!command) text += ` [${flagHelp(name).commands.join(' ')}]`;
  if (head.length <= 34) return wrap(head, 35, text);
  return [head, ...wrap('', 35, text)];
}

function groupedFlags(names: string[], command?: CommandName): string[] {
  const lines: string[] = [];
  for (const group of Object.keys(FLAG_GROUPS) as FlagGroup[]) {
    const inGroup = names.filter((n) => flagHelp(n).group === group);
    if (inGroup.length === 0) continue;
    lines.push('', `${group === 'command' && command ? `${command}` : FLAG_GROUPS[group]}:`);
    for (const n of inGroup) lines.push(...flagLine(n, command));
  }
  return lines;
}

const FLAG_SYNTAX = wrap(
  '',
  0,
  'Flags go before or after the command, as --name=value or --name value (booleans: --name, --name=false); --name-with-dashes works too. Each flag can also be set in the environment as MESH_<NAME> (MESH_LOG_LEVEL=debug); the command line wins. A command refuses a flag it does not use (exit 2); a MESH_<NAME> variable it does not use is ignored.',
);

/** `mesh --help`, `mesh help`: the commands, one line each, the global flags in short. */
export function mainHelp(): string {
  const usage = (c: CommandInfo) => `${c.name}${c.args ? ` ${c.args}` : ''}`;
  const width = Math.max(...COMMANDS.map((c) => usage(c).length)) + 2;
  const globals = specs()
    .map(([n]) => n)
    .filter((n) => [...TAKES_FLAGS].every((c) => c === 'ca' || c === 'new' || c === 'envoy' || c === 'tap' || flagHelp(n).commands.includes(c)) && !n.endsWith('_file'));
  const lines = [
    'usage: mesh <command> [flags]',
    '',
    'commands:',
    ...COMMANDS.flatMap((c) => wrap(`  ${usage(c)}`, width + 3, c.summary)),
    '',
    'global flags (every command that talks to the mesh):',
    ...globals.map((n) => {
      const spec = (FLAG_SPECS as Record<string, Spec>)[n]!;
      return `  --${n.padEnd(24)} ${spec.choices ? spec.choices.join('|') : spec.type}${spec.default !== undefined ? ` (default ${spec.default}${spec.commandDefaults ? `; ${commandDefaultsText(spec)}` : ''})` : ''}`;
    }),
    '',
    'switches: -h, --help; -v, --version; --hot-restart-version',
    '',
    ...FLAG_SYNTAX,
    '',
    ...wrap('', 0, "Run 'mesh <command> --help' (or 'mesh help <command>') for the flags of a command, 'mesh help flags' for every flag."),
  ];
  return lines.join('\n') + '\n';
}

/** `mesh <command> --help`: usage, what it does, its flags grouped. */
export function commandHelp(command: CommandInfo): string {
  const lines = [`usage: mesh ${command.name}${command.args ? ` ${command.args}` : ''}${TAKES_FLAGS.has(command.name) ? ' [flags]' : ''}`, '', ...wrap('', 0, command.summary)];
  if (command.details) lines.push(...command.details.flatMap((d) => wrap('', 0, d)));
  const flags = commandFlags(command.name);
  if (flags.length > 0) {
    lines.push('', ...FLAG_SYNTAX, ...groupedFlags(flags, command.name));
    lines.push('', ...wrap('', 0, `Other flags are refused ('mesh help flags' lists them all, with the commands that use each).`));
  }
  return lines.join('\n') + '\n';
}

/** `mesh help flags`: every flag, grouped. */
export function allFlagsHelp(): string {
  return ['usage: mesh <command> [flags]', '', ...FLAG_SYNTAX, ...groupedFlags(specs().map(([n]) => n))].join('\n') + '\n';
}
