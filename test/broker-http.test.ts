/** The http broker's own behaviour: registration, the delivery endpoint, failures, two processes. */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { join } from 'node:path';
import { request } from 'undici';
import pino from 'pino';
import { BrokerUnavailableError, type Message } from '../src/broker/broker.js';
import { HttpBroker, DELIVERY_PATH, HEADER_FIELD, encodeHeader, decodeHeader, splitHostPort } from '../src/broker/http.js';
import { MemoryRegistry } from '../src/registry/memory.js';
import { LocalRegistry } from '../src/registry/local.js';
import type { Registry, Service } from '../src/registry/registry.js';
import { freePort, ROOT, sleep, startProcess, tempDir, waitFor, type RunningProcess } from './helpers.js';

const silent = pino({ level: 'silent' });

/** A logger whose lines the test can read. */
function capture(): { logger: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  const out: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void out.push(s) });
  return { logger, lines: () => out.map((s) => JSON.parse(s) as Record<string, unknown>) };
}

const bytes = (s: string) => new Uint8Array(Buffer.from(s));
const msg = (s: string, header: Record<string, string> = {}): Message => ({ header, body: bytes(s) });

function collector() {
  const got: Message[] = [];
  return { got, texts: () => got.map((m) => Buffer.from(m.body).toString()), handler: (m: Message) => void got.push(m) };
}

function deadNode(id: string, port: number, queue?: string): Service {
  return {
    name: 'topic:t',
    version: queue ?? 'broadcast',
    metadata: {},
    endpoints: [],
    nodes: [{ id, address: '127.0.0.1', port, metadata: queue ? { broker: 'http', queue } : { broker: 'http' } }],
  };
}

