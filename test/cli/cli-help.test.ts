/**
 * `mesh --help`, `mesh <command> --help`, help/version commands, "did you mean", environment
 * variables named in errors, completion scripts; and that help and version never load the runtime.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { runCli, tempDir, ROOT, CLI, unwrapHelp } from '../helpers.js';
import { FLAG_SPECS, FLAG_HELP, COMMAND_NAMES, parseArgs, suggest, editDistance, flagHelp, attributeFlagError } from '../../src/cli/flags.js';
import { COMMANDS, commandFlags, commandHelp, findCommand } from '../../src/cli/help.js';
import { DEFAULT_ADDRESS, DEFAULT_NAMESPACE } from '../../src/fronts/gateway/server.js';
import { SIDECAR_DEFAULT_ADDRESS, SIDECAR_DEFAULT_ADMIN, SIDECAR_NAMESPACE } from '../../src/fronts/sidecar/server.js';
import { PROXY_ADMIN_ADDRESS } from '../../src/fronts/proxy/config.js';
import { ENVOY_ADMIN_ADDRESS, ENVOY_LISTENER_ADDRESS } from '../../src/cli/envoy.js';
import { API_ADMIN_ADDRESS } from '../../src/cli/api.js';

const home = tempDir();
const env = { MESH_REGISTRY_ADDRESS: home.path };
const unwrapped = unwrapHelp;
after(() => home.cleanup());

describe('help metadata', () => {
  it('every flag has an explicit group and is listed by at least one command', () => {
    for (const name of Object.keys(FLAG_SPECS)) {
      assert.ok(Object.hasOwn(FLAG_HELP, name), `--${name} has no entry in FLAG_HELP (src/cli/flags.ts)`);
      assert.notEqual(flagHelp(name).group, 'other', `--${name}`);
      assert.ok(COMMANDS.some((c) => commandFlags(c.name).includes(name)), `--${name} is in no command's help`);
    }
    assert.deepEqual(COMMANDS.map((c) => c.name).sort(), [...COMMAND_NAMES].sort());
  });

  it('a flag missing from the table goes by its name (log_* is logging) and shows for every mesh process', () => {
    assert.deepEqual(flagHelp('log_format').group, 'logging');
    assert.ok(flagHelp('log_format').commands.includes('api') && flagHelp('log_format').commands.includes('list'));
    assert.equal(flagHelp('something_new').group, 'other');
  });

  it("each command runner's own flags (config.X in its file) are in its help", () => {
    const files: Record<string, string> = { api: 'api.ts', sidecar: 'sidecar.ts', proxy: 'proxy.ts', dev: 'dev.ts' };
    for (const [command, file] of Object.entries(files)) {
      const src = readFileSync(join(ROOT, 'src/cli', file), 'utf8');
      // The flags' config (`config.x`), not a listener's (`listener.config.routes`).
      const read = new Set([...src.matchAll(/(?<!\.)config\.([a-z_]+)/g)].map((m) => m[1]!).filter((n) => Object.hasOwn(FLAG_SPECS, n)));
      const shown = commandFlags(command as 'api');
      for (const n of read) assert.ok(shown.includes(n), `${command} reads --${n} but its help does not list it`);
    }
    const platform = readFileSync(join(ROOT, 'src/cli/commands.ts'), 'utf8');
    for (const m of platform.matchAll(/config\.([a-z_]+)/g)) {
      if (['queue', 'ack', 'durable'].includes(m[1]!)) assert.ok(commandFlags('subscribe').includes(m[1]!));
      else if (m[1] === 'stream') assert.ok(commandFlags('call').includes('stream') && !commandFlags('list').includes('stream'), 'only mesh call lists --stream');
      else if (m[1] === 'max_body_size') assert.ok(commandFlags('call').includes(m[1]), 'mesh call --stream reads --max_body_size');
      else if (m[1] === 'register_ttl') assert.ok(commandFlags('register').includes(m[1]) && !commandFlags('deregister').includes(m[1]), 'only mesh register lists --register_ttl');
      else assert.ok(commandFlags('list').includes(m[1]!) && commandFlags('call').includes(m[1]!), `platform commands read --${m[1]}`);
    }
  });

  it("the defaults help shows per command are the code's", () => {
    const d = (c: string) => findCommand(c)!.defaults!;
    assert.equal(d('api').address, DEFAULT_ADDRESS);
    assert.equal(d('api').namespace, DEFAULT_NAMESPACE);
    assert.equal(d('api').admin_address, API_ADMIN_ADDRESS);
    assert.equal(d('dev').address, DEFAULT_ADDRESS);
    assert.equal(d('sidecar').address, SIDECAR_DEFAULT_ADDRESS);
    assert.equal(d('sidecar').admin_address, SIDECAR_DEFAULT_ADMIN);
    assert.equal(d('sidecar').namespace, SIDECAR_NAMESPACE);
    assert.equal(d('proxy').admin_address, PROXY_ADMIN_ADDRESS);
    assert.equal(d('envoy').admin_address, ENVOY_ADMIN_ADDRESS);
    assert.equal(d('envoy').listener_address, ENVOY_LISTENER_ADDRESS);
  });
});

describe('suggestions', () => {
  it('edit distance and suggest', () => {
    assert.equal(editDistance('kitten', 'sitting'), 3);
    assert.equal(editDistance('ab', 'ba'), 1);
    assert.deepEqual(suggest('registry-adress', Object.keys(FLAG_SPECS)), ['registry_address']);
    assert.deepEqual(suggest('lb-polcy', Object.keys(FLAG_SPECS)), ['lb_policy']);
    assert.deepEqual(suggest('ap', COMMAND_NAMES), ['api', 'tap']);
    assert.deepEqual(suggest('sidecra', COMMAND_NAMES), ['sidecar']);
    assert.deepEqual(suggest('frobnicate', COMMAND_NAMES), []);
    assert.deepEqual(suggest('x'.repeat(500), COMMAND_NAMES), []);
  });

  it('an unknown flag names the closest one', () => {
    assert.throws(() => parseArgs(['--registry-adress=x'], {}), { message: 'unknown flag --registry-adress: did you mean --registry_address? (see mesh --help)' });
    assert.throws(() => parseArgs(['--hlep'], {}), /did you mean --help\?/);
    assert.throws(() => parseArgs(['--nope'], {}), { message: 'unknown flag --nope (see mesh --help)' });
  });
});

describe('parser', () => {
  it('-h and -v are switches anywhere before --; Go-style booleans and flags after the command still work', () => {
    assert.ok(parseArgs(['api', '-h'], {}).switches.has('help'));
    assert.ok(parseArgs(['-v'], {}).switches.has('version'));
    assert.deepEqual(parseArgs(['call', '--', '-h'], {}).positionals, ['call', '-h']);
    const p = parseArgs(['--enable_stats=false', 'api', '--enable-tls=false', '--lb-policy', 'random'], { MESH_ENABLE_STATS: 'true' });
    assert.equal(p.config.enable_stats, false);
    assert.equal(p.config.enable_tls, false);
    assert.equal(p.config.lb_policy, 'random');
    assert.deepEqual(p.positionals, ['api']);
  });

  it('a bad value from the environment names the variable; the command line overrides it', () => {
    assert.throws(() => parseArgs([], { MESH_CLIENT_RETRIES: 'x' }), { message: 'invalid value "x" for MESH_CLIENT_RETRIES (--client_retries): not a non-negative integer' });
    assert.throws(() => parseArgs(['--client_retries=x'], {}), { message: 'invalid value "x" for flag --client_retries: not a non-negative integer' });
    assert.equal(parseArgs(['--client_retries=2'], { MESH_CLIENT_RETRIES: 'x' }).config.client_retries, 2);
    assert.throws(() => parseArgs([], { MESH_LOG_LEVEL: 'loud' }), /for MESH_LOG_LEVEL \(--log_level\)/);
    assert.throws(() => parseArgs([], { MESH_REGISTRY: 'consul' }), /for MESH_REGISTRY \(--registry\): use one of local, memory, etcd/);
    const p = parseArgs([], { MESH_NAMESPACE: 'a b' });
    assert.deepEqual([...p.fromEnv], ['namespace']);
    assert.equal(attributeFlagError('invalid value "a b" for flag --namespace: x', p.fromEnv), 'invalid value "a b" for MESH_NAMESPACE (--namespace): x');
    assert.equal(attributeFlagError('invalid value "a" for flag --address: x', p.fromEnv), 'invalid value "a" for flag --address: x');
  });
});

describe('help fits a 100-column terminal', () => {
  it('no line of mesh --help, a command\'s help or mesh help flags is wider than 100 columns', async () => {
    for (const args of [['--help'], ['help', 'flags'], ...COMMANDS.map((c) => [c.name, '--help'])]) {
      const r = await runCli(args, env);
      const wide = r.stdout.split('\n').filter((l) => l.length > 100);
      assert.deepEqual(wide, [], `mesh ${args.join(' ')}`);
    }
  });
});

describe('mesh help and version (real processes)', () => {
  it('mesh --help: the commands one line each, the global flags, how to get a command help; -h, help are the same', async () => {
    const r = await runCli(['--help'], env);
    assert.equal(r.code, 0, r.stderr);
    for (const c of COMMANDS) assert.match(unwrapped(r.stdout), new RegExp(`^  ${c.name}\\b.*${c.summary.slice(0, 20).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`, 'm'));
    assert.match(unwrapped(r.stdout), /global flags/);
    assert.match(unwrapped(r.stdout), /^  --registry +local\|memory\|etcd \(default local\)$/m);
    assert.match(unwrapped(r.stdout), /mesh <command> --help/);
    assert.ok(!r.stdout.includes('--server_name'), 'no command-specific flags in the main help');
    for (const args of [['-h'], ['help']]) {
      const s = await runCli(args, env);
      assert.equal(s.code, 0);
      assert.equal(s.stdout, r.stdout);
    }
  });

  it('mesh api --help and mesh sidecar --help list different flags, grouped, with defaults and allowed values', async () => {
    const api = await runCli(['api', '--help'], env);
    const sidecar = await runCli(['--help', 'sidecar'], env);
    assert.equal(api.code, 0);
    assert.equal(sidecar.code, 0);
    assert.notEqual(api.stdout, sidecar.stdout);
    assert.match(unwrapped(api.stdout), /^usage: mesh api \[flags\]$/m);
    assert.match(unwrapped(api.stdout), /^  --handler string +gateway\/sidecar handler; one of api, rpc, proxy, event$/m);
    assert.match(unwrapped(api.stdout), /^  --lb_policy string +load balancing \(default round_robin\); one of round_robin, random, least_request$/m);
    assert.match(unwrapped(api.stdout), /^  --address string +.*\(default :8080\)$/m);
    assert.match(unwrapped(sidecar.stdout), /^  --handler string +gateway\/sidecar handler \(default rpc\); one of rpc, proxy$/m);
    assert.match(unwrapped(sidecar.stdout), /^  --address string +.*\(default 127\.0\.0\.1:8081\)$/m);
    assert.match(unwrapped(sidecar.stdout), /--server_name/);
    assert.ok(!api.stdout.includes('--server_name') && !api.stdout.includes('--queue') && !api.stdout.includes('--proxy_address'));
    const headings = [...api.stdout.matchAll(/^([A-Za-z][^:\n]*):$/gm)].map((m) => m[1]);
    assert.deepEqual(headings, ['api', 'listen', 'registry', 'broker', 'client (outbound calls)', 'TLS and ACME', 'identity and mutual TLS', 'admin interface', 'authentication and authorization', 'limits and drain', 'logging']);
    const list = await runCli(['help', 'list'], env);
    assert.equal(list.code, 0);
    assert.match(unwrapped(list.stdout), /--proxy_address/);
    assert.match(unwrapped(list.stdout), /--output string +text or json \(default text\); one of text, json/);
    assert.ok(!list.stdout.includes('--tls_cert_file') && !list.stdout.includes('--drain_timeout'));
    assert.equal(commandHelp(findCommand('list')!), list.stdout);
    assert.ok(!list.stdout.includes('--stream'));
    const call = await runCli(['help', 'call'], env);
    assert.match(unwrapped(call.stdout), /--stream string +call: a streaming call of this kind instead of a unary call;.*; one of server, client, bidi/);
    const flags = await runCli(['help', 'flags'], env);
    for (const name of Object.keys(FLAG_SPECS)) assert.match(unwrapped(flags.stdout), new RegExp(`^  --${name}\\b`, 'm'));
    // A command's own default (--mtls: strict for dev, permissive for call and health) in its help; all of them in help flags.
    const mtlsDefault = (out: string) => /^  --mtls string +.*\(default ([^)]*)\)/m.exec(unwrapped(out))?.[1];
    assert.equal(mtlsDefault(call.stdout), 'permissive');
    assert.equal(mtlsDefault((await runCli(['help', 'dev'], env)).stdout), 'strict');
    assert.equal(mtlsDefault((await runCli(['help', 'api'], env)).stdout), 'off');
    // mesh run joins the mesh it runs in: its default is read from the registry, and its help says so.
    assert.equal(mtlsDefault((await runCli(['help', 'run'], env)).stdout), "the mesh's: strict if every node in the registry serves mutual TLS, permissive if some do, else off");
    assert.equal(mtlsDefault(flags.stdout), 'off; dev: strict; call, health, check, publish, subscribe: permissive');
  });

  it('version, -v, --version exit 0 with the version', async () => {
    for (const args of [['version'], ['-v'], ['--version'], ['api', '--version']]) {
      const r = await runCli(args, env);
      assert.equal(r.code, 0, `${args}: ${r.stderr}`);
      assert.match(unwrapped(r.stdout), /^mesh \d+\.\d+\.\d+\n$/);
    }
  });

  it('unknown commands, subcommands, flags and help topics exit 2 with a suggestion and nothing on stdout', async () => {
    const cases: Array<[string[], string]> = [
      [['ap'], 'mesh: unknown command "ap": did you mean "api" or "tap"? (see mesh --help)\n'],
      [['list', 'servics'], 'mesh: unknown command "list servics": did you mean "list services"? (usage: mesh list services)\n'],
      [['help', 'sidecra'], 'mesh: unknown command "sidecra": did you mean "sidecar"? (see mesh --help)\n'],
      [['api', '--registry-adress=x'], 'mesh: unknown flag --registry-adress: did you mean --registry_address? (see mesh --help)\n'],
      [['frobnicate'], 'mesh: unknown command "frobnicate" (see mesh --help)\n'],
      [['completion'], 'mesh: usage: mesh completion bash|zsh\n'],
      [['completion', 'fish'], 'mesh: unknown command "completion fish" (usage: mesh completion bash|zsh)\n'],
    ];
    for (const [args, stderr] of cases) {
      const r = await runCli(args, env);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.equal(r.stderr, stderr);
      assert.equal(r.stdout, '');
    }
  });

  it('a bad value from the environment names the variable, for the parser and for a command runner', async () => {
    let r = await runCli(['health', 'go.mesh.srv.x'], { ...env, MESH_CLIENT_RETRIES: 'x' });
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: invalid value "x" for MESH_CLIENT_RETRIES (--client_retries): not a non-negative integer\n');
    r = await runCli(['api', '--admin_address=off', '--address=127.0.0.1:0'], { ...env, MESH_NAMESPACE: 'bad ns' });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^mesh: invalid value "bad ns" for MESH_NAMESPACE \(--namespace\): /);
  });
});

describe('help, version and completion do not load the runtime', () => {
  const dir = tempDir('mesh-hook-');
  let register = '';
  before(() => {
    // A resolve hook that refuses the runtime and the heavy dependencies: importing one fails the process.
    writeFileSync(
      join(dir.path, 'hooks.mjs'),
      `const BLOCK = [/\\/src\\/runtime\\.js$/, /\\/src\\/cli\\/(commands|operations|api|sidecar|proxy|dev)\\.js$/, /\\/src\\/(gateway|sidecar|proxy|server|client|broker)\\//, /\\/node_modules\\/(undici|ws|etcd3|nats|better-sqlite3|acme-client|protobufjs|pino)\\//];
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  if (BLOCK.some((re) => re.test(r.url))) throw new Error('BLOCKED ' + r.url);
  return r;
}
`,
    );
    writeFileSync(join(dir.path, 'register.mjs'), `import { register } from 'node:module';\nregister('./hooks.mjs', import.meta.url);\n`);
    register = pathToFileURL(join(dir.path, 'register.mjs')).href;
  });
  after(() => dir.cleanup());

  const run = (args: string[]) => spawnSync(process.execPath, ['--import', register, CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env } });

  it('--version, --help, api --help, help flags, completion bash run with the runtime blocked', () => {
    for (const args of [['--version'], ['--help'], ['api', '--help'], ['help', 'flags'], ['completion', 'bash'], ['ap']]) {
      const r = run(args);
      assert.ok(!r.stderr.includes('BLOCKED'), `${args.join(' ')} loaded: ${r.stderr}`);
      assert.equal(r.status, args[0] === 'ap' ? 2 : 0, `${args.join(' ')}: ${r.stderr}`);
    }
  });

  it('the hook does block: list services needs the runtime and fails under it', () => {
    const r = run(['list', 'services']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /BLOCKED .*\/(runtime|commands)\.js/);
  });
});

describe('completion', () => {
  const dir = tempDir('mesh-completion-');
  after(() => dir.cleanup());

  it('bash: the script parses (bash -n) and completes commands, subcommands, flags and values', async () => {
    const r = await runCli(['completion', 'bash'], env);
    assert.equal(r.code, 0);
    const file = join(dir.path, 'mesh.bash');
    writeFileSync(file, r.stdout);
    const syntax = spawnSync('bash', ['-n', file], { encoding: 'utf8' });
    assert.equal(syntax.status, 0, syntax.stderr);
    const session = `source ${JSON.stringify(file)}
t() { COMP_WORDS=("$@"); COMP_CWORD=$((\${#COMP_WORDS[@]}-1)); _mesh_completion; echo "$*|\${COMPREPLY[*]}"; }
t mesh ap
t mesh api --lb_policy=
t mesh api --lb_policy = r
t mesh api --lb-policy ''
t mesh sidecar --handler=
t mesh api --handler=
t mesh list ''
t mesh --registry etcd li
t mesh subscribe --qu
t mesh completion ''
t mesh api --enable_stats=
`;
    const out = spawnSync('bash', ['--norc', '--noprofile', '-c', session], { encoding: 'utf8' });
    assert.equal(out.status, 0, out.stderr);
    assert.equal(out.stderr, '');
    assert.deepEqual(out.stdout.trimEnd().split('\n'), [
      'mesh ap|api',
      'mesh api --lb_policy=|--lb_policy=round_robin --lb_policy=random --lb_policy=least_request',
      'mesh api --lb_policy = r|round_robin random',
      'mesh api --lb-policy |round_robin random least_request',
      'mesh sidecar --handler=|--handler=rpc --handler=proxy',
      'mesh api --handler=|--handler=api --handler=rpc --handler=proxy --handler=event',
      'mesh list |services',
      'mesh --registry etcd li|list',
      'mesh subscribe --qu|--queue=',
      'mesh completion |bash zsh',
      'mesh api --enable_stats=|--enable_stats=true --enable_stats=false',
    ]);
  });

  it('zsh: the script parses (zsh -n)', async (t) => {
    if (spawnSync('zsh', ['-c', 'true']).error) {
      // CI installs zsh (.ci/run); there a missing zsh is a failure, not a skip.
      if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error('zsh not installed (MESH_TEST_REQUIRE_ENGINES=1)');
      console.warn('SKIP: zsh is not installed here, so the zsh completion script is not syntax-checked (zsh -n)');
      t.skip('zsh not installed: install it (Debian package zsh) to syntax-check the zsh completion script');
      return;
    }
    const r = await runCli(['completion', 'zsh'], env);
    assert.equal(r.code, 0);
    const file = join(dir.path, '_mesh');
    writeFileSync(file, r.stdout);
    const syntax = spawnSync('zsh', ['-n', file], { encoding: 'utf8' });
    assert.equal(syntax.status, 0, syntax.stderr);
  });
});
