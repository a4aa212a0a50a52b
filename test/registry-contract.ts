/**
 * The registry contract: every backend (memory, local, etcd) passes these cases.
 * Usage: registryContract('memory', async () => ({ registry: new MemoryRegistry(), cleanup: async () => {} })).
 * The factory must give a fresh, empty registry each time (a temp directory, a unique etcd prefix).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Node, Registry, Service, WatchEvent } from '../src/engines/registry/registry.js';
import {
  RegistryValidationError,
  validateService,
  MAX_METADATA_BYTES,
  MAX_NODES_PER_REQUEST,
  MAX_NODES_PER_SERVICE,
  MAX_SERVICE_BYTES,
  type InvalidRecordReport,
  type InvalidRecordSink,
  PROCESS_SERVICE,
} from '../src/engines/registry/validate.js';
import { sleep, waitFor } from './helpers.js';

/** A record as another tool may have stored it: one node, any field possibly wrong. */
export interface RawRecord {
  name: string;
  version: string;
  metadata?: unknown;
  endpoints?: unknown;
  node: { id: unknown; address: unknown; port: unknown; metadata?: unknown };
}

export interface RegistryUnderTest {
  registry: Registry;
  cleanup(): Promise<void>;
  /**
   * Stores a record past the registry's own checks, as another tool writing the storage directly
   * would (absent for a backend that only holds what it checked itself: memory).
   */
  writeRaw?(record: RawRecord): Promise<void>;
}

/** `onInvalidRecord`: the sink the registry must report skipped stored records to. */
export type RegistryFactory = (options: { onInvalidRecord: InvalidRecordSink }) => Promise<RegistryUnderTest>;

export function node(id: string, port: number, metadata: Record<string, string> = {}): Node {
  return { id, address: '127.0.0.1', port, metadata };
}

export function svc(name: string, version: string, nodes: Node[], extra: Partial<Service> = {}): Service {
  return { name, version, metadata: {}, endpoints: [], nodes, ...extra };
}

/** Collects watch events; `next(pred)` waits for the first not-yet-taken event matching pred. */
export function collect(registry: Registry, service?: string) {
  const events: WatchEvent[] = [];
  const watcher = registry.watch((e) => events.push(e), service !== undefined ? { service } : undefined);
  let taken = 0;
  return {
    events,
    watcher,
    async next(pred: (e: WatchEvent) => boolean = () => true, timeoutMs = 3000): Promise<WatchEvent> {
      const found = await waitFor(() => {
        for (let i = taken; i < events.length; i++) if (pred(events[i]!)) return { e: events[i]!, i };
        return undefined;
      }, timeoutMs).catch((err: Error) => {
        throw new Error(`${err.message}; events so far: ${JSON.stringify(events.map((e) => [e.action, e.service.name, e.service.version, e.service.nodes.map((n) => n.id)]))}`);
      });
      taken = found!.i + 1;
      return found!.e;
    },
  };
}

/** The record as a registry returns it: nodes sorted by id. */
const cloneSorted = (s: Service): Service => ({ ...s, nodes: [...s.nodes].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)) });
const names = (list: Service[]) => list.map((s) => s.name);
const nodeIds = (list: Service[]) => list.flatMap((s) => s.nodes.map((n) => n.id)).sort();

function lowerCaseKeys(value: unknown, path = '$'): void {
  if (Array.isArray(value)) return value.forEach((v, i) => lowerCaseKeys(v, `${path}[${i}]`));
  if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      // metadata maps hold user keys; only the record's own keys must be lower-case
      if (path.endsWith('.metadata')) continue;
      assert.match(k, /^[a-z]+$/, `${path}.${k} is not a lower-case key`);
      if (k !== 'request' && k !== 'response') lowerCaseKeys(v, `${path}.${k}`);
    }
  }
}

function expectValidationError(bad: unknown): (err: unknown) => boolean {
  let expected = '';
  try {
    validateService(bad as Service);
  } catch (err) {
    expected = (err as Error).message;
  }
  assert.ok(expected, 'the sample must be invalid for validateService');
  return (err: unknown) => {
    assert.ok(err instanceof RegistryValidationError, `expected RegistryValidationError, got ${String(err)}`);
    assert.equal(err.message, expected);
    return true;
  };
}

/** A check for assert.rejects: a RegistryValidationError with exactly this message. */
const refusedWith = (message: string) => (err: unknown) => {
  assert.ok(err instanceof RegistryValidationError, `expected RegistryValidationError, got ${String(err)}`);
  assert.equal(err.message, message);
  return true;
};

