/**
 * The option schema (src/base/options/schema.ts): one entry drives the flag, its MESH_* variable, the
 * camelCase API option, the help and completion of the commands that use it; a command refuses a
 * flag it does not use (exit 2, naming the commands that use it) and ignores such a variable.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { OPTIONS, apiName, envName, optionEntries } from '../../src/base/options/schema.js';
import { FlagError, parseArgs } from '../../src/cli/flags.js';
import { commandFlags, commandHelp, findCommand } from '../../src/cli/help.js';
import { completionScript } from '../../src/cli/completion.js';
import { meshOptionsFromFlags } from '../../src/cli/options.js';
import { DEFAULT_OPTIONS, OptionsError, resolveOptions, type MeshOptions } from '../../src/process/options.js';
import { SchemaOptionError, errorMessage } from '../../src/base/util/option-error.js';
import { loadPair } from '../../src/tls/files.js';
import { appOptionsFromFlags } from '../../src/fronts/sidecar/health-checker.js';
import { readAuthSetup } from '../../src/edge/auth/edge.js';
import { isSecretOption } from '../../src/admin/config-dump.js';
import { Mesh } from '../../src/framework/mesh.js';
import { runCli, tempDir } from '../helpers.js';

describe('one schema entry drives flag, environment, API option, help and completion', () => {
  it('client_request_timeout: --client_request_timeout, MESH_CLIENT_REQUEST_TIMEOUT, clientRequestTimeout', () => {
    const entry = OPTIONS.client_request_timeout;
    assert.equal(envName('client_request_timeout'), 'MESH_CLIENT_REQUEST_TIMEOUT');
    assert.equal(apiName('client_request_timeout'), 'clientRequestTimeout');
    assert.equal(parseArgs(['call', '--client_request_timeout=2s'], {}).config.client_request_timeout, 2000);
    assert.equal(parseArgs(['call'], { MESH_CLIENT_REQUEST_TIMEOUT: '3s' }).config.client_request_timeout, 3000);
    assert.equal(parseArgs(['call'], {}).config.client_request_timeout, 5000);
    assert.equal(DEFAULT_OPTIONS.clientRequestTimeout, entry.default);
    assert.equal(resolveOptions({ clientRequestTimeout: '4s' }).clientRequestTimeout, 4000);
    assert.equal(resolveOptions().clientRequestTimeout, 5000);
    for (const command of entry.commands) {
      assert.ok(commandFlags(command).includes('client_request_timeout'), command);
      assert.match(commandHelp(findCommand(command)!), /^ {2}--client_request_timeout duration\s+budget of one outbound call \(default 5s\)$/m);
    }
    assert.match(completionScript('bash'), /call\) echo '[^']*--client_request_timeout=/);
  });

  it('a range declared once is checked by the flag and by the API option, with the same reason', () => {
    assert.throws(() => parseArgs(['api', '--broker_max_deliver=0'], {}), { message: 'invalid value "0" for flag --broker_max_deliver: must be from 1 to 1000' });
    assert.throws(() => resolveOptions({ brokerMaxDeliver: 0 }), { message: 'invalid option brokerMaxDeliver: must be from 1 to 1000 (got 0)' });
  });

  it('every api entry is an option resolveOptions knows, and the flags give exactly those (but --address)', () => {
    const api = optionEntries().filter(([, s]) => s.api).map(([k]) => apiName(k));
    const fromFlags = Object.keys(meshOptionsFromFlags(parseArgs(['api'], {}).config));
    assert.deepEqual(fromFlags.sort(), api.filter((n) => n !== 'address').sort());
    for (const name of api) {
      try {
        resolveOptions({ [name]: undefined } as MeshOptions);
      } catch (err) {
        assert.ok(!(err instanceof OptionsError && /unknown option/.test(err.message)), `${name}: ${(err as Error).message}`);
      }
    }
    assert.throws(() => resolveOptions({ rateLimit: '1/s' } as MeshOptions), { message: 'invalid option rateLimit: unknown option (see docs/api.md)' });
  });
});

describe('a command refuses a flag it does not use and ignores such a variable', () => {
  it('parseArgs: the flag named as given, and the commands that use it', () => {
    assert.throws(() => parseArgs(['deregister', 'service', '{}', '--register_ttl=2s'], {}), (e: unknown) => e instanceof FlagError && e.exitCode === 2 && e.message === 'flag --register_ttl is not used by mesh deregister (the commands that use it: dev, sidecar, register, run)');
    assert.throws(() => parseArgs(['--enable-stats', 'list', 'services'], {}), { message: 'flag --enable-stats is not used by mesh list (the commands that use it: dev, api, sidecar, run)' });
    assert.throws(() => parseArgs(['api', '-c', 'x.yaml'], {}), { message: 'flag -c is not used by mesh api (the commands that use it: proxy)' });
    assert.throws(() => parseArgs(['new', 'service', 'x', '--registry=memory'], {}), /flag --registry is not used by mesh new \(the commands that use it: dev, api, sidecar, proxy, list, get, /);
    assert.equal(parseArgs(['register', 'service', '{}', '--register_ttl=2s'], {}).config.register_ttl, 2000);
    // --help still answers; runService (command: false) takes every flag.
    assert.ok(parseArgs(['list', '--enable_stats', '--help'], {}).switches.has('help'));
    assert.equal(parseArgs(['list', '--enable_stats'], {}, { command: false }).config.enable_stats, true);
  });

  it('parseArgs: a MESH_* variable the command does not use is ignored, not even checked', () => {
    const p = parseArgs(['list', 'services'], { MESH_CLIENT_RETRIES: 'x', MESH_ENABLE_STATS: 'true' });
    assert.equal(p.config.client_retries, 1);
    assert.equal(p.config.enable_stats, false);
    assert.ok(!p.given.has('client_retries') && !p.fromEnv.has('enable_stats'));
    assert.throws(() => parseArgs(['health', 'x'], { MESH_CLIENT_RETRIES: 'x' }), /for MESH_CLIENT_RETRIES \(--client_retries\)/);
  });

  const home = tempDir();
  after(() => home.cleanup());

  it('mesh: exit 2 with the exact line, nothing on stdout; an unused variable changes nothing', async () => {
    let r = await runCli(['deregister', 'service', '{"Name":"a"}', '--register_ttl=2s'], { MESH_REGISTRY_ADDRESS: home.path });
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: flag --register_ttl is not used by mesh deregister (the commands that use it: dev, sidecar, register, run)\n');
    assert.equal(r.stdout, '');
    r = await runCli(['list', 'services'], { MESH_REGISTRY_ADDRESS: home.path, MESH_CLIENT_RETRIES: 'x', MESH_REGISTER_TTL: 'soon' });
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
  });
});

describe('errors below the CLI carry the option by its schema key', () => {
  it('SchemaOptionError: the CLI prints flags, the library API names', () => {
    const e = new SchemaOptionError('client_request_timeout', 'longer than {client_retries} tries', '9h');
    assert.equal(e.key, 'client_request_timeout');
    assert.equal(e.format('flag'), 'invalid value "9h" for flag --client_request_timeout: longer than --client_retries tries');
    assert.equal(e.format('api'), 'invalid option clientRequestTimeout: longer than clientRetries tries (got "9h")');
    assert.equal(e.message, e.format('api'));
    assert.equal(new SchemaOptionError('server_address', 'no port', null).format('flag'), 'invalid value for flag --server_address: no port');
    assert.equal(errorMessage(new Error('plain'), 'flag'), 'plain');
  });

  it('TLS files, the sidecar app and auth name their options by key', () => {
    assert.throws(() => loadPair(undefined, 'key.pem'), (e: unknown) => e instanceof SchemaOptionError && e.key === 'tls_cert_file' && e.format('flag') === '--enable_tls needs --tls_cert_file' && e.message === 'enableTls needs tlsCertFile');
    const app = { healthcheck_interval: 1000, healthcheck_timeout: 1000, register_ttl: 30_000, register_interval: 10_000 };
    assert.throws(() => appOptionsFromFlags({ ...app, server_address: '127.0.0.1:9000' }, false), (e: unknown) => e instanceof SchemaOptionError && e.key === 'server_name' && e.format('flag') === '--server_address needs --server_name (the name to register the app under)');
    assert.throws(() => new Mesh({ registry: 'memory', broker: 'memory', protoFiles: ['a.proto'] }), (e: unknown) => e instanceof SchemaOptionError && e.key === 'proto_files' && e.message === '.proto files: protoFiles needs protoPath (the directories the files and their imports are found in)');
    const auth = parseArgs(['api', '--auth=jwt'], {}).config;
    assert.throws(() => readAuthSetup(auth), (e: unknown) => e instanceof SchemaOptionError && e.key === 'auth' && e.format('flag') === 'invalid value "jwt" for flag --auth: --auth=jwt needs --auth_jwks=FILE|URL');
  });
});

describe('secret options and their files', () => {
  it('every secret option has a file form for the same commands (fileOf), or one of its own', () => {
    const entries = new Map(optionEntries());
    for (const [key] of optionEntries().filter(([k]) => isSecretOption(k))) {
      const file = entries.get(`${key}_file`);
      assert.ok(file, `--${key} has no --${key}_file`);
      if (key === 'broker_secret' || key === 'ca_token') continue; // read at each use, by their own code
      assert.equal(file.fileOf, key, `--${key}_file`);
      assert.deepEqual([...file.commands].sort(), [...entries.get(key)!.commands].sort(), `--${key}_file`);
    }
    for (const [key, spec] of optionEntries()) if (spec.fileOf !== undefined) assert.ok(isSecretOption(spec.fileOf) && entries.get(spec.fileOf)?.type === 'string', key);
  });

  it('a file form gives its option the file\'s first line, from a flag or MESH_*_FILE', () => {
    const dir = tempDir('mesh-secret-file-');
    try {
      const file = `${dir.path}/token`;
      writeFileSync(file, 'tok-0123456789abcdef\r\n\n');
      const flag = parseArgs(['api', `--admin_token_file=${file}`], {});
      assert.equal(flag.config.admin_token, 'tok-0123456789abcdef');
      assert.ok(flag.given.has('admin_token'));
      assert.equal(parseArgs(['sidecar'], { MESH_SIDECAR_TOKEN_FILE: file }).config.sidecar_token, 'tok-0123456789abcdef');
      assert.throws(() => parseArgs(['xds', '--xds_token=x'], { MESH_XDS_TOKEN_FILE: file }), (e: unknown) => e instanceof FlagError && e.message === 'give --xds_token or MESH_XDS_TOKEN_FILE (--xds_token_file), not both');
      // --help reads no file.
      assert.equal(parseArgs(['api', '--help', '--admin_token_file=/nonexistent'], {}).config.admin_token, undefined);
    } finally {
      dir.cleanup();
    }
  });
});
