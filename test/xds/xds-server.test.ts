/**
 * The ADS protocol of mesh's xDS server, in process (a memory registry, the server on port 0, a
 * raw ADS stream): state of the world per type, wildcard for clusters and listeners, named
 * subscriptions for endpoints and routes, ACK and NACK by nonce, stale nonces ignored, and a
 * registry change pushed only to the types whose version changed.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { XdsControlPlane } from '../../src/xds/control-plane.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import type { Service } from '../../src/engines/registry/registry.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { waitFor } from '../helpers.js';

const svc = (name: string, nodes: Array<[string, number, Record<string, string>?]>): Service => ({
  name,
  version: '1',
  metadata: {},
  endpoints: [],
  nodes: nodes.map(([id, port, metadata]) => ({ id, address: '127.0.0.1', port, metadata: metadata ?? {} })),
});

describe('the ADS server of mesh xds', () => {
  const registry = new MemoryRegistry();
  const stats = new StatsStore();
  const lines: string[] = [];
  const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
  const plane = new XdsControlPlane({ registry, settings: resolveSettings(undefined, undefined, 'round_robin', true), stats, log: logging.get('server') });
  let address = '';
  const stat = (name: string) => stats.list().find((s) => s.name === name)?.value ?? 0;

  before(async () => {
    await registry.register(svc('alpha', [['a1', 1001]]));
    await registry.register(svc('beta', [['b1', 2001]]));
    address = `127.0.0.1:${await plane.start('127.0.0.1', 0)}`;
  });
  after(async () => {
    await plane.close();
    await registry.close();
  });

  it('clusters and listeners by wildcard, endpoints and routes by name; an ACK gets no answer', async () => {
    const probe = new AdsProbe(address, 'probe-1');
    try {
      const cds = await probe.request(TYPE_URLS.cluster);
      assert.equal(cds.type_url, TYPE_URLS.cluster);
      assert.equal(cds.resources.length, 2);
      assert.ok(cds.resources.every((r) => r.type_url === TYPE_URLS.cluster));
      const lds = await probe.request(TYPE_URLS.listener);
      assert.equal(lds.resources.length, 2);
      const eds = await probe.request(TYPE_URLS.endpoint, ['beta', 'missing']);
      assert.equal(eds.resources.length, 1);
      const cla = probe.protos.root.lookupType('envoy.config.endpoint.v3.ClusterLoadAssignment').decode(eds.resources[0]!.value) as unknown as { cluster_name: string };
      assert.equal(cla.cluster_name, 'beta');
      const rds = await probe.request(TYPE_URLS.route, ['alpha']);
      assert.equal(rds.resources.length, 1);
      assert.notEqual(eds.version_info, rds.version_info);

      // ACKs of all four, then a new subscription: its answer is the only one.
      for (const t of [TYPE_URLS.cluster, TYPE_URLS.listener, TYPE_URLS.endpoint]) probe.send(t, t === TYPE_URLS.endpoint ? ['beta', 'missing'] : []);
      const count = probe.responses.length;
      const more = await probe.request(TYPE_URLS.route, ['alpha', 'beta']);
      assert.equal(more.resources.length, 2);
      assert.equal(probe.responses.length, count + 1);
      // Names dropped (as a client going away drops them all): no answer. The clusters named
      // after a wildcard: none either (the wildcard held them).
      probe.send(TYPE_URLS.route, ['beta']);
      probe.send(TYPE_URLS.route, []);
      probe.send(TYPE_URLS.listener, ['alpha']);
      const again = await probe.request(TYPE_URLS.endpoint, ['alpha']);
      assert.equal(again.resources.length, 1);
      assert.equal(probe.responses.length, count + 2);
      assert.equal(stat('xds.clients_connected'), 1);
    } finally {
      probe.close();
    }
    await waitFor(() => stat('xds.clients_connected') === 0);
  });

  it('a registry change pushes only the types whose version changed, to the streams that see them', async () => {
    const probe = new AdsProbe(address, 'probe-2');
    try {
      const cds = await probe.request(TYPE_URLS.cluster);
      const eds = await probe.request(TYPE_URLS.endpoint, ['alpha']);
      await probe.request(TYPE_URLS.route, ['beta']);
      for (const t of [TYPE_URLS.cluster, TYPE_URLS.route]) probe.send(t, t === TYPE_URLS.route ? ['beta'] : []);
      probe.send(TYPE_URLS.endpoint, ['alpha']);
      const count = probe.responses.length;

      // A node of alpha changes its weight: alpha's endpoints change, nothing else.
      const push = probe.next(TYPE_URLS.endpoint);
      await registry.register(svc('alpha', [['a1', 1001, { weight: '5' }]]));
      const pushed = await push;
      assert.notEqual(pushed.version_info, eds.version_info);
      probe.send(TYPE_URLS.endpoint, ['alpha']);
      // A new service: a new cluster (wildcard) and no endpoint push (not subscribed).
      const cdsPush = probe.next(TYPE_URLS.cluster);
      await registry.register(svc('gamma', [['g1', 3001]]));
      const cds2 = await cdsPush;
      assert.notEqual(cds2.version_info, cds.version_info);
      assert.equal(cds2.resources.length, 3);
      assert.deepEqual(
        probe.responses.slice(count).map((r) => r.type_url),
        [TYPE_URLS.endpoint, TYPE_URLS.cluster],
      );
    } finally {
      probe.close();
    }
  });

  it('a NACK keeps the accepted version: counted, logged once with the node id and error, not resent until the content changes', async () => {
    const probe = new AdsProbe(address, 'probe-nack');
    try {
      const nacks = stat('xds.nacks');
      const first = await probe.request(TYPE_URLS.endpoint, ['alpha']);
      probe.send(TYPE_URLS.endpoint, ['alpha']); // ACK
      const push = probe.next(TYPE_URLS.endpoint);
      await registry.register(svc('alpha', [['a1', 1001, { weight: '6' }]]));
      const rejected = await push;
      const count = probe.responses.length;
      probe.send(TYPE_URLS.endpoint, ['alpha'], { ...rejected, version_info: first.version_info }, 'weight 6 is too heavy');
      await waitFor(() => stat('xds.nacks') === nacks + 1);
      // A stale nonce (the first response's) is ignored, NACK or not.
      probe.send(TYPE_URLS.endpoint, ['alpha'], first, 'stale');
      // The same rejected content is not sent again: the next endpoint answer is for the next change.
      const next = probe.next(TYPE_URLS.endpoint);
      await registry.register(svc('alpha', [['a1', 1001, { weight: '7' }]]));
      const changed = await next;
      assert.notEqual(changed.version_info, rejected.version_info);
      assert.equal(probe.responses.length, count + 1);
      assert.equal(stat('xds.nacks'), nacks + 1);
      const logged = lines.filter((l) => l.includes('weight 6 is too heavy'));
      assert.equal(logged.length, 1);
      const entry = JSON.parse(logged[0]!) as Record<string, unknown>;
      assert.equal(entry.level, 'warning');
      assert.equal(entry.node, 'probe-nack');
      assert.equal(entry.version, rejected.version_info);
      assert.equal(entry.accepted_version, first.version_info);
      assert.equal(entry.msg, `xDS client probe-nack rejected endpoint version ${rejected.version_info}: weight 6 is too heavy`);
    } finally {
      probe.close();
    }
  });

  it('a service whose last node goes leaves every kind; a type mesh does not serve is ignored', async () => {
    const probe = new AdsProbe(address, 'probe-3');
    try {
      const cds = await probe.request(TYPE_URLS.cluster);
      const names = () => cds.resources.length;
      assert.equal(names(), 3);
      probe.send(TYPE_URLS.cluster, []);
      probe.send('type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret', ['x']);
      const push = probe.next(TYPE_URLS.cluster);
      await registry.deregister(svc('gamma', [['g1', 3001]]));
      assert.equal((await push).resources.length, 2);
      assert.ok(probe.responses.every((r) => r.type_url === TYPE_URLS.cluster));
      assert.equal(stat('xds.resources.clusters'), 2);
      assert.equal(stat('xds.resources.routes'), 2);
    } finally {
      probe.close();
    }
  });
});

describe('mesh xds when the registry cannot be read', () => {
  it('serves the last snapshot, says so once, and pushes the change once a read works', async () => {
    const inner = new MemoryRegistry();
    const state = { failing: false, reads: 0 };
    // The registry as a backend that is down: its watch still reports, its reads fail.
    const registry = Object.assign(Object.create(inner) as MemoryRegistry, {
      getService: async (name: string) => {
        state.reads++;
        if (state.failing) throw new Error('registry unreachable');
        return inner.getService(name);
      },
    });
    const lines: string[] = [];
    const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
    const plane = new XdsControlPlane({ registry, settings: resolveSettings(undefined, undefined, 'round_robin', true), stats: new StatsStore(), log: logging.get('server') });
    await inner.register(svc('one', [['o1', 1001]]));
    const probe = new AdsProbe(`127.0.0.1:${await plane.start('127.0.0.1', 0)}`, 'probe-down');
    try {
      const cds = await probe.request(TYPE_URLS.cluster);
      assert.equal(cds.resources.length, 1);
      probe.send(TYPE_URLS.cluster, []);
      state.failing = true;
      const reads = state.reads;
      await inner.register(svc('two', [['t1', 2001]]));
      await waitFor(() => state.reads >= reads + 3, 10_000); // the first read and two retries failed
      assert.equal(lines.filter((l) => l.includes('reading the registry failed')).length, 1);
      const push = probe.next(TYPE_URLS.cluster);
      state.failing = false;
      assert.equal((await push).resources.length, 2);
      await waitFor(() => lines.some((l) => l.includes('reading the registry works again')));
    } finally {
      probe.close();
      await plane.close();
      await inner.close();
    }
  });
});

describe('mesh xds with a client that stops reading', () => {
  // Big responses (a service of 1,000 nodes with long ids: ~150 kB of endpoints) fill the HTTP/2 window and the
  // client's buffer after a few pushes; the pushes after that wait for the write in flight.
  const big = (n0Port: number): Service => ({
    name: 'big',
    version: '1',
    metadata: {},
    endpoints: [],
    nodes: Array.from({ length: 1000 }, (_, i) => ({ id: i === 0 ? 'n0' : `n${i}-${'x'.repeat(120)}`, address: `10.0.${i >> 8}.${i & 255}`, port: i === 0 ? n0Port : 8000, metadata: {} })),
  });
  /** The port of node n0 in an endpoint response. */
  const portOf = (probe: AdsProbe, r: { resources: Array<{ value: Uint8Array }> }) => {
    const cla = probe.protos.root.lookupType('envoy.config.endpoint.v3.ClusterLoadAssignment').decode(r.resources[0]!.value) as unknown as {
      endpoints: Array<{ lb_endpoints: Array<{ endpoint: { hostname: string; address: { socket_address: { port_value: number } } } }> }>;
    };
    return cla.endpoints[0]!.lb_endpoints.find((e) => e.endpoint.hostname === 'n0')!.endpoint.address.socket_address.port_value;
  };
  const setUp = async (writeStallMs?: number) => {
    const registry = new MemoryRegistry();
    const stats = new StatsStore();
    const lines: string[] = [];
    const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
    const plane = new XdsControlPlane({ registry, settings: resolveSettings(undefined, undefined, 'round_robin', true), stats, log: logging.get('server'), debounceMs: 1, limits: { writeStallMs } });
    await registry.register(big(1));
    const address = `127.0.0.1:${await plane.start('127.0.0.1', 0)}`;
    const stat = (name: string) => stats.list().find((s) => s.name === name)?.value ?? 0;
    /** Changes the registry and waits for the snapshot that has the change. */
    const change = async (port: number) => {
      const next = new Promise<void>((resolve) => {
        const off = plane.source.onSnapshot(() => {
          off();
          resolve();
        });
      });
      await registry.register(big(port));
      await next;
    };
    return { registry, plane, address, stat, change, lines, close: async () => (await plane.close(), await registry.close()) };
  };

  it('pushes to it wait for the write in flight and go out coalesced: one response held, the latest state when it reads again', { timeout: 30_000 }, async () => {
    const s = await setUp();
    const probe = new AdsProbe(s.address, 'probe-slow');
    try {
      await probe.request(TYPE_URLS.endpoint, ['big']);
      probe.send(TYPE_URLS.endpoint, ['big']); // ACK
      probe.pause();
      for (let w = 2; w <= 60; w++) await s.change(w);
      // 59 changes: a handful written (what the window and the client's buffer took), the rest
      // coalesced into the one pending push.
      assert.ok(s.stat('xds.pushes_coalesced') >= 30, `coalesced ${s.stat('xds.pushes_coalesced')}`);
      assert.ok(s.stat('xds.pushes') <= 30, `pushes ${s.stat('xds.pushes')}`);
      probe.resume();
      const latest = await waitFor(() => {
        const last = probe.responses.at(-1);
        return last && portOf(probe, last) === 60 ? last : undefined;
      });
      assert.equal(portOf(probe, latest), 60);
    } finally {
      probe.close();
      await s.close();
    }
  });

  it('a response unwritten for writeStallMs ends its stream with RESOURCE_EXHAUSTED; other clients carry on', { timeout: 30_000 }, async () => {
    const s = await setUp(1_000);
    const slow = new AdsProbe(s.address, 'probe-stuck');
    const reader = new AdsProbe(s.address, 'probe-reader');
    try {
      await slow.request(TYPE_URLS.endpoint, ['big']);
      await reader.request(TYPE_URLS.endpoint, ['big']);
      slow.pause();
      // Changes until the pushes to it wait for longer than writeStallMs (its window and buffer
      // take ~18 of these responses); the reader keeps up.
      for (let w = 2; s.stat('xds.streams_stalled') === 0; w++) await s.change(w);
      const status = await slow.status;
      assert.equal(status.code, 8); // RESOURCE_EXHAUSTED
      assert.equal(s.stat('xds.clients_connected'), 1);
      assert.equal(s.lines.filter((l) => l.includes('xDS client probe-stuck read no response for 1000 ms')).length, 1);
      await s.change(999);
      await waitFor(() => reader.responses.some((r) => portOf(reader, r) === 999));
    } finally {
      slow.close();
      reader.close();
      await s.close();
    }
  });
});