/** Metadata of exactly `bytes` bytes of keys and values: one-letter keys, values of at most 4,095 characters. */
function metadataOf(bytes: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; bytes > 0; i++) {
    const value = Math.min(4095, bytes - 1);
    out[String.fromCharCode(97 + i)] = 'x'.repeat(value);
    bytes -= 1 + value;
  }
  return out;
}

export function registryContract(name: string, factory: RegistryFactory): void {
  // Each case gets a fresh registry and always cleans up.
  const using = async (fn: (r: Registry, t: RegistryUnderTest, reports: InvalidRecordReport[]) => Promise<void>) => {
    const reports: InvalidRecordReport[] = [];
    const t = await factory({ onInvalidRecord: (r) => reports.push(r) });
    try {
      await fn(t.registry, t, reports);
    } finally {
      await t.cleanup();
    }
  };

  describe(`registry contract: ${name}`, () => {
    it('register then getService returns the full record with lower-case keys', () =>
      using(async (r) => {
        assert.equal(r.name, name);
        const record: Service = {
          name: 'greeter',
          version: '1.0.0',
          metadata: { team: 'core' },
          endpoints: [
            {
              name: 'Greeter.Hello',
              request: { name: 'Request', type: 'Request', values: [{ name: 'name', type: 'string' }] },
              response: { name: 'Response', type: 'Response' },
              metadata: { handler: 'rpc', path: '/greeter/hello' },
            },
          ],
          nodes: [node('greeter-1', 10001, { protocol: 'mesh', zone: 'a' })],
        };
        await r.register(record);
        const got = await r.getService('greeter');
        assert.deepEqual(got, [record]);
        lowerCaseKeys(JSON.parse(JSON.stringify(got)));
        // The result is a copy: changing it does not change the registry.
        got[0]!.nodes[0]!.port = 1;
        got[0]!.metadata.team = 'x';
        assert.deepEqual(await r.getService('greeter'), [record]);
      }));

    it('fills missing optional fields so every record has the full shape', () =>
      using(async (r) => {
        await r.register({ name: 'bare', nodes: [{ id: 'b1', address: '10.0.0.1', port: 80 }] } as unknown as Service);
        assert.deepEqual(await r.getService('bare'), [
          { name: 'bare', version: '', metadata: {}, endpoints: [], nodes: [{ id: 'b1', address: '10.0.0.1', port: 80, metadata: {} }] },
        ]);
      }));

    it('register again upserts: same node id updated, not duplicated; nodes sorted by id', () =>
      using(async (r) => {
        await r.register(svc('up', '1', [node('n2', 2002), node('n1', 1001)]));
        await r.register(svc('up', '1', [node('n1', 1111, { zone: 'b' })], { metadata: { v: '2' } }));
        const got = await r.getService('up');
        assert.equal(got.length, 1);
        assert.deepEqual(got[0]!.metadata, { v: '2' });
        assert.deepEqual(got[0]!.nodes, [node('n1', 1111, { zone: 'b' }), node('n2', 2002)]);
      }));

    it('keeps several versions, each with its own nodes', () =>
      using(async (r) => {
        await r.register(svc('multi', '2.0', [node('v2-a', 2001)], { metadata: { gen: 'two' } }));
        await r.register(svc('multi', '1.0', [node('v1-a', 1001), node('v1-b', 1002)]));
        const got = await r.getService('multi');
        assert.deepEqual(
          got.map((s) => [s.version, s.nodes.map((n) => n.id)]),
          [
            ['1.0', ['v1-a', 'v1-b']],
            ['2.0', ['v2-a']],
          ],
        );
        assert.deepEqual(got[1]!.metadata, { gen: 'two' });
        const listed = await r.listServices();
        assert.deepEqual(names(listed), ['multi'], 'one entry per service name');
      }));

    it('listServices is sorted by name and has one entry per service', () =>
      using(async (r) => {
        for (const n of ['charlie', 'alpha', 'bravo']) await r.register(svc(n, '1', [node(`${n}-1`, 3000)]));
        await r.register(svc('alpha', '2', [node('alpha-2', 3001)]));
        const listed = await r.listServices();
        assert.deepEqual(names(listed), ['alpha', 'bravo', 'charlie']);
        for (const s of listed) {
          assert.equal(typeof s.version, 'string');
          assert.ok(Array.isArray(s.nodes));
        }
      }));

    it('getService of an unknown service is []; listServices of an empty registry is []', () =>
      using(async (r) => {
        assert.deepEqual(await r.getService('nope'), []);
        assert.deepEqual(await r.listServices(), []);
      }));

    it('deregister removes one node of two and keeps the other', () =>
      using(async (r) => {
        await r.register(svc('pair', '1', [node('p1', 4001), node('p2', 4002)]));
        await r.deregister(svc('pair', '1', [node('p1', 4001)]));
        assert.deepEqual(nodeIds(await r.getService('pair')), ['p2']);
        assert.deepEqual(names(await r.listServices()), ['pair']);
      }));

    it('deregister of the last node removes the version and the service', () =>
      using(async (r) => {
        await r.register(svc('solo', '1', [node('s1', 5001)]));
        await r.register(svc('solo', '2', [node('s2', 5002)]));
        await r.register(svc('other', '1', [node('o1', 5003)]));
        await r.deregister(svc('solo', '1', [node('s1', 5001)]));
        assert.deepEqual(
          (await r.getService('solo')).map((s) => s.version),
          ['2'],
        );
        await r.deregister(svc('solo', '2', [node('s2', 5002)]));
        assert.deepEqual(await r.getService('solo'), []);
        assert.deepEqual(names(await r.listServices()), ['other']);
        // deregistering what is not there is not an error
        await r.deregister(svc('solo', '2', [node('s2', 5002)]));
        await r.deregister(svc('never', '1', [node('x', 1)]));
      }));

    it('deregister without a version removes those node ids from every version', () =>
      using(async (r) => {
        await r.register(svc('anyver', '1', [node('a1', 5101), node('keep', 5102)]));
        await r.register(svc('anyver', '2', [node('a2', 5103)]));
        await r.deregister({ name: 'anyver', nodes: [{ id: 'a1' }, { id: 'a2' }] } as unknown as Service);
        const got = await r.getService('anyver');
        assert.deepEqual(got.map((s) => [s.version, s.nodes.map((n) => n.id)]), [['1', ['keep']]]);
      }));

    it('a 300ms TTL expires: gone from getService and listServices soon after (within 2.5s)', () =>
      using(async (r) => {
        const start = Date.now();
        await r.register(svc('brief', '1', [node('b1', 6001)]), { ttlMs: 300 });
        await r.register(svc('stays', '1', [node('st1', 6002)]));
        const present = await r.getService('brief');
        if (Date.now() - start < 250) assert.deepEqual(nodeIds(present), ['b1'], 'present before its TTL');
        await waitFor(async () => (await r.getService('brief')).length === 0, 2500);
        assert.deepEqual(await r.getService('brief'), [], 'expired');
        assert.deepEqual(names(await r.listServices()), ['stays']);
      }));

    it('registering again refreshes the TTL; without refresh it expires', () =>
      using(async (r) => {
        const s = svc('refreshed', '1', [node('r1', 6101)]);
        await r.register(s, { ttlMs: 600 });
        // A witness with the same TTL that nobody refreshes: its expiry is the event that ends the heartbeats.
        await r.register(svc('witness', '1', [node('w1', 6102)]), { ttlMs: 600 });
        const deadline = Date.now() + 10_000;
        while ((await r.getService('witness')).length > 0) {
          assert.ok(Date.now() < deadline, 'the witness expires');
          await sleep(150); // a heartbeat's pace (not an ordering sleep): refreshes well inside the TTL
          await r.register(s, { ttlMs: 600 });
        }
        assert.deepEqual(nodeIds(await r.getService('refreshed')), ['r1'], 'alive after the same TTL ran out on the witness, thanks to refreshes');
        await waitFor(async () => (await r.getService('refreshed')).length === 0, 2500);
      }));

    it('a registration without TTL (absent or 0) lasts', () =>
      using(async (r) => {
        await r.register(svc('forever', '1', [node('f1', 6201)]));
        await r.register(svc('forever0', '1', [node('f2', 6202)]), { ttlMs: 0 });
        await r.register(svc('short', '1', [node('f3', 6203)]), { ttlMs: 200 });
        // the short one expiring proves expiry ran over the others
        await waitFor(async () => (await r.getService('short')).length === 0, 2500);
        assert.deepEqual(nodeIds(await r.getService('forever')), ['f1']);
        assert.deepEqual(nodeIds(await r.getService('forever0')), ['f2']);
        assert.deepEqual(names(await r.listServices()), ['forever', 'forever0']);
      }));

    it('watch reports create, update and delete in order with non-decreasing revisions', () =>
      using(async (r) => {
        const w = collect(r);
        try {
          await r.register(svc('watched', '1', [node('w1', 7001)], { metadata: { a: '1' } }));
          const created = await w.next();
          assert.equal(created.action, 'create');
          assert.equal(created.service.name, 'watched');
          assert.equal(created.service.version, '1');
          assert.deepEqual(created.service.metadata, { a: '1' });
          assert.deepEqual(nodeIds([created.service]), ['w1']);

          await r.register(svc('watched', '1', [node('w2', 7002)], { metadata: { a: '1' } }));
          const updated = await w.next();
          assert.equal(updated.action, 'update');
          assert.deepEqual(nodeIds([updated.service]), ['w1', 'w2']);

          await r.deregister(svc('watched', '1', [node('w1', 7001)]));
          const shrunk = await w.next();
          assert.equal(shrunk.action, 'update');
          assert.deepEqual(nodeIds([shrunk.service]), ['w2']);

          await r.deregister(svc('watched', '1', [node('w2', 7002)]));
          const deleted = await w.next();
          assert.equal(deleted.action, 'delete');
          assert.equal(deleted.service.name, 'watched');
          assert.equal(deleted.service.version, '1');
          assert.deepEqual(deleted.service.nodes, []);

          // a marker last: events come in order, so once it is in, nothing more about 'watched' is on its way
          await r.register(svc('watched-marker', '1', [node('m1', 7009)]));
          await w.next((e) => e.service.name === 'watched-marker');
          const watched = w.events.filter((e) => e.service.name === 'watched');
          assert.deepEqual(
            watched.map((e) => e.action),
            ['create', 'update', 'update', 'delete'],
          );
          const revs = watched.map((e) => BigInt(e.revision));
          for (let i = 1; i < revs.length; i++) assert.ok(revs[i]! >= revs[i - 1]!, `revisions ${revs.join(',')}`);
          assert.ok(revs[revs.length - 1]! > revs[0]!);
          assert.ok(BigInt(r.revision()) >= revs[revs.length - 1]!);
        } finally {
          w.watcher.stop();
        }
      }));

    it('watch reports a TTL expiry as a delete', () =>
      using(async (r) => {
        const w = collect(r);
        try {
          await r.register(svc('expiring', '1', [node('e1', 7101)]), { ttlMs: 300 });
          await r.register(svc('expiring', '2', [node('e2', 7102)]));
          assert.equal((await w.next((e) => e.service.version === '1')).action, 'create');
          const gone = await w.next((e) => e.service.version === '1', 3000);
          assert.equal(gone.action, 'delete');
          assert.equal(gone.service.name, 'expiring');
          assert.deepEqual(gone.service.nodes, []);
          assert.deepEqual(
            (await r.getService('expiring')).map((s) => s.version),
            ['2'],
          );
        } finally {
          w.watcher.stop();
        }
      }));

    it('watch with a service filter only reports that service; stop ends the events', () =>
      using(async (r) => {
        const only = collect(r, 'wanted');
        // the same filter, started after only: once it has an event, only would have had it too
        const probe = collect(r, 'wanted');
        const all = collect(r);
        try {
          await r.register(svc('unwanted', '1', [node('u1', 7201)]));
          await r.register(svc('wanted', '1', [node('x1', 7202)]));
          assert.equal((await only.next()).service.name, 'wanted');
          await all.next((e) => e.service.name === 'wanted');
          assert.ok(only.events.every((e) => e.service.name === 'wanted'));
          only.watcher.stop();
          const seen = only.events.length;
          await r.register(svc('wanted', '2', [node('x2', 7203)]));
          await all.next((e) => e.service.name === 'wanted' && e.service.version === '2');
          await probe.next((e) => e.service.version === '2');
          assert.equal(only.events.length, seen, 'no events after stop');
        } finally {
          only.watcher.stop();
          probe.watcher.stop();
          all.watcher.stop();
        }
      }));

    it(`a reserved name (${PROCESS_SERVICE}, the process records) is stored and read by name, but never listed nor reported to a watch of every service`, () =>
      using(async (r) => {
        const all = collect(r);
        const named = collect(r, PROCESS_SERVICE);
        try {
          await r.register(svc(PROCESS_SERVICE, '', [node('vm-42-abcdef', 9901, { kind: 'api', pid: '42' })]));
          await r.register(svc('after', '1', [node('a1', 7301)]));
          assert.equal((await named.next()).service.name, PROCESS_SERVICE);
          await all.next((e) => e.service.name === 'after');
          assert.ok(all.events.every((e) => e.service.name !== PROCESS_SERVICE), 'no event of the reserved name for a watch of every service');
          const [record] = await r.getService(PROCESS_SERVICE);
          assert.deepEqual(record!.nodes.map((n) => [n.id, n.port, n.metadata.kind]), [['vm-42-abcdef', 9901, 'api']]);
          assert.deepEqual((await r.listServices()).map((x) => x.name), ['after']);
          await r.deregister(svc(PROCESS_SERVICE, '', [node('vm-42-abcdef', 9901)]));
          assert.deepEqual(await r.getService(PROCESS_SERVICE), []);
        } finally {
          all.watcher.stop();
          named.watcher.stop();
        }
      }));

    it('revision increases with each change', () =>
      using(async (r) => {
        const r0 = BigInt(r.revision());
        await r.register(svc('rev', '1', [node('r1', 7301)]));
        const r1 = BigInt(r.revision());
        assert.ok(r1 > r0, `${r1} > ${r0}`);
        await r.register(svc('rev', '1', [node('r2', 7302)]));
        const r2 = BigInt(r.revision());
        assert.ok(r2 > r1, `${r2} > ${r1}`);
        await r.deregister(svc('rev', '1', [node('r1', 7301)]));
        const r3 = BigInt(r.revision());
        assert.ok(r3 > r2, `${r3} > ${r2}`);
      }));

    it('rejects invalid records with the validation error that names the field', () =>
      using(async (r) => {
        const bad: unknown[] = [
          { name: '', version: '1', metadata: {}, endpoints: [], nodes: [node('a', 1)] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: 'no' },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [{ id: '', address: 'h', port: 1, metadata: {} }] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: '', port: 1, metadata: {} }] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: 'h', port: 0, metadata: {} }] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: 'h', port: 70000, metadata: {} }] },
          { name: 'x', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a', address: 'h', port: 1.5, metadata: {} }] },
        ];
        for (const b of bad) await assert.rejects(r.register(b as Service), expectValidationError(b));
        await assert.rejects(r.register(svc('x', '1', [node('a', 1)]), { ttlMs: -1 }), RegistryValidationError);
        assert.deepEqual(await r.listServices(), [], 'nothing was written');
      }));

    it('refuses names, versions, ids, addresses, ports, metadata and endpoints that break the rules, naming the field', () =>
      using(async (r) => {
        const ok = (over: Partial<Service> = {}, n: Partial<Node> = {}): Service => ({
          name: 'go.mesh.srv.greeter',
          version: '1.0.0',
          metadata: {},
          endpoints: [],
          nodes: [{ id: 'x', address: '127.0.0.1', port: 1, metadata: {}, ...n }],
          ...over,
        });
        const cases: Array<[Service, RegExp]> = [
          [ok({ name: 'a\nb' }), /^Name: "a\\nb" is not a valid service name/],
          [ok({ name: 'a b' }), /^Name: /],
          [ok({ name: 'a\u0000b' }), /^Name: /],
          [ok({ name: '../etc' }), /^Name: /],
          [ok({ name: 'a..b' }), /^Name: "a\.\.b" must not contain "\.\.", "\/\/" or "::"$/],
          [ok({ name: 'http://evil/x' }), /^Name: "http:\/\/evil\/x" must not contain/],
          [ok({ name: 'a::b' }), /^Name: /],
          [ok({ name: '/etc' }), /^Name: /],
          [ok({ name: 'x'.repeat(201) }), /^Name: longer than 200 characters/],
          [ok({ version: '1 0' }), /^Version: /],
          [ok({ version: 'v\n1' }), /^Version: /],
          [ok({}, { id: 'a\nb' }), /^Nodes\[0\]\.Id: /],
          [ok({}, { id: '../x' }), /^Nodes\[0\]\.Id: /],
          [ok({}, { address: '127.0.0.1 x' }), /^Nodes\[0\]\.Address: "127\.0\.0\.1 x" is not an IPv4 address, an IPv6 address or a host name/],
          [ok({}, { address: 'http://127.0.0.1' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: '127.0.0.1:80' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: 'host/path' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: 'a\nb' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: '[::1]' }), /^Nodes\[0\]\.Address: "\[::1\]": write an IPv6 address without brackets/],
          [ok({}, { address: '::1%eth0' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: '256.1.1.1' }), /^Nodes\[0\]\.Address: "256\.1\.1\.1" is not a valid IPv4 address/],
          [ok({}, { address: '0x7f.1' }), /^Nodes\[0\]\.Address: /],
          [ok({}, { address: `${'a'.repeat(64)}.com` }), /^Nodes\[0\]\.Address: /],
          [ok({}, { port: 65536 }), /^Nodes\[0\]\.Port: must be an integer from 1 to 65535/],
          [ok({}, { metadata: { k: 'a\nb' } }), /^Nodes\[0\]\.Metadata\.k: has a control character/],
          [ok({}, { metadata: { 'a\u0007': 'v' } }), /^Nodes\[0\]\.Metadata\.a\\x07: key has a control character/],
          [ok({}, { metadata: { k: 1 as unknown as string } }), /^Nodes\[0\]\.Metadata\.k: must be a string/],
          [ok({}, { metadata: { k: 'v'.repeat(4097) } }), /^Nodes\[0\]\.Metadata\.k: longer than 4096 characters/],
          [ok({}, { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) }), /^Nodes\[0\]\.Metadata: more than 64 entries/],
          [ok({ metadata: { team: 'a\rb' } }), /^Metadata\.team: has a control character/],
          [ok({ endpoints: [{ name: 'Greeter Hello', metadata: {} }] }), /^Endpoints\[0\]\.Name: /],
          [ok({ endpoints: [{ name: 'G.H', metadata: { path: '/x\n' } }] }), /^Endpoints\[0\]\.Metadata\.path: has a control character/],
          [ok({ endpoints: [{ name: 'G.H', request: 'x'.repeat(17000), metadata: {} }] }), /^Endpoints\[0\]\.Request: larger than 16384 bytes of JSON/],
          [ok({ endpoints: Array.from({ length: 257 }, (_, i) => ({ name: `E.m${i}`, metadata: {} })) }), /^Endpoints: more than 256 endpoints/],
        ];
        for (const [bad, re] of cases) {
          await assert.rejects(r.register(bad), (err: unknown) => {
            assert.ok(err instanceof RegistryValidationError, `${JSON.stringify(bad).slice(0, 200)}: ${String(err)}`);
            assert.match(err.message, re);
            assert.doesNotMatch(err.message, /[\u0000-\u001f]/, 'the message holds no raw control character');
            return true;
          });
        }
        assert.deepEqual(await r.listServices(), [], 'nothing was written');
      }));

    it('accepts IPv4, IPv6 without brackets, host names, and the whole allowed charset', () =>
      using(async (r) => {
        const nodes: Node[] = [
          { id: 'a-1', address: '10.0.0.1', port: 1, metadata: {} },
          { id: 'b_2', address: '::1', port: 65535, metadata: {} },
          { id: 'c.3', address: 'fe80::1:2', port: 80, metadata: {} },
          { id: 'd:4@x', address: 'my_host-1.example.com', port: 8080, metadata: { 'any key': 'any value, ünïcode ok' } },
          { id: 'E5', address: 'localhost', port: 9, metadata: {} },
        ];
        const record = svc('topic:Go.mesh-srv_greeter/v2', '1.2.3-beta+build.7', nodes, {
          endpoints: [{ name: 'Greeter.Hello', metadata: { path: '/greeter/hello' } }, { name: '/a/b:c', metadata: {} }],
        });
        await r.register(record);
        const [got] = await r.getService('topic:Go.mesh-srv_greeter/v2');
        assert.deepEqual(got, cloneSorted(record));
      }));

    it(`caps nodes: ${MAX_NODES_PER_REQUEST} per request, ${MAX_NODES_PER_SERVICE} per service`, () =>
      using(async (r) => {
        const many = (from: number, count: number) => Array.from({ length: count }, (_, i) => node(`n${from + i}`, 1 + ((from + i) % 65535)));
        await assert.rejects(r.register(svc('big', '1', many(0, MAX_NODES_PER_REQUEST + 1))), /^RegistryValidationError: Nodes: 1001 nodes in one request, more than the limit of 1000$/);
        for (let from = 0; from < MAX_NODES_PER_SERVICE; from += MAX_NODES_PER_REQUEST) await r.register(svc('big', String(from % 2000 === 0 ? 1 : 2), many(from, MAX_NODES_PER_REQUEST)));
        await assert.rejects(
          r.register(svc('big', '3', [node('one-more', 1)])),
          /^RegistryValidationError: Nodes: service big would have 10001 nodes, more than the limit of 10000 per service$/,
        );
        // Refreshing nodes it has is fine at the limit.
        await r.register(svc('big', '1', many(0, 10)));
        const total = (await r.getService('big')).reduce((n, v) => n + v.nodes.length, 0);
        assert.equal(total, MAX_NODES_PER_SERVICE);
        await r.deregister(svc('big', '', [node('n0', 1)]));
        await r.register(svc('big', '3', [node('one-more', 1)]));
      }));

    it(`bounds bytes: a node's metadata at most ${MAX_METADATA_BYTES} bytes, a service at most ${MAX_SERVICE_BYTES} (exactly at the limit accepted, one byte more refused)`, () =>
      using(async (r) => {
        // At the limit: keys and values of 16 KiB in all (UTF-8 bytes).
        await r.register(svc('meta', '', [node('m1', 1, metadataOf(MAX_METADATA_BYTES))]));
        assert.equal(Object.keys((await r.getService('meta'))[0]!.nodes[0]!.metadata).length, 4);
        await assert.rejects(
          r.register(svc('meta', '', [node('m2', 2, metadataOf(MAX_METADATA_BYTES + 1))])),
          refusedWith(`Nodes[0].Metadata: ${MAX_METADATA_BYTES + 1} bytes of keys and values, more than the limit of ${MAX_METADATA_BYTES}`),
        );
        await assert.rejects(
          r.register(svc('meta', '', [node('m3', 3)], { metadata: metadataOf(MAX_METADATA_BYTES + 1) })),
          refusedWith(`Metadata: ${MAX_METADATA_BYTES + 1} bytes of keys and values, more than the limit of ${MAX_METADATA_BYTES}`),
        );
        // A service of exactly MAX_SERVICE_BYTES: "big" (3 bytes), full nodes of 4 + 9 + 16,384 bytes, one node for the rest.
        const full = (i: number) => node(`n${String(i).padStart(3, '0')}`, 1 + i, metadataOf(MAX_METADATA_BYTES));
        const perNode = 4 + 9 + MAX_METADATA_BYTES;
        const count = Math.floor((MAX_SERVICE_BYTES - 3) / perNode);
        const rest = MAX_SERVICE_BYTES - 3 - count * perNode;
        const nodes = Array.from({ length: count }, (_, i) => full(i));
        const last = (extra: number) => node('p000', 9000, metadataOf(rest - 13 + extra));
        await assert.rejects(
          r.register(svc('big', '', [...nodes, last(1)])),
          refusedWith(`service: service "big" would take ${MAX_SERVICE_BYTES + 1} bytes, more than the limit of ${MAX_SERVICE_BYTES} per service (all versions, nodes and endpoints)`),
        );
        await r.register(svc('big', '', [...nodes, last(0)]));
        assert.equal((await r.getService('big'))[0]!.nodes.length, count + 1);
        // Refreshing what it has is fine at the limit; growing past it is refused (etcd: see docs, readers cap it).
        await r.register(svc('big', '', [last(0)]));
        if (name !== 'etcd') {
          await assert.rejects(
            r.register(svc('big', '2', [node('q', 1)])),
            refusedWith(`service: service "big" would take ${MAX_SERVICE_BYTES + 14} bytes, more than the limit of ${MAX_SERVICE_BYTES} per service (all versions, nodes and endpoints)`),
          );
        }
      }));

    it('a stored node over the byte limits is skipped and reported; so is what is stored past a service\'s limit; watches go on', async (t) => {
      const probe = await factory({ onInvalidRecord: () => undefined });
      const raw = probe.writeRaw !== undefined;
      await probe.cleanup();
      if (!raw) return t.skip(`${name} only holds records it checked itself`);
      await using(async (r, under, reports) => {
        const good = node('good-1', 7001);
        await r.register(svc('shop', '1', [good]));
        const w = collect(r);
        try {
          // 64 entries of 4,000 characters: within the per-entry rules, 256 KB in all.
          const heavy = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'x'.repeat(4000)]));
          await under.writeRaw!({ name: 'shop', version: '1', node: { id: 'heavy', address: '127.0.0.1', port: 2, metadata: heavy } });
          const good2 = node('good-2', 7002);
          await r.register(svc('shop', '1', [good2]));
          const e = await w.next((ev) => ev.service.name === 'shop' && ev.service.nodes.some((n) => n.id === 'good-2'));
          assert.deepEqual(e.service.nodes.map((n) => n.id), ['good-1', 'good-2']);
          assert.ok(w.events.every((ev) => ev.service.nodes.every((n) => n.id !== 'heavy')), 'no event carries the heavy node');
          assert.deepEqual((await r.getService('shop'))[0]!.nodes.map((n) => n.id), ['good-1', 'good-2']);
          const heavyReport = reports.find((rep) => rep.problem.startsWith('node "heavy"'));
          assert.ok(heavyReport, JSON.stringify(reports));
          assert.equal(heavyReport.problem, `node "heavy".Metadata: 256182 bytes of keys and values, more than the limit of ${MAX_METADATA_BYTES}`);

          // A service at its limit, and one more (valid) node written past it: read as its first MAX_SERVICE_BYTES.
          const perNode = 4 + 9 + MAX_METADATA_BYTES;
          const count = Math.floor((MAX_SERVICE_BYTES - 3) / perNode);
          const rest = MAX_SERVICE_BYTES - 3 - count * perNode;
          const nodes = Array.from({ length: count }, (_, i) => node(`n${String(i).padStart(3, '0')}`, 1 + i, metadataOf(MAX_METADATA_BYTES)));
          await r.register(svc('big', '', [...nodes, node('p000', 9000, metadataOf(rest - 13))]));
          reports.length = 0;
          await under.writeRaw!({ name: 'big', version: '', node: { id: 'z-past', address: '127.0.0.1', port: 3 } });
          const ids = (await r.getService('big'))[0]!.nodes.map((n) => n.id);
          assert.equal(ids.length, count + 1);
          assert.ok(!ids.includes('z-past'));
          assert.ok(
            reports.some((rep) => rep.problem === `service: more than ${MAX_SERVICE_BYTES} bytes in the service; 1 node left out`),
            JSON.stringify(reports),
          );
        } finally {
          w.watcher.stop();
        }
      });
    });

    it('a stored record that breaks the rules is skipped and reported; the good nodes of its service stay; watches go on', async (t) => {
      const probe = await factory({ onInvalidRecord: () => undefined });
      const raw = probe.writeRaw !== undefined;
      await probe.cleanup();
      if (!raw) return t.skip(`${name} only holds records it checked itself`);
      await using(async (r, under, reports) => {
        const good = node('good-1', 7001);
        await r.register(svc('shop', '1', [good]));
        const w = collect(r);
        try {
          const base = { name: 'shop', version: '1' };
          await under.writeRaw!({ ...base, node: { id: 'bad-space', address: '127.0.0.1 x', port: 1 } });
          await under.writeRaw!({ ...base, node: { id: 'bad-port', address: '127.0.0.1', port: 0 } });
          await under.writeRaw!({ ...base, node: { id: 'bad\nid', address: '127.0.0.1', port: 2 } });
          await under.writeRaw!({ ...base, node: { id: 'bad-url', address: 'http://127.0.0.1/', port: 3 } });
          await under.writeRaw!({ ...base, node: { id: 'bad-meta', address: '127.0.0.1', port: 4, metadata: { k: 'a\nb' } } });
          await under.writeRaw!({ name: 'forged\nservice', version: '1', node: { id: 'f1', address: '127.0.0.1', port: 5 } });
          await under.writeRaw!({ name: 'shop', version: 'v 2', node: { id: 'v2', address: '127.0.0.1', port: 6 } });
          assert.deepEqual(await r.getService('shop'), [svc('shop', '1', [good])]);
          assert.deepEqual(await r.getService('forged\nservice'), []);
          assert.deepEqual((await r.listServices()).map((s) => s.name), ['shop']);
          assert.ok(reports.length > 0, 'the skips were reported');
          for (const rep of reports) {
            assert.ok(rep.dropped >= 1);
            assert.match(rep.problem, /^(?:Name|Version|node "[^"]*"\.(?:Address|Port|Id|Metadata\.k)|Nodes?\b|the value)/, rep.problem);
            assert.doesNotMatch(rep.service + rep.problem, /[\u0000-\u001f]/);
          }
          // The watch keeps reporting real changes, with only the good nodes.
          const good2 = node('good-2', 7002);
          await r.register(svc('shop', '1', [good2]));
          const e = await w.next((ev) => ev.service.name === 'shop' && ev.service.nodes.some((n) => n.id === 'good-2'));
          assert.deepEqual(e.service.nodes.map((n) => n.id), ['good-1', 'good-2']);
          assert.ok(w.events.every((ev) => ev.service.name === 'shop'), 'no event for the forged name');
        } finally {
          w.watcher.stop();
        }
      });
    });
  });
}
