import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs, FlagError } from '../src/cli/flags.js';

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
    ['--registry=memory', 'list', '--client_request_timeout', '1m30s', 'services', '--enable_stats', '--cors=http://a.com,https://b.com:8443'],
    { MESH_CLIENT_RETRIES: '3', MESH_REGISTRY: 'etcd' },
  );
  assert.deepEqual(positionals, ['list', 'services']);
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
