/** The http broker's own behaviour: registration, the delivery endpoint, failures, two processes. */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { join } from 'node:path';
import { request } from 'undici';
import pino from 'pino';
import { BrokerUnavailableError } from '../../src/engines/broker/broker.js';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { DELIVERY_PATH, HEADER_FIELD, MISSING_FIELD, encodeHeader, decodeHeader } from '../../src/engines/broker/http/wire.js';
import { topicService } from '../../src/engines/broker/http/routes.js';
import { SECRET_FIELD } from '../../src/engines/broker/http/secret.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import type { Registry, Service } from '../../src/engines/registry/registry.js';
import { freePort, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { bytes, collector, httpBrokerPair, msg, silent } from '../fixtures/brokers.js';

/** The delivery secret of the brokers whose endpoint the tests post to themselves. */
const SECRET = 'broker-http-test-secret-0123456789';

/** A logger whose lines the test can read. */
function capture(): { logger: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  const out: string[] = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void out.push(s) });
  return { logger, lines: () => out.map((s) => JSON.parse(s) as Record<string, unknown>) };
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
      assert.equal(b[0]!.metadata.batch, '1', 'its endpoint takes several ids per delivery');
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

  it('topics and queues the registry name rules refuse are registered under a hashed name and still delivered', async () => {
    const { registry, pub, sub, close } = httpBrokerPair();
    try {
      const topics = ['café.orders', 'orders.*', 'a..b', `long.${'x'.repeat(245)}`]; // over the registry's 200, within the brokers' 256
      const got = new Map<string, ReturnType<typeof collector>>();
      for (const t of topics) {
        const c = collector();
        got.set(t, c);
        await sub.subscribe(t, c.handler);
      }
      const queued = collector();
      await sub.subscribe('orders.*', queued.handler, { queue: 'élan' });
      const names = (await registry.listServices()).map((s) => s.name).sort();
      for (const name of names) assert.match(name, /^topic:h\.[0-9a-f]{40}$/, name);
      assert.equal(new Set(names).size, topics.length, 'one registry service per topic');
      const versions = (await registry.getService(topicService('orders.*'))).map((s) => s.version).sort();
      assert.equal(versions.length, 2);
      assert.ok(versions.includes('broadcast'));
      assert.match(versions.find((v) => v !== 'broadcast')!, /^h\.[0-9a-f]{40}$/);
      for (const t of topics) await pub.publish(t, msg(`to ${t}`));
      for (const t of topics) await waitFor(() => got.get(t)!.texts().join() === `to ${t}`, 3000);
      await waitFor(() => queued.texts().join() === 'to orders.*', 3000);
      // A topic that fits the rules keeps its plain name.
      assert.equal(topicService('orders.created'), 'topic:orders.created');
    } finally {
      await close();
    }
  });

  it('refreshes its registrations before the TTL runs out', async () => {
    const registry = new MemoryRegistry();
    // The events: each registration of the topic, and a delete of it (what an expiry emits).
    let registrations = 0;
    const register = registry.register.bind(registry);
    registry.register = (service, options) => {
      if (service.name === 'topic:ttl') registrations++;
      return register(service, options);
    };
    const removed: string[] = [];
    const watcher = registry.watch((e) => void (e.action === 'delete' && removed.push(e.service.name)), { service: 'topic:ttl' });
    const broker = new HttpBroker({ registry, ttlMs: 300, refreshMs: 80, logger: silent });
    try {
      await broker.subscribe('ttl', () => undefined);
      // Twelve refreshes, 80 ms apart from the subscription on, take at least 960 ms (over three
      // TTLs): a registration nobody renewed would have expired, and the registry emitted its delete.
      await waitFor(() => registrations >= 13, 10_000);
      assert.equal((await registry.getService('topic:ttl')).length, 1, 'still registered after three TTLs');
      assert.deepEqual(removed, [], 'never expired in between');
      // A registration nobody refreshes expires (what a crashed subscriber leaves behind).
      await registry.register(deadNode('gone', 1), { ttlMs: 100 });
      await waitFor(async () => (await registry.getService('topic:t')).length === 0, 2000);
    } finally {
      watcher.stop();
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
  const broker = new HttpBroker({ registry, maxMessageBytes: 1024, secret: SECRET, logger: silent });
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

  /** A delivery to the endpoint, with the broker's secret unless `secret` says otherwise (null: none). */
  async function post(query: string, init: { method?: string; headers?: Record<string, string>; body?: Uint8Array | string; secret?: string | null } = {}) {
    const res = await request(`${base}${DELIVERY_PATH}${query}`, {
      method: (init.method ?? 'POST') as 'POST',
      headers: init.secret === null ? init.headers : { [SECRET_FIELD]: init.secret ?? SECRET, ...init.headers },
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

  it('answers 401 without the secret and 403 with another, before looking at anything else', async () => {
    await setup();
    const before = c.got.length;
    const none = await post(`?topic=nope&id=broker-nope`, { secret: null, body: 'x' });
    assert.equal(none.status, 401);
    assert.equal(none.text, '{"id":"go.mesh.broker","code":401,"detail":"a broker secret is required (Mesh-Broker-Secret)","status":"Unauthorized"}');
    const wrong = await post(`?topic=ep&id=${id}`, { secret: `${SECRET}x`, body: 'x' });
    assert.equal(wrong.status, 403);
    assert.equal(wrong.text, '{"id":"go.mesh.broker","code":403,"detail":"wrong broker secret","status":"Forbidden"}');
    assert.equal((await post(`?topic=ep&id=${id}`, { body: 'marker' })).status, 202);
    await waitFor(() => c.got.length > before);
    assert.deepEqual(c.texts().slice(before), ['marker']);
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
    const res = await request(`${base}${DELIVERY_PATH}?topic=ep&id=${id}`, { method: 'POST', headers: { [SECRET_FIELD]: SECRET }, body: stream }).catch((e: Error) => e);
    // the server may cut the upload before the client reads the answer; if it reads one, it is 413
    if (!(res instanceof Error)) {
      assert.equal(res.statusCode, 413);
      await res.body.dump();
    }
    // a good delivery last: once it is handed over, a refused one would have been too
    assert.equal((await post(`?topic=ep&id=${id}`, { body: 'marker' })).status, 202);
    await waitFor(() => c.got.length > before);
    assert.equal(c.got.length, before + 1);
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
    const log = capture();
    const { registry, pub, sub, close } = httpBrokerPair({ pub: { logger: log.logger } });
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
      await close();
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
    const { registry, pub, sub, close } = httpBrokerPair();
    try {
      const c = collector();
      await sub.subscribe('t', c.handler, { queue: 'q' });
      await registry.register(deadNode('broker-dead-1', await freePort(), 'q'));
      await registry.register(deadNode('broker-dead-2', await freePort(), 'q'));
      for (let i = 0; i < 20; i++) await pub.publish('t', msg(`m${i}`));
      await waitFor(() => c.got.length === 20);
      assert.equal(new Set(c.texts()).size, 20);
    } finally {
      await close();
    }
  });
});

/** A plain HTTP server standing in for subscriber endpoints: records each delivery, answers 202. */
async function recordingEndpoint(): Promise<{ port: number; got: Array<{ ids: string[]; topic: string; header: string; body: string }>; close(): Promise<void> }> {
  const got: Array<{ ids: string[]; topic: string; header: string; body: string }> = [];
  const server = createHttpServer({ maxHeaderSize: 64 * 1024 }, (req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      got.push({
        ids: url.searchParams.getAll('id'),
        topic: url.searchParams.get('topic') ?? '',
        header: String(req.headers[HEADER_FIELD]),
        body: Buffer.concat(chunks).toString(),
      });
      res.statusCode = 202;
      res.setHeader('content-length', 0);
      res.end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as { port: number }).port,
    got,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function broadcastNodes(port: number, ids: string[], batch: boolean): Service {
  return {
    name: 'topic:t',
    version: 'broadcast',
    metadata: {},
    endpoints: [],
    nodes: ids.map((id) => ({ id, address: '127.0.0.1', port, metadata: batch ? { broker: 'http', batch: '1' } : { broker: 'http' } })),
  };
}

/** A registry that counts getService calls (everything else is the wrapped one's). */
function counting(registry: Registry): { registry: Registry; lookups: () => number } {
  let n = 0;
  const wrapped: Registry = Object.assign(Object.create(registry) as Registry, {
    getService: (name: string) => {
      n++;
      return registry.getService(name);
    },
  });
  return { registry: wrapped, lookups: () => n };
}

describe('http broker: batched deliveries', () => {
  it('sends one request per endpoint for its broadcast subscriptions, one per node to endpoints without batches', async () => {
    const ep = await recordingEndpoint();
    const registry = new MemoryRegistry();
    const pub = new HttpBroker({ registry, logger: silent });
    try {
      await registry.register(broadcastNodes(ep.port, ['broker-b1', 'broker-b2', 'broker-b3'], true));
      await registry.register(broadcastNodes(ep.port, ['broker-old1', 'broker-old2'], false));
      await pub.publish('t', msg('hello', { k: 'v' }));
      assert.equal(ep.got.length, 3, 'one batch and two single deliveries');
      const batches = ep.got.map((g) => g.ids.slice().sort().join(',')).sort();
      assert.deepEqual(batches, ['broker-b1,broker-b2,broker-b3', 'broker-old1', 'broker-old2']);
      for (const g of ep.got) {
        assert.equal(g.topic, 't');
        assert.equal(g.body, 'hello');
        assert.deepEqual(decodeHeader(g.header), { k: 'v' });
      }
    } finally {
      await pub.close();
      await registry.close();
      await ep.close();
    }
  });

  it('splits a batch whose ids would make the request head too long', async () => {
    const ep = await recordingEndpoint();
    const registry = new MemoryRegistry();
    const pub = new HttpBroker({ registry, logger: silent });
    try {
      const ids = Array.from({ length: 600 }, (_, i) => `broker-${String(i).padStart(4, '0')}-${'x'.repeat(40)}`);
      await registry.register(broadcastNodes(ep.port, ids, true));
      await pub.publish('t', msg('many'));
      assert.ok(ep.got.length >= 2, `${ep.got.length} requests`);
      assert.deepEqual(ep.got.flatMap((g) => g.ids).sort(), ids.slice().sort(), 'every id exactly once');
    } finally {
      await pub.close();
      await registry.close();
      await ep.close();
    }
  });

  it('the endpoint hands a batch to every node named (each subscription of a node its own copy)', async () => {
    const registry = new MemoryRegistry();
    const broker = new HttpBroker({ registry, secret: SECRET, logger: silent });
    try {
      const a = collector();
      const b = collector();
      await broker.subscribe('batch', a.handler);
      await broker.subscribe('batch', b.handler);
      // One node for both subscriptions of this process to the topic.
      const ids = (await registry.getService('topic:batch'))[0]!.nodes.map((n) => n.id);
      assert.equal(ids.length, 1);
      // A second node at the same endpoint (another broker's registration of this topic, say).
      const c = collector();
      await broker.subscribe('batch', c.handler, { queue: 'q' });
      ids.push((await registry.getService('topic:batch')).find((s) => s.version === 'q')!.nodes[0]!.id);
      const { address, port } = broker.endpoint!;
      const post = async (query: string) => {
        const res = await request(`http://${address}:${port}${DELIVERY_PATH}${query}`, {
          method: 'POST',
          headers: { [HEADER_FIELD]: encodeHeader({ h: '1' }), [SECRET_FIELD]: SECRET },
          body: 'both',
        });
        return { status: res.statusCode, missing: res.headers[MISSING_FIELD], text: await res.body.text() };
      };
      const ok = await post(`?topic=batch&id=${ids[0]}&id=${ids[1]}`);
      assert.equal(ok.status, 202);
      assert.equal(ok.missing, undefined);
      await waitFor(() => a.got.length === 1 && b.got.length === 1 && c.got.length === 1);
      assert.deepEqual(a.texts(), ['both']);
      assert.deepEqual(c.texts(), ['both']);
      assert.deepEqual(b.texts(), ['both']);
      assert.deepEqual(a.got[0]!.header, { h: '1' });
      assert.notEqual(a.got[0]!.body.buffer, b.got[0]!.body.buffer, 'separate bodies');
      assert.notEqual(a.got[0]!.header, b.got[0]!.header, 'separate headers');

      // one unknown id: the known one still gets it; 404 names the unknown one
      const partly = await post(`?topic=batch&id=${ids[0]}&id=broker-nope`);
      assert.equal(partly.status, 404);
      assert.equal(partly.missing, 'broker-nope');
      assert.match(JSON.parse(partly.text).detail, /broker-nope/);
      await waitFor(() => a.got.length + b.got.length === 4);
      assert.deepEqual([a.got.length, b.got.length, c.got.length], [2, 2, 1]);

      const none = await post(`?topic=batch&id=broker-x&id=broker-y`);
      assert.equal(none.status, 404);
      assert.equal(none.missing, 'broker-x,broker-y');
      assert.equal((await post(`?topic=batch&id=${ids[0]}&id=`)).status, 400, 'an empty id');
      // a good delivery to the first id last: once it is in, a refused one would have been too
      assert.equal((await post(`?topic=batch&id=${ids[0]}`)).status, 202);
      await waitFor(() => a.got.length === 3 && b.got.length === 3);
      assert.deepEqual([a.got.length, b.got.length, c.got.length], [3, 3, 1]);
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('logs a failed delivery only for the subscriptions of a batch the endpoint did not know', async () => {
    const log = capture();
    const { registry, pub, sub, close } = httpBrokerPair({ pub: { logger: log.logger } });
    try {
      const c1 = collector();
      const c2 = collector();
      await sub.subscribe('t', c1.handler);
      await sub.subscribe('t', c2.handler);
      const { address, port } = sub.endpoint!;
      await registry.register({
        name: 'topic:t',
        version: 'broadcast',
        metadata: {},
        endpoints: [],
        nodes: [{ id: 'broker-ghost', address, port, metadata: { broker: 'http', batch: '1' } }],
      });
      await pub.publish('t', msg('one'));
      await waitFor(() => c1.got.length === 1 && c2.got.length === 1);
      const warnings = log.lines().filter((l) => l.level === 40);
      assert.deepEqual(warnings.map((l) => l.node), ['broker-ghost']);
    } finally {
      await close();
    }
  });
});

describe('http broker: the subscriber list a publisher keeps', () => {
  it('reads the registry once per topic while nothing changes; lookupCacheMs 0 reads it per message', async () => {
    const memory = new MemoryRegistry();
    const { registry, lookups } = counting(memory);
    const sub = new HttpBroker({ registry: memory, logger: silent });
    const pub = new HttpBroker({ registry, logger: silent });
    const uncached = counting(memory);
    const pub0 = new HttpBroker({ registry: uncached.registry, lookupCacheMs: 0, logger: silent });
    try {
      const c = collector();
      await sub.subscribe('t', c.handler);
      for (let i = 0; i < 20; i++) await pub.publish('t', msg(`m${i}`));
      assert.equal(lookups(), 1);
      for (let i = 0; i < 5; i++) await pub0.publish('t', msg(`u${i}`));
      assert.equal(uncached.lookups(), 5);
      await waitFor(() => c.got.length === 25);
      // another subscription of the same process to the topic changes nothing in the registry (the
      // process's node stands for all of them): no new read, and it gets the next message
      const d = collector();
      await sub.subscribe('t', d.handler);
      await pub.publish('t', msg('after'));
      assert.equal(lookups(), 1);
      await waitFor(() => d.got.length === 1);
      // a change to the topic (a queue group's node) drops the list: the next message reads again
      const e = collector();
      await sub.subscribe('t', e.handler, { queue: 'q' });
      await pub.publish('t', msg('queued'));
      assert.equal(lookups(), 2);
      await waitFor(() => e.got.length === 1);
      // publishing to nobody is not kept: a subscriber that comes later is found at once
      await pub.publish('empty', msg('void'));
      await pub.publish('empty', msg('void'));
      assert.equal(lookups(), 4);
    } finally {
      await pub.close();
      await pub0.close();
      await sub.close();
      await memory.close();
    }
  });

  it('sees a subscriber another process adds within the watch latency, and stops sending to one it removes', async () => {
    const dir = tempDir('mesh-broker-cache-');
    // Two registry handles on one directory, as two processes would have (watch: 50 ms polls).
    const r1 = new LocalRegistry(dir.path);
    const r2 = new LocalRegistry(dir.path);
    const log = capture();
    const pub = new HttpBroker({ registry: r1, logger: log.logger });
    const sub = new HttpBroker({ registry: r2, logger: silent });
    try {
      const first = collector();
      await sub.subscribe('t', first.handler);
      await pub.publish('t', msg('m0'));
      await waitFor(() => first.got.length === 1);

      const later = collector();
      const s = await sub.subscribe('t', later.handler);
      const t0 = Date.now();
      let n = 0;
      await waitFor(
        async () => {
          await pub.publish('t', msg(`probe-${n++}`));
          return later.got.length > 0;
        },
        2000,
        10,
      ).catch(() => assert.fail('the new subscriber was not seen within 2 s'));
      const seenAfter = Date.now() - t0;
      assert.ok(seenAfter < 1000, `seen after ${seenAfter} ms`);

      await s.unsubscribe();
      const gotBefore = later.got.length;
      // No wait: both subscriptions share this process's registry node, so first getting the
      // messages below is the proof that later was skipped (not merely not reached yet).
      const linesBefore = log.lines().length;
      for (let i = 0; i < 5; i++) await pub.publish('t', msg(`after-${i}`));
      await waitFor(() => first.got.filter((m) => Buffer.from(m.body).toString().startsWith('after-')).length === 5);
      assert.equal(later.got.length, gotBefore, 'the removed subscriber gets nothing');
      assert.deepEqual(log.lines().slice(linesBefore).filter((l) => l.level >= 40), [], 'no delivery to the removed subscription is even tried');
    } finally {
      await pub.close();
      await sub.close();
      await r1.close();
      await r2.close();
      dir.cleanup();
    }
  });

  it('drops a subscriber whose registration expires (a crashed process)', async () => {
    const log = capture();
    const { registry, pub, sub, close } = httpBrokerPair({ pub: { logger: log.logger } });
    try {
      const c = collector();
      await sub.subscribe('t', c.handler);
      await registry.register(deadNode('broker-crashed', await freePort()), { ttlMs: 150 });
      await pub.publish('t', msg('one'));
      assert.ok(log.lines().some((l) => l.node === 'broker-crashed'));
      await waitFor(async () => (await registry.getService('topic:t'))[0]!.nodes.length === 1, 2000);
      const linesBefore = log.lines().length;
      await pub.publish('t', msg('two'));
      await waitFor(() => c.got.length === 2);
      assert.equal(log.lines().slice(linesBefore).filter((l) => l.node === 'broker-crashed').length, 0);
    } finally {
      await close();
    }
  });

  it('sees its own new subscription at once', async () => {
    const dir = tempDir('mesh-broker-own-');
    const r1 = new LocalRegistry(dir.path);
    const r2 = new LocalRegistry(dir.path);
    const pub = new HttpBroker({ registry: r1, logger: silent });
    const other = new HttpBroker({ registry: r2, logger: silent });
    try {
      const remote = collector();
      await other.subscribe('t', remote.handler);
      await pub.publish('t', msg('cached'));
      const own = collector();
      await pub.subscribe('t', own.handler);
      await pub.publish('t', msg('right away'));
      await waitFor(() => own.got.length === 1 && remote.got.length === 2);
      assert.deepEqual(own.texts(), ['right away']);
    } finally {
      await pub.close();
      await other.close();
      await r1.close();
      await r2.close();
      dir.cleanup();
    }
  });
});

describe('http broker: helpers', () => {
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