describe('http broker: registration', () => {
  it('registers topic:<topic> per subscription, version = queue or broadcast, and deregisters', async () => {
    const registry = new MemoryRegistry();
    const broker = new HttpBroker({ registry, logger: silent });
    try {
      assert.equal(broker.endpoint, undefined, 'no listener before the first subscribe');
      await broker.subscribe('orders', () => undefined);
      const queued = await broker.subscribe('orders', () => undefined, { queue: 'billing' });
      const ep = broker.endpoint!;
      const versions = await registry.getService('topic:orders');
      const byVersion = new Map(versions.map((s) => [s.version, s]));
      assert.deepEqual([...byVersion.keys()].sort(), ['billing', 'broadcast']);
      const b = byVersion.get('broadcast')!.nodes;
      const q = byVersion.get('billing')!.nodes;
      assert.equal(b.length, 1);
      assert.equal(q.length, 1);
      assert.match(b[0]!.id, /^broker-/);
      assert.notEqual(b[0]!.id, q[0]!.id);
      assert.equal(b[0]!.address, ep.address);
      assert.equal(b[0]!.port, ep.port);
      assert.equal(b[0]!.metadata.broker, 'http');
      assert.equal(b[0]!.metadata.queue, undefined);
      assert.equal(q[0]!.metadata.queue, 'billing');
      await queued.unsubscribe();
      assert.deepEqual((await registry.getService('topic:orders')).map((s) => s.version), ['broadcast']);
      await broker.subscribe('other', () => undefined);
      await broker.close();
      assert.deepEqual(await registry.getService('topic:orders'), []);
      assert.deepEqual(await registry.getService('topic:other'), []);
      await assert.rejects(broker.publish('orders', msg('x')), BrokerUnavailableError);
      await assert.rejects(broker.subscribe('orders', () => undefined), BrokerUnavailableError);
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('refreshes its registrations before the TTL runs out', async () => {
    const registry = new MemoryRegistry();
    const broker = new HttpBroker({ registry, ttlMs: 300, refreshMs: 80, logger: silent });
    try {
      await broker.subscribe('ttl', () => undefined);
      await sleep(900);
      assert.equal((await registry.getService('topic:ttl')).length, 1, 'still registered after three TTLs');
      // A registration nobody refreshes expires (what a crashed subscriber leaves behind).
      await registry.register(deadNode('gone', 1), { ttlMs: 100 });
      await waitFor(async () => (await registry.getService('topic:t')).length === 0, 2000);
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('advertises the given address', async () => {
    const registry = new MemoryRegistry();
    const broker = new HttpBroker({ registry, advertise: 'mesh.example:4000', logger: silent });
    try {
      await broker.subscribe('adv', () => undefined);
      const [s] = await registry.getService('topic:adv');
      assert.equal(s!.nodes[0]!.address, 'mesh.example');
      assert.equal(s!.nodes[0]!.port, 4000);
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('rejects subscribe with BrokerUnavailableError when the registry fails', async () => {
    const registry = new MemoryRegistry();
    const failing: Registry = Object.assign(Object.create(registry) as Registry, {
      register: async () => {
        throw new Error('disk full');
      },
    });
    const broker = new HttpBroker({ registry: failing, logger: silent });
    try {
      await assert.rejects(broker.subscribe('t', () => undefined), (err: Error) => {
        assert.ok(err instanceof BrokerUnavailableError);
        assert.match(err.message, /disk full/);
        return true;
      });
    } finally {
      await broker.close();
      await registry.close();
    }
  });
});

describe('http broker: the delivery endpoint', () => {
  const registry = new MemoryRegistry();
  const broker = new HttpBroker({ registry, maxMessageBytes: 1024, logger: silent });
  const c = collector();
  let base = '';
  let id = '';
  after(async () => {
    await broker.close();
    await registry.close();
  });

  async function setup(): Promise<void> {
    if (base) return;
    await broker.subscribe('ep', c.handler);
    const ep = broker.endpoint!;
    base = `http://${ep.address}:${ep.port}`;
    id = (await registry.getService('topic:ep'))[0]!.nodes[0]!.id;
  }

  async function post(query: string, init: { method?: string; headers?: Record<string, string>; body?: Uint8Array | string } = {}) {
    const res = await request(`${base}${DELIVERY_PATH}${query}`, {
      method: (init.method ?? 'POST') as 'POST',
      headers: init.headers,
      body: init.body,
    });
    const text = await res.body.text();
    return { status: res.statusCode, text, headers: res.headers };
  }

  it('accepts a well-formed delivery and hands it to the handler', async () => {
    await setup();
    const r = await post(`?topic=ep&id=${id}`, { headers: { [HEADER_FIELD]: encodeHeader({ a: 'b', u: 'ü✓' }) }, body: bytes('hi') });
    assert.equal(r.status, 202);
    await waitFor(() => c.got.length === 1);
    assert.deepEqual(c.got[0]!.header, { a: 'b', u: 'ü✓' });
    assert.deepEqual(c.texts(), ['hi']);
  });

  it('answers 405 to anything but POST', async () => {
    await setup();
    for (const method of ['GET', 'PUT', 'DELETE']) {
      const r = await post(`?topic=ep&id=${id}`, { method });
      assert.equal(r.status, 405, method);
      assert.equal(r.headers.allow, 'POST');
      assert.equal(JSON.parse(r.text).code, 405);
    }
  });

  it('answers 400 to bad input', async () => {
    await setup();
    assert.equal((await post(`?id=${id}`, { body: 'x' })).status, 400, 'no topic');
    assert.equal((await post(`?topic=ep`, { body: 'x' })).status, 400, 'no id');
    assert.equal((await post(`?topic=ep&id=${id}`, { headers: { [HEADER_FIELD]: '{not json' }, body: 'x' })).status, 400);
    assert.equal((await post(`?topic=ep&id=${id}`, { headers: { [HEADER_FIELD]: '[1,2]' }, body: 'x' })).status, 400);
    assert.equal((await post(`?topic=ep&id=${id}`, { headers: { [HEADER_FIELD]: '{"n":1}' }, body: 'x' })).status, 400);
    const r = await post(`?topic=ep&id=${id}`, { headers: { [HEADER_FIELD]: '"str"' }, body: 'x' });
    assert.equal(r.status, 400);
    assert.deepEqual(Object.keys(JSON.parse(r.text)), ['id', 'code', 'detail', 'status']);
  });

  it('answers 404 to an unknown subscription, topic or path', async () => {
    await setup();
    assert.equal((await post(`?topic=ep&id=broker-nope`, { body: 'x' })).status, 404);
    assert.equal((await post(`?topic=other&id=${id}`, { body: 'x' })).status, 404);
    const res = await request(`${base}/somewhere`, { method: 'POST', body: 'x' });
    await res.body.dump();
    assert.equal(res.statusCode, 404);
  });

  it('answers 413 to a body over the limit and never delivers it', async () => {
    await setup();
    const before = c.got.length;
    assert.equal((await post(`?topic=ep&id=${id}`, { body: new Uint8Array(2048) })).status, 413);
    // chunked (no Content-Length): caught while reading
    const stream = Readable.from((function* () {
      for (let i = 0; i < 4; i++) yield Buffer.alloc(512);
    })());
    const res = await request(`${base}${DELIVERY_PATH}?topic=ep&id=${id}`, { method: 'POST', body: stream }).catch((e: Error) => e);
    // the server may cut the upload before the client reads the answer; if it reads one, it is 413
    if (!(res instanceof Error)) {
      assert.equal(res.statusCode, 413);
      await res.body.dump();
    }
    await sleep(50);
    assert.equal(c.got.length, before);
  });

  it('refuses to publish a body over its own limit', async () => {
    await assert.rejects(broker.publish('ep', { header: {}, body: new Uint8Array(2048) }), /over the limit/);
  });
});

describe('http broker: publishing when things fail', () => {
  it('rejects with BrokerUnavailableError when the registry lookup fails', async () => {
    const registry = new MemoryRegistry();
    const failing: Registry = Object.assign(Object.create(registry) as Registry, {
      getService: async () => {
        throw new Error('registry is down');
      },
    });
    const broker = new HttpBroker({ registry: failing, logger: silent });
    try {
      await assert.rejects(broker.publish('t', msg('x')), (err: Error) => err instanceof BrokerUnavailableError && /registry is down/.test(err.message));
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('delivers to live broadcast subscribers and logs the dead one', async () => {
    const registry = new MemoryRegistry();
    const log = capture();
    const pub = new HttpBroker({ registry, logger: log.logger });
    const sub = new HttpBroker({ registry, logger: silent });
    try {
      const c = collector();
      await sub.subscribe('t', c.handler);
      await registry.register(deadNode('broker-dead', await freePort()));
      await pub.publish('t', msg('one'));
      await waitFor(() => c.got.length === 1);
      const warn = log.lines().find((l) => l.node === 'broker-dead');
      assert.ok(warn, 'the failed delivery is logged');
      assert.equal(warn.level, 40);
    } finally {
      await pub.close();
      await sub.close();
      await registry.close();
    }
  });

  it('bounds a delivery to a subscriber that never answers', async () => {
    const sockets = new Set<Socket>();
    const hang = createServer((s) => void sockets.add(s)); // accepts, reads nothing, answers nothing
    hang.listen(0, '127.0.0.1');
    await once(hang, 'listening');
    const port = (hang.address() as { port: number }).port;
    const registry = new MemoryRegistry();
    const log = capture();
    const pub = new HttpBroker({ registry, deliveryTimeoutMs: 300, logger: log.logger });
    try {
      await registry.register(deadNode('broker-hangs', port));
      const t0 = Date.now();
      await pub.publish('t', msg('x'));
      const took = Date.now() - t0;
      assert.ok(took >= 250 && took < 3000, `publish took ${took} ms`);
      assert.ok(log.lines().some((l) => l.node === 'broker-hangs'));
    } finally {
      await pub.close();
      await registry.close();
      for (const s of sockets) s.destroy();
      hang.close();
    }
  });

  it('tries another node of a queue group when one fails', async () => {
    const registry = new MemoryRegistry();
    const pub = new HttpBroker({ registry, logger: silent });
    const sub = new HttpBroker({ registry, logger: silent });
    try {
      const c = collector();
      await sub.subscribe('t', c.handler, { queue: 'q' });
      await registry.register(deadNode('broker-dead-1', await freePort(), 'q'));
      await registry.register(deadNode('broker-dead-2', await freePort(), 'q'));
      for (let i = 0; i < 20; i++) await pub.publish('t', msg(`m${i}`));
      await waitFor(() => c.got.length === 20);
      assert.equal(new Set(c.texts()).size, 20);
    } finally {
      await pub.close();
      await sub.close();
      await registry.close();
    }
  });
});

describe('http broker: helpers', () => {
  it('splits host:port forms', () => {
    assert.deepEqual(splitHostPort('127.0.0.1:80', 0), { host: '127.0.0.1', port: 80 });
    assert.deepEqual(splitHostPort(':80', 0), { host: '', port: 80 });
    assert.deepEqual(splitHostPort('localhost', 9), { host: 'localhost', port: 9 });
    assert.deepEqual(splitHostPort('[::1]:8080', 0), { host: '::1', port: 8080 });
    assert.deepEqual(splitHostPort('::1', 7), { host: '::1', port: 7 });
    assert.throws(() => splitHostPort('h:99999', 0), /port/);
    assert.throws(() => splitHostPort('h:x', 0), /port/);
  });

  it('encodes headers as ASCII JSON and decodes them back', () => {
    const h = { a: 'ü✓😀', 'x\ny': 'line\r\nbreak', del: '\u007f' };
    const v = encodeHeader(h);
    assert.match(v, /^[\x20-\x7e]*$/);
    assert.deepEqual(decodeHeader(v), h);
  });
});

describe('http broker: two processes over one local registry directory', () => {
  const FIXTURE = join(ROOT, 'test/fixtures/broker-peer.ts');
  const env = { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import tsx`.trim() };
  const peer = (args: string[]): RunningProcess => startProcess(args, env, FIXTURE);

  function messages(p: RunningProcess): Array<{ topic: string; header: Record<string, string>; body: string }> {
    return p
      .output()
      .split('\n')
      .filter((l) => l.startsWith('MSG '))
      .map((l) => JSON.parse(l.slice(4)));
  }

  it('publishes here, receives there; publishes there, receives here; deregisters on exit', async () => {
    const dir = tempDir('mesh-broker-2p-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, logger: silent });
    const procs: RunningProcess[] = [];
    try {
      const a = peer(['--registry', dir.path, '--topic', 'events']);
      const b = peer(['--registry', dir.path, '--topic', 'events', '--queue', 'workers']);
      procs.push(a, b);
      await Promise.all([a.waitForOutput(/READY \S+/, 20_000), b.waitForOutput(/READY \S+/, 20_000)]);
      const body = new Uint8Array([0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff]);
      for (let i = 0; i < 5; i++) await broker.publish('events', { header: { seq: String(i), 'Content-Type': 'application/x-bin' }, body });
      await waitFor(() => messages(a).length === 5 && messages(b).length === 5, 10_000);
      for (const m of [...messages(a), ...messages(b)]) {
        assert.equal(m.topic, 'events');
        assert.equal(m.header['Content-Type'], 'application/x-bin');
        assert.deepEqual([...Buffer.from(m.body, 'base64')], [...body]);
      }
      assert.deepEqual(messages(a).map((m) => m.header.seq).sort(), ['0', '1', '2', '3', '4']);

      // the other way round: a short-lived peer publishes, this process subscribes
      const here = collector();
      await broker.subscribe('replies', here.handler);
      const p = peer(['--registry', dir.path, '--topic', 'replies', '--publish', '3']);
      procs.push(p);
      await p.waitForOutput(/PUBLISHED 3/, 20_000);
      await waitFor(() => here.got.length === 3);
      assert.deepEqual(here.texts().sort(), ['peer-0', 'peer-1', 'peer-2']);
      assert.equal(here.got[0]!.header.From, 'peer');

      // a clean exit deregisters; a killed subscriber leaves a stale node that publish survives
      await a.stop('SIGTERM');
      assert.match(a.output(), /CLOSED/);
      assert.deepEqual((await registry.getService('topic:events')).map((s) => s.version), ['workers']);
      await b.stop('SIGKILL');
      assert.equal((await registry.getService('topic:events')).length, 1, 'stale registration stays until its TTL');
      await broker.publish('events', msg('to a dead process'));
    } finally {
      await Promise.all(procs.map((p) => p.stop('SIGKILL')));
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});
