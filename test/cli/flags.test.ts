import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs, FlagError } from '../../src/cli/flags.js';

test('defaults', () => {
  const { config, positionals } = parseArgs([], {});
  assert.equal(config.registry, 'local');
  assert.equal(config.broker, 'http');
  assert.equal(config.client_request_timeout, 5000);
  assert.equal(config.client_retries, 1);
  assert.equal(config.register_ttl, 30_000);
  assert.equal(config.register_interval, 10_000);
  assert.equal(config.max_body_size, 4 * 1024 * 1024);
  assert.equal(config.enable_stats, false);
  assert.deepEqual(positionals, []);
});

test('flags before and after the command, = and space forms, env', () => {
  const { config, positionals } = parseArgs(
    ['--registry=memory', 'api', '--client_request_timeout', '1m30s', 'services', '--enable_stats', '--cors=http://a.com,https://b.com:8443'],
    { MESH_CLIENT_RETRIES: '3', MESH_REGISTRY: 'etcd' },
  );
  assert.deepEqual(positionals, ['api', 'services']);
  assert.equal(config.registry, 'memory'); // command line beats environment
  assert.equal(config.client_request_timeout, 90_000);
  assert.equal(config.client_retries, 3);
  assert.equal(config.enable_stats, true);
  assert.deepEqual(config.cors, ['http://a.com', 'https://b.com:8443']);
});

test('bad values name the flag', () => {
  assert.throws(() => parseArgs(['--client_request_timeout=soon'], {}), (e: Error) => e instanceof FlagError && /--client_request_timeout/.test(e.message));
  assert.throws(() => parseArgs(['--max_body_size=huge'], {}), /--max_body_size/);
  assert.throws(() => parseArgs(['--registry=consul'], {}), /--registry.*local, memory, etcd/);
  assert.throws(() => parseArgs(['--client_retries=-1'], {}), /--client_retries/);
  assert.throws(() => parseArgs(['--nope'], {}), /unknown flag --nope/);
  assert.throws(() => parseArgs(['--log_level=loud'], {}), /--log_level/);
  assert.throws(() => parseArgs([], { MESH_REGISTER_TTL: 'x' }), /--register_ttl/);
  assert.throws(() => parseArgs(['--address'], {}), /needs a value/);
});

test('switches', () => {
  assert.ok(parseArgs(['--hot-restart-version'], {}).switches.has('hot-restart-version'));
  assert.ok(parseArgs(['--help'], {}).switches.has('help'));
});

test('durable broker flags: defaults, values and bad values', () => {
  const d = parseArgs([], {}).config;
  assert.equal(d.broker_max_deliver, 5);
  assert.equal(d.broker_ack_wait, 30_000);
  assert.equal(d.broker_dlq_suffix, '.dlq');
  assert.equal(d.broker_stream_max_age, 0);
  assert.equal(d.broker_stream_max_bytes, 0);
  const c = parseArgs(['--broker_max_deliver=3', '--broker_ack_wait=2s', '--broker_dlq_suffix=.dead', '--broker_stream_max_age=24h', '--broker_stream_max_bytes=1GiB'], {}).config;
  assert.equal(c.broker_max_deliver, 3);
  assert.equal(c.broker_ack_wait, 2000);
  assert.equal(c.broker_dlq_suffix, '.dead');
  assert.equal(c.broker_stream_max_age, 86_400_000);
  assert.equal(c.broker_stream_max_bytes, 1024 ** 3);
  const bad = (args: string[], re: RegExp) => assert.throws(() => parseArgs(args, {}), (e: Error) => e instanceof FlagError && re.test(e.message));
  bad(['--broker_max_deliver=0'], /invalid value "0" for flag --broker_max_deliver: must be from 1 to 1000/);
  bad(['--broker_ack_wait=5ms'], /--broker_ack_wait: must be from 100ms to 1h/);
  bad(['--broker_dlq_suffix=a>'], /--broker_dlq_suffix/);
  bad(['--broker_dlq_suffix='], /--broker_dlq_suffix/);
  assert.equal(d.broker_inactive_threshold, 86_400_000);
  assert.equal(d.broker_max_consumers, 1000);
  const n = parseArgs(['--broker_inactive_threshold=0', '--broker_max_consumers=5'], {}).config;
  assert.equal(n.broker_inactive_threshold, 0);
  assert.equal(n.broker_max_consumers, 5);
  bad(['--broker_inactive_threshold=500ms'], /invalid value "500ms" for flag --broker_inactive_threshold: must be 0 \(never\) or from 1s/);
  bad(['--broker_max_consumers=0'], /invalid value "0" for flag --broker_max_consumers: must be from 1 to 100000/);
});

test('a command default of its own: --mtls is strict for mesh dev, permissive for call, health, publish and subscribe, off elsewhere; a flag or MESH_MTLS wins', () => {
  const mtls = (argv: string[], env: NodeJS.ProcessEnv = {}) => parseArgs(argv, env).config.mtls;
  assert.equal(mtls(['dev']), 'strict');
  assert.equal(mtls(['call', 'go.mesh.srv.greeter', 'Say.Hello']), 'permissive');
  assert.equal(mtls(['health', 'go.mesh.srv.greeter']), 'permissive');
  assert.equal(mtls(['publish', 't', 'm']), 'permissive');
  assert.equal(mtls(['subscribe', 't']), 'permissive');
  for (const command of ['api', 'sidecar', 'proxy', 'list', 'get', 'dlq', 'consumers']) assert.equal(mtls([command]), 'off', command);
  assert.equal(mtls([]), 'off');
  // runService's flags have no command: the option's own default.
  assert.equal(parseArgs(['dev'], {}, { command: false }).config.mtls, 'off');
  assert.equal(mtls(['dev', '--mtls=off']), 'off');
  assert.equal(mtls(['dev'], { MESH_MTLS: 'permissive' }), 'permissive');
  assert.equal(mtls(['call', 'x', 'Y.z'], { MESH_MTLS: 'off' }), 'off');
  assert.throws(() => parseArgs(['dev', '--mtls=on'], {}), (e: Error) => e instanceof FlagError && e.message === 'invalid value "on" for flag --mtls: use one of off, permissive, strict');
});