describe('mesh xds with nodes it cannot serve and services it cannot build', () => {
  const registry = new MemoryRegistry();
  const stats = new StatsStore();
  const lines: string[] = [];
  const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
  const plane = new XdsControlPlane({ registry, settings: resolveSettings(undefined, undefined, 'round_robin', true), stats, log: logging.get('server'), debounceMs: 1 });
  const stat = (name: string) => stats.list().find((s) => s.name === name)?.value ?? 0;
  const withNodes = (name: string, nodes: Array<{ id: string; address: string; port: number; metadata?: Record<string, string> }>): Service => ({
    name,
    version: '1',
    metadata: {},
    endpoints: [],
    nodes: nodes.map((n) => ({ metadata: {}, ...n })),
  });
  /** Changes the registry and waits for the snapshot that has the change. */
  const change = async (fn: () => Promise<unknown>) => {
    const next = new Promise<void>((resolve) => {
      const off = plane.source.onSnapshot(() => {
        off();
        resolve();
      });
    });
    await fn();
    await next;
  };
  const encode = plane.protos.encodeResource.bind(plane.protos);
  const failing = new Set<string>();
  let address = '';

  before(async () => {
    // A service whose resources cannot be encoded (as a bug would) at start: the start goes on.
    plane.protos.encodeResource = (kind, name, message) => {
      if (failing.has(name)) throw new Error(`cannot encode ${name}`);
      return encode(kind, name, message);
    };
    failing.add('boom');
    await registry.register(withNodes('boom', [{ id: 'x1', address: '127.0.0.1', port: 4001 }]));
    await registry.register(withNodes('fine', [{ id: 'f1', address: '127.0.0.1', port: 4002 }]));
    address = `127.0.0.1:${await plane.start('127.0.0.1', 0)}`;
  });
  after(async () => {
    await plane.close();
    await registry.close();
  });

  it('a node registered by host name is left out (warned once, counted in xds.skipped_nodes); the others are served', async () => {
    const probe = new AdsProbe(address, 'probe-names');
    try {
      await change(() =>
        registry.register(
          withNodes('mixed', [
            { id: 'ip', address: '127.0.0.1', port: 5001 },
            { id: 'named', address: 'backend.invalid', port: 5002 },
          ]),
        ),
      );
      const eds = await probe.request(TYPE_URLS.endpoint, ['mixed']);
      const cla = probe.protos.root.lookupType('envoy.config.endpoint.v3.ClusterLoadAssignment').decode(eds.resources[0]!.value) as unknown as {
        endpoints: Array<{ lb_endpoints: Array<{ endpoint: { hostname: string } }> }>;
      };
      assert.deepEqual(cla.endpoints.flatMap((l) => l.lb_endpoints.map((e) => e.endpoint.hostname)), ['ip']);
      assert.equal(stat('xds.skipped_nodes'), 1);
      // The service changes, the node stays: not warned again.
      await change(() =>
        registry.register(
          withNodes('mixed', [
            { id: 'ip', address: '127.0.0.1', port: 5001, metadata: { zone: 'z' } },
            { id: 'named', address: 'backend.invalid', port: 5002 },
          ]),
        ),
      );
      const warned = lines.filter((l) => l.includes('node named of service mixed left out'));
      assert.equal(warned.length, 1);
      assert.equal(JSON.parse(warned[0]!).msg, 'xDS: node named of service mixed left out: its address backend.invalid is not an IP address (Envoy and gRPC clients take IP addresses only in endpoints)');
      // A service with only such nodes is not served (nothing changes); gone, a node is no longer counted.
      await registry.register(withNodes('named-only', [{ id: 'n', address: 'db.invalid', port: 5003 }]));
      await waitFor(() => stat('xds.skipped_nodes') === 2);
      assert.equal(plane.snapshot!.resources.cluster.has('named-only'), false);
      await registry.deregister(withNodes('mixed', [{ id: 'named', address: 'backend.invalid', port: 5002 }]));
      await waitFor(() => stat('xds.skipped_nodes') === 1);
    } finally {
      probe.close();
    }
  });

  it('a service whose resources cannot be built keeps its last ones (logged with its name, xds.build_errors); the others go on', async () => {
    // At start: boom failed, fine is served.
    assert.equal(stat('xds.build_errors'), 1);
    assert.ok(plane.snapshot!.resources.cluster.has('fine'));
    assert.equal(plane.snapshot!.resources.cluster.has('boom'), false);
    assert.equal(lines.filter((l) => l.includes('building the resources of service boom failed')).length, 1);
    // boom builds, then fails at its next change: its last resources stay, in the same batch as a change of fine.
    failing.delete('boom');
    await change(() => registry.register(withNodes('boom', [{ id: 'x1', address: '127.0.0.1', port: 4001, metadata: { zone: 'a' } }])));
    const served = plane.snapshot!.resources.endpoint.get('boom');
    assert.ok(served);
    failing.add('boom');
    await change(async () => {
      await registry.register(withNodes('boom', [{ id: 'x1', address: '127.0.0.1', port: 4001, metadata: { zone: 'b' } }]));
      await registry.register(withNodes('fine', [{ id: 'f2', address: '127.0.0.1', port: 4003 }]));
    });
    await waitFor(() => plane.snapshot!.resources.endpoint.get('fine') && stat('xds.build_errors') === 2);
    assert.equal(plane.snapshot!.resources.endpoint.get('boom'), served);
    const probe = new AdsProbe(address, 'probe-build');
    try {
      const eds = await probe.request(TYPE_URLS.endpoint, ['boom', 'fine']);
      assert.equal(eds.resources.length, 2); // boom (its last) and fine
    } finally {
      probe.close();
    }
    assert.equal(lines.filter((l) => l.includes('reading the registry failed')).length, 0);
    const entry = JSON.parse(lines.filter((l) => l.includes('building the resources of service boom failed')).at(-1)!) as Record<string, unknown>;
    assert.equal(entry.service, 'boom');
    assert.equal(entry.msg, 'xDS: building the resources of service boom failed (serving its last ones): cannot encode boom');
  });
});

