/**
 * The public API (src/index.ts, docs/api.md): resolveOptions and OptionsError for every kind of
 * option, a Mesh serving and calling a typed service, publish/subscribe, plugged-in Registry,
 * Broker and Codec instances, and the engines (etcd3, nats, acme-client) left unloaded by a Mesh
 * that does not use them.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { request } from 'undici';
import { Mesh, MeshError, OptionsError, resolveOptions, type Codec, type MeshOptions } from '../../src/index.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { MemoryBroker } from '../../src/engines/broker/memory.js';
import { ROOT, tempDir, waitFor } from '../helpers.js';

const quiet = { registry: 'memory', broker: 'memory', logLevel: 'off', drainDelay: 0 } as const;

function refused(options: unknown, option: string, message: string): void {
  assert.throws(
    () => resolveOptions(options as MeshOptions),
    (err: unknown) => err instanceof OptionsError && err.name === 'OptionsError' && err.option === option && err.message === message,
    JSON.stringify(options),
  );
}

describe('resolveOptions', () => {
  it('fills the defaults of the flags', () => {
    const o = resolveOptions();
    assert.equal(o.registry, 'local');
    assert.equal(o.broker, 'http');
    assert.equal(o.clientRequestTimeout, 5000);
    assert.equal(o.clientRetries, 1);
    assert.equal(o.streamIdleTimeout, 300_000);
    assert.equal(o.maxBodySize, 4 * 1024 * 1024);
    assert.equal(o.registerTtl, 30_000);
    assert.equal(o.registerInterval, 10_000);
    assert.equal(o.drainDelay, 1000);
    assert.equal(o.drainTimeout, 10_000);
    assert.equal(o.lbPolicy, 'round_robin');
    assert.equal(o.logLevel, 'info');
    assert.equal(o.address, '127.0.0.1:0');
    assert.equal(o.adminAddress, undefined);
    assert.deepEqual(o.codecs, []);
    assert.deepEqual(resolveOptions(o), o, 'resolving twice changes nothing');
  });

  it('takes durations as Go strings or ms, sizes as strings or bytes', () => {
    const o = resolveOptions({ clientRequestTimeout: '1m30s', drainTimeout: 250, maxBodySize: '512KiB', registerTtl: '1.5s' });
    assert.equal(o.clientRequestTimeout, 90_000);
    assert.equal(o.drainTimeout, 250);
    assert.equal(o.maxBodySize, 512 * 1024);
    assert.equal(o.registerTtl, 1500);
    assert.equal(resolveOptions({ maxBodySize: 1000 }).maxBodySize, 1000);
  });

  it('refuses each kind of bad value, naming the option', () => {
    refused({ clientRetries: -1 }, 'clientRetries', 'invalid option clientRetries: must be a non-negative integer (got -1)');
    refused({ maxConnections: 1.5 }, 'maxConnections', 'invalid option maxConnections: must be a non-negative integer (got 1.5)');
    refused({ clientRequestTimeout: '5 parsecs' }, 'clientRequestTimeout', 'invalid option clientRequestTimeout: invalid duration "5 parsecs" (got "5 parsecs")');
    refused({ drainTimeout: -5 }, 'drainTimeout', 'invalid option drainTimeout: must be a non-negative number of milliseconds or a duration like "5s" (got -5)');
    refused({ drainDelay: true }, 'drainDelay', 'invalid option drainDelay: must be a duration like "5s" or a number of milliseconds (got true)');
    refused({ maxBodySize: '4MB' }, 'maxBodySize', 'invalid option maxBodySize: invalid size "4MB" (use bytes or KiB, MiB, GiB) (got "4MB")');
    refused({ maxBodySize: -1 }, 'maxBodySize', 'invalid option maxBodySize: must be a non-negative integer number of bytes or a size like "4MiB" (got -1)');
    refused({ enableStats: 'yes' }, 'enableStats', 'invalid option enableStats: must be true or false (got "yes")');
    refused({ lbPolicy: 'fastest' }, 'lbPolicy', 'invalid option lbPolicy: use one of round_robin, random, least_request (got "fastest")');
    refused({ logLevel: 'loud' }, 'logLevel', 'invalid option logLevel: use one of trace, debug, info, warning, error, critical, off (got "loud")');
    refused({ logFormat: 'pretty' }, 'logFormat', 'invalid option logFormat: use one of text, json (got "pretty")');
    refused({ registry: 'consul' }, 'registry', 'invalid option registry: use one of local, memory, etcd (got "consul")');
    refused({ registry: {} }, 'registry', 'invalid option registry: use local, memory, etcd or an object implementing Registry (got an object)');
    refused({ broker: { name: 'x' } }, 'broker', 'invalid option broker: use http, memory, nats or an object implementing Broker (got an object)');
    refused({ cors: 'http://a.example' }, 'cors', 'invalid option cors: must be an array of strings (got "http://a.example")');
    refused({ adminToken: 42 }, 'adminToken', 'invalid option adminToken: must be a string (got 42)');
    refused({ address: 'nowhere' }, 'address', 'invalid option address: invalid address "nowhere" (use host:port) (got "nowhere")');
    refused({ requestHeadersTimeout: '1m', requestTimeout: '30s' }, 'requestHeadersTimeout', 'invalid option requestHeadersTimeout: longer than requestTimeout (30000ms) (got "1m")');
    refused({ registry: 'etcd' }, 'registryAddress', 'invalid option registryAddress: the etcd registry needs host:port[,host:port] (got undefined)');
    refused({ broker: 'nats' }, 'brokerAddress', 'invalid option brokerAddress: the nats broker needs host:port (got undefined)');
    refused({ enableTls: true, tlsKeyFile: 'k.pem' }, 'tlsCertFile', 'invalid option tlsCertFile: enableTls needs tlsCertFile and tlsKeyFile (got undefined)');
    refused({ enableAcme: true }, 'acmeHosts', 'invalid option acmeHosts: enableAcme needs the host names this server may get certificates for (got undefined)');
    refused({ codecs: [{ contentType: 'nope' }] }, 'codecs', 'invalid option codecs: each codec needs a contentType like "application/x-msgpack", encode() and decode() (got an object)');
    refused({ clientRetrys: 2 }, 'clientRetrys', 'invalid option clientRetrys: unknown option (see docs/api.md)');
    refused('fast', 'options', 'invalid option options: must be an object (got "fast")');
  });

  it('new Mesh() throws the same OptionsError', () => {
    assert.throws(() => new Mesh({ clientRetries: -1 }), { name: 'OptionsError', option: 'clientRetries' });
  });
});

describe('Mesh', () => {
  const meshes: Mesh[] = [];
  after(async () => {
    await Promise.all(meshes.map((m) => m.close()));
  });

  it('serves a typed service and calls it; errors are MeshError', async () => {
    const mesh = new Mesh(quiet);
    meshes.push(mesh);
    mesh
      .service({ name: 'go.mesh.srv.greeter' })
      .handle<{ name: string }, { msg: string }>('Say.Hello', (req) => {
        if (!req.name) throw new MeshError('go.mesh.srv.greeter', 400, 'name: required');
        return { msg: `Hello ${req.name}` };
      })
      .handle({ name: 'Say.Meta', handler: (_req: unknown, ctx) => ({ id: ctx.id, who: ctx.metadata['x-who'] }) });
    const started = await mesh.start();
    assert.equal(started.services.length, 1);
    assert.equal(started.admin, undefined, 'a Mesh serves no admin unless asked');
    const res = await mesh.call<{ msg: string }>('go.mesh.srv.greeter', 'Say.Hello', { name: 'John' }, { timeout: '1s' });
    assert.deepEqual(res, { msg: 'Hello John' });
    const meta = await mesh.call<{ id: string; who: string }>('go.mesh.srv.greeter', 'Say.Meta', {}, { id: 'req-1', metadata: { 'X-Who': 'me' } });
    assert.deepEqual(meta, { id: 'req-1', who: 'me' });
    const err = await mesh.call('go.mesh.srv.greeter', 'Say.Hello', {}).catch((e: unknown) => e);
    assert.ok(err instanceof MeshError);
    assert.deepEqual({ id: err.id, code: err.code, detail: err.detail, status: err.status }, { id: 'go.mesh.srv.greeter', code: 400, detail: 'name: required', status: 'Bad Request' });
    const bad = await mesh.call('go.mesh.srv.greeter', 'Say.Hello', {}, { timeout: 'soon' }).catch((e: unknown) => e);
    assert.ok(bad instanceof MeshError && bad.code === 400 && /timeout: invalid duration "soon"/.test(bad.detail));
  });

  it('publishes and subscribes: JSON values, bytes as they are, queue groups', async () => {
    const mesh = new Mesh(quiet);
    meshes.push(mesh);
    const got: unknown[] = [];
    const sub = await mesh.subscribe<{ hello: string }>('go.mesh.topic.events', (event, msg) => void got.push([event, msg.header.a]), { queue: 'workers' });
    await mesh.publish('go.mesh.topic.events', { hello: 'world' }, { header: { a: 'b' } });
    await mesh.publish('go.mesh.topic.events', Buffer.from([1, 2, 3]));
    await waitFor(() => got.length === 2);
    assert.deepEqual(got[0], [{ hello: 'world' }, 'b']);
    assert.deepEqual([...((got[1] as [Uint8Array])[0])], [1, 2, 3]);
    await sub.unsubscribe();
    assert.deepEqual(await mesh.close(), { requestsCutOff: 0, connectionsCutOff: 0 });
  });

  it('takes Registry, Broker and Codec instances', async () => {
    const registry = new MemoryRegistry();
    const broker = new MemoryBroker();
    // A toy codec: JSON, reversed on the wire.
    const reversed: Codec = {
      contentType: 'application/x-reversed',
      encode: (value) => Buffer.from(JSON.stringify(value)).reverse(),
      decode: (bytes) => JSON.parse(Buffer.from(bytes).reverse().toString()) as unknown,
    };
    const mesh = new Mesh({ ...quiet, registry, broker, codecs: [reversed] });
    meshes.push(mesh);
    assert.equal(mesh.registry, registry);
    assert.equal(mesh.broker, broker);
    mesh.service({ name: 'go.mesh.srv.echo' }).handle('Echo.Call', (req: { n: number }) => ({ n: req.n + 1 }));
    const [record] = (await mesh.start()).services;
    assert.equal(record!.nodes[0]!.metadata.broker, 'memory');
    assert.equal((await registry.getService('go.mesh.srv.echo')).length, 1, 'registered in the given registry');
    // The codec on both sides, and on the wire: the raw answer is reversed JSON.
    assert.deepEqual(await mesh.call('go.mesh.srv.echo', 'Echo.Call', { n: 1 }, { contentType: 'application/x-reversed' }), { n: 2 });
    const node = record!.nodes[0]!;
    const raw = await request(`http://${node.address}:${node.port}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-reversed', 'mesh-service': 'go.mesh.srv.echo', 'mesh-endpoint': 'Echo.Call' },
      body: Buffer.from('{"n":41}').reverse(),
    });
    assert.equal(raw.headers['content-type'], 'application/x-reversed');
    assert.equal(await raw.body.text(), '}24:"n"{');
    const got: unknown[] = [];
    await mesh.subscribe('t', (e) => void got.push(e));
    await mesh.publish('t', { x: 1 }, { header: { 'content-type': 'application/x-reversed' } });
    await waitFor(() => got.length === 1);
    assert.deepEqual(got, [{ x: 1 }]);
    const unknownType = await mesh.call('go.mesh.srv.echo', 'Echo.Call', {}, { contentType: 'application/x-nope' }).catch((e: unknown) => e);
    assert.ok(unknownType instanceof MeshError && unknownType.code === 415);
  });
});

describe('engines load only when used', () => {
  /**
   * A child process records what it loads: ESM resolutions through a module.register() hook,
   * CommonJS ones (etcd3 is require()d) from require.cache. It builds a Mesh with the defaults
   * (local registry, http broker), serves and calls a service, and prints the engines it loaded.
   */
  function enginesLoaded(options: string): string[] {
    const dir = tempDir('mesh-lazy-');
    try {
      const script = join(dir.path, 'probe.mjs');
      writeFileSync(
        script,
        `
import { register, createRequire } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
const { port1, port2 } = new MessageChannel();
const resolved = [];
port1.on('message', (url) => resolved.push(url));
const hook = 'let port; export function initialize(d) { port = d.port; } export async function resolve(s, c, next) { const r = await next(s, c); port.postMessage(r.url); return r; }';
register('data:text/javascript,' + encodeURIComponent(hook), { data: { port: port2 }, transferList: [port2] });
const { Mesh } = await import(${JSON.stringify(join(ROOT, 'dist/src/index.js'))});
const mesh = new Mesh({ registryAddress: ${JSON.stringify(dir.path)}, logLevel: 'off', drainDelay: 0, ...${options} });
mesh.service({ name: 'go.mesh.srv.lazy' }).handle('Lazy.Call', () => ({ ok: true }));
await mesh.start();
const answer = await mesh.call('go.mesh.srv.lazy', 'Lazy.Call', {});
await mesh.close();
// A marker import last: the hook thread posts in order, so once the marker is in, every earlier resolution is.
const marker = 'data:text/javascript,0';
const markerSeen = new Promise((r) => port1.on('message', (url) => url === marker && r()));
await import(marker);
await markerSeen;
port1.close();
const loaded = [...resolved, ...Object.keys(createRequire(import.meta.url).cache)];
const engines = [...new Set(loaded.map((u) => /node_modules\\/(etcd3|nats|acme-client|@opentelemetry)\\//.exec(u)?.[1]).filter(Boolean))].sort();
process.stdout.write(JSON.stringify({ answer, engines, seen: loaded.length }));
`,
      );
      const r = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(r.status, 0, r.stderr);
      const out = JSON.parse(r.stdout) as { answer: unknown; engines: string[]; seen: number };
      assert.deepEqual(out.answer, { ok: true });
      assert.ok(out.seen > 50, `the probe saw the modules loaded (${out.seen})`);
      return out.engines;
    } finally {
      dir.cleanup();
    }
  }

  it('a Mesh with the defaults loads none of etcd3, nats, acme-client, @opentelemetry (tracing off)', () => {
    assert.deepEqual(enginesLoaded('{}'), []);
  });

  it('tracing on loads the OpenTelemetry packages', () => {
    // Nothing listens on the receiver's port: the export fails, the call does not.
    assert.deepEqual(enginesLoaded(`{ registry: 'memory', broker: 'memory', tracing: 'otlp', tracingAddress: 'http://127.0.0.1:9/v1/traces' }`), ['@opentelemetry']);
  });

  it('the probe sees an engine that is used (etcd3 with an etcd registry)', () => {
    // The etcd client connects lazily; the service start fails to register but the probe only
    // needs the module load. Use a memory registry for the calls and etcd only to load it.
    assert.deepEqual(enginesLoaded(`{ registry: 'memory', broker: 'memory', ...(() => { new Mesh({ registry: 'etcd', registryAddress: '127.0.0.1:1', logLevel: 'off' }).close(); return {}; })() }`), ['etcd3']);
  });
});