describe('mesh xds bounds what its clients send', () => {
  const registry = new MemoryRegistry();
  const stats = new StatsStore();
  const lines: string[] = [];
  const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
  const plane = new XdsControlPlane({
    registry,
    settings: resolveSettings(undefined, undefined, 'round_robin', true),
    stats,
    log: logging.get('server'),
    limits: { maxNamesPerType: 3, maxStreams: 2 },
  });
  const stat = (name: string) => stats.list().find((s) => s.name === name)?.value ?? 0;
  let address = '';

  before(async () => {
    await registry.register(svc('alpha', [['a1', 1001]]));
    address = `127.0.0.1:${await plane.start('127.0.0.1', 0)}`;
  });
  after(async () => {
    await plane.close();
    await registry.close();
  });

  it('more names than the limit in one subscription: RESOURCE_EXHAUSTED, logged with the node id', async () => {
    const probe = new AdsProbe(address, 'probe-many');
    try {
      await probe.request(TYPE_URLS.endpoint, ['a', 'b', 'c']);
      probe.send(TYPE_URLS.endpoint, ['a', 'b', 'c', 'd']);
      const status = await probe.status;
      assert.deepEqual({ code: status.code, details: status.details }, { code: 8, details: '4 endpoint names in one subscription, more than the limit of 3' });
      assert.ok(lines.some((l) => JSON.parse(l).msg === 'xDS client probe-many: 4 endpoint names in one subscription, more than the limit of 3; its stream is ended (RESOURCE_EXHAUSTED)'));
      await waitFor(() => stat('xds.clients_connected') === 0);
    } finally {
      probe.close();
    }
  });

  it('a request over 1 MiB: RESOURCE_EXHAUSTED from gRPC, nothing kept', async () => {
    const probe = new AdsProbe(address, 'probe-big');
    try {
      probe.send(TYPE_URLS.endpoint, ['x'.repeat(1024 * 1024 + 1)]);
      const status = await probe.status;
      assert.equal(status.code, 8);
      assert.match(status.details, /larger than max/);
    } finally {
      probe.close();
    }
  });

  it('a stream past the limit is refused with RESOURCE_EXHAUSTED; the limit is said once', async () => {
    const open = [new AdsProbe(address, 'p1'), new AdsProbe(address, 'p2')];
    const refused = [new AdsProbe(address, 'p3'), new AdsProbe(address, 'p4')];
    try {
      for (const p of open) await p.request(TYPE_URLS.cluster);
      for (const p of refused) p.send(TYPE_URLS.cluster, []);
      for (const p of refused) {
        const status = await p.status;
        assert.deepEqual({ code: status.code, details: status.details }, { code: 8, details: 'this control plane serves 2 streams at most' });
      }
      assert.equal(stat('xds.clients_connected'), 2);
      assert.equal(lines.filter((l) => l.includes('streams open, the limit')).length, 1);
    } finally {
      for (const p of [...open, ...refused]) p.close();
    }
    await waitFor(() => stat('xds.clients_connected') === 0);
  });

  it('a node id is logged cut to 256 characters, then escaped', async () => {
    const id = `evil\n${'n'.repeat(1000)}`;
    const probe = new AdsProbe(address, id);
    try {
      const eds = await probe.request(TYPE_URLS.endpoint, ['alpha']);
      probe.send(TYPE_URLS.endpoint, ['alpha'], eds, 'no\nthanks');
      await waitFor(() => lines.some((l) => l.includes('rejected endpoint')));
      const entry = JSON.parse(lines.find((l) => l.includes('rejected endpoint'))!) as { node: string; msg: string; error: string };
      assert.equal(entry.node, `evil\\x0a${'n'.repeat(251)}…(+749)`);
      assert.equal(entry.error, 'no\\x0athanks');
      assert.ok(!entry.msg.includes('\n'));
    } finally {
      probe.close();
    }
  });
});
