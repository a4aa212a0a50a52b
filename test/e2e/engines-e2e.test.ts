/**
 * End to end on the real engines: framework services, `mesh sidecar` and `mesh api` as separate
 * processes, all with `--registry=etcd --broker=nats`.
 *
 *  - shared engines (MESH_TEST_ETCD_ADDRESS / MESH_TEST_NATS_ADDRESS, started by .ci/run): a call
 *    through the gateway (POST /rpc, and GET /<name>/say/hello through an API service to its
 *    backend), a call through the sidecar, an event published through the gateway's event handler
 *    and a message published by a service, both arriving at a sidecar WebSocket subscriber.
 *    Service names carry the test's pid: CI's etcd is shared by every test.
 *  - faults, on the test's OWN etcd and nats-server (free loopback ports, killed and restarted):
 *    etcd restarted (data kept, then data wiped) while a service process is registered: the
 *    service is found again within its TTL; nats-server restarted under a sidecar: a publish while
 *    it is down is a 503, and the same WebSocket subscription gets messages again once it is back.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { ROOT, engine, http, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import {
  GATEWAY_LISTENING,
  OwnEtcd,
  OwnNats,
  SIDECAR_LISTENING,
  findBinary,
  printed,
  serviceListening,
  subscribeWs,
} from '../fixtures/engines-common.js';

const SERVICE = join(ROOT, 'test/fixtures/engines-service.ts');

const etcdAddress = engine('MESH_TEST_ETCD_ADDRESS', 'etcd');
const natsAddress = engine('MESH_TEST_NATS_ADDRESS', 'NATS');
const skipShared = !etcdAddress || !natsAddress ? 'etcd and NATS not available (MESH_TEST_ETCD_ADDRESS, MESH_TEST_NATS_ADDRESS)' : false;

// The fault tests restart their own engines: they need the binaries, not just an address.
const etcdBin = findBinary('etcd');
const natsBin = findBinary('nats-server');
const missingBins = [!etcdBin && 'etcd', !natsBin && 'nats-server'].filter(Boolean).join(' and ');
const skipFaults = skipShared || (missingBins ? `the ${missingBins} binary is not on PATH, /usr/bin or /usr/sbin (apt-get install etcd-server nats-server)` : false);
if (skipFaults && !skipShared) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${skipFaults}`);
  console.warn(`SKIP engine fault tests: ${skipFaults}`);
}

const QUIET = ['--log_level=warning', '--admin_address=off'];

function engineFlags(etcd: string, nats: string): string[] {
  return ['--registry=etcd', `--registry_address=${etcd}`, '--broker=nats', `--broker_address=${nats}`];
}

function startService(role: 'backend' | 'api', name: string, flags: string[]): RunningProcess {
  return startProcess(['--import', 'tsx', SERVICE, role, name, ...flags], {}, '');
}

interface Answer {
  status: number;
  text: string;
  json: () => any;
}

const post = (url: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> =>
  http('POST', url, { headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) });

const get = (url: string): Promise<Answer> => http('GET', url);

async function stopAll(procs: RunningProcess[]): Promise<void> {
  await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
}

describe('engines end to end: service, sidecar and gateway processes on etcd + NATS', { skip: skipShared }, () => {
  const name = `e2e${process.pid}x${Date.now() % 100000}`;
  const backendName = `go.mesh.srv.${name}`;
  const procs: RunningProcess[] = [];
  let gateway = '';
  let eventGateway = '';
  let sidecar = '';

  before(async () => {
    const flags = engineFlags(etcdAddress!, natsAddress!);
    // Short TTL: a run that dies leaves nothing for long in the shared etcd.
    const svcFlags = [...flags, ...QUIET, '--register_ttl=10s', '--register_interval=3s'];
    const backend = startService('backend', name, svcFlags);
    const api = startService('api', name, svcFlags);
    const gw = startProcess(['api', ...flags, ...QUIET, '--address=127.0.0.1:0']);
    const evGw = startProcess(['api', ...flags, ...QUIET, '--address=127.0.0.1:0', '--handler=event']);
    const sc = startProcess(['sidecar', ...flags, ...QUIET, '--address=127.0.0.1:0']);
    procs.push(backend, api, gw, evGw, sc);
    [gateway, eventGateway, sidecar] = await Promise.all([
      printed(gw, GATEWAY_LISTENING),
      printed(evGw, GATEWAY_LISTENING),
      printed(sc, SIDECAR_LISTENING),
      printed(backend, serviceListening(backendName)),
      printed(api, serviceListening(`go.mesh.api.${name}`)),
    ]);
  });
  after(() => stopAll(procs));

  it('a call through the gateway (POST /rpc) reaches the service found in etcd', async () => {
    const res = await waitFor<Answer | undefined>(async () => {
      const r = await post(`${gateway}/rpc`, { service: backendName, method: 'Say.Hello', request: { name: 'John' } });
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.equal(res!.json().msg, 'Hello John');
  });

  it('a call through the gateway API handler: /<name>/say/hello -> API service -> backend', async () => {
    const res = await waitFor<Answer | undefined>(async () => {
      const r = await get(`${gateway}/${name}/say/hello?name=John`);
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.equal(res!.json().message, 'Hello John');
    assert.match(res!.json().backend, new RegExp(`^${backendName}-`));
  });

  it('a call through the sidecar (POST /rpc)', async () => {
    const res = await waitFor<Answer | undefined>(async () => {
      const r = await post(`${sidecar}/rpc`, { service: backendName, method: 'Say.Hello', request: { name: 'Side' } });
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.equal(res!.json().msg, 'Hello Side');
  });

  it('an event through the gateway (--handler=event) arrives at a sidecar WebSocket subscriber over NATS', async () => {
    const topic = `go.mesh.api.${name}`;
    const sub = await subscribeWs(sidecar, topic);
    try {
      const res = await post(`${eventGateway}/${name}/created`, { order: 42 }, { 'x-trace': 'e2e' });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().topic, topic);
      const frame = await waitFor(() => sub.frames[0], 15000);
      assert.equal(frame.Header['Mesh-Topic'], topic);
      assert.equal(frame.Header['Mesh-Event'], 'created');
      const event = JSON.parse(frame.text);
      assert.equal(event.name, 'created');
      assert.equal(event.id, res.json().id);
      assert.deepEqual(JSON.parse(event.data), { order: 42 });
      assert.deepEqual(event.header['X-Trace'], { key: 'X-Trace', values: ['e2e'] });
    } finally {
      sub.close();
    }
  });

  it('a message a service publishes, and one posted to the sidecar, reach the WebSocket subscriber', async () => {
    const topic = `${backendName}.greeted`;
    const sub = await subscribeWs(sidecar, topic);
    try {
      const res = await post(`${gateway}/rpc`, { service: backendName, method: 'Say.Hello', request: { name: 'Pub' } });
      assert.equal(res.status, 200, res.text);
      const frame = await waitFor(() => sub.frames[0], 15000);
      assert.equal(JSON.parse(frame.text).name, 'Pub');
      assert.equal(frame.Header['Content-Type'], 'application/json');

      const posted = await post(`${sidecar}/broker?topic=${encodeURIComponent(topic)}`, 'raw bytes', { 'content-type': 'text/plain', 'x-from': 'test' });
      assert.equal(posted.status, 200, posted.text);
      const second = await waitFor(() => sub.frames[1], 15000);
      assert.equal(second.text, 'raw bytes');
      assert.equal(second.Header['X-From'], 'test');
      assert.match(second.Header['Timestamp'] ?? '', /^\d+$/);
    } finally {
      sub.close();
    }
  });
});

describe('engine faults: restarts under running processes (own etcd and nats-server)', { skip: skipFaults }, () => {
  const tmp = tempDir('mesh-engines-faults-');
  const procs: RunningProcess[] = [];
  let etcd: OwnEtcd;
  let nats: OwnNats;
  before(async () => {
    etcd = await OwnEtcd.onLoopback(etcdBin!);
    nats = await OwnNats.onLoopback(natsBin!);
    await Promise.all([etcd.start(join(tmp.path, 'etcd-1')), nats.start()]);
  });
  after(async () => {
    await stopAll(procs);
    await etcd?.kill();
    await nats?.kill();
    tmp.cleanup();
  });

  it('etcd restarted (data kept, then wiped) while a service process is registered: found again within its TTL', async () => {
    const TTL_MS = 20000;
    const name = `fault${process.pid}`;
    const backendName = `go.mesh.srv.${name}`;
    // The periodic refresh is as long as the TTL, so within this test only the registry's own
    // recovery (re-registration on reconnect) can bring the record back.
    const backend = startService('backend', name, [...engineFlags(etcd.address, nats.address), ...QUIET, `--register_ttl=${TTL_MS}ms`, `--register_interval=${TTL_MS}ms`]);
    const gw = startProcess(['api', ...engineFlags(etcd.address, nats.address), ...QUIET, '--address=127.0.0.1:0']);
    procs.push(backend, gw);
    const [, gateway] = await Promise.all([printed(backend, serviceListening(backendName)), printed(gw, GATEWAY_LISTENING)]);
    const call = async () => (await post(`${gateway}/rpc`, { service: backendName, method: 'Say.Hello', request: { name: 'F' } })).status === 200;
    await waitFor(call, 20000, 200);

    const found = async () => {
      // A fresh client each time: what etcd holds now, not what a watcher remembers.
      const reader = new EtcdRegistry(etcd.address, { callTimeoutMs: 1000 });
      try {
        return (await reader.getService(backendName)).length === 1;
      } catch {
        return false;
      } finally {
        await reader.close();
      }
    };
    assert.ok(await found());

    // 1. kill -9 and start again on the same data: the record (and its lease) survive.
    await etcd.kill();
    await etcd.start(join(tmp.path, 'etcd-1'));
    let up = Date.now();
    await waitFor(found, TTL_MS, 200);
    console.log(`etcd restarted with its data: service found ${Date.now() - up} ms after etcd was back`);

    // 2. kill -9 and start EMPTY (a rebuilt etcd): the service process writes its record again.
    await etcd.kill();
    await etcd.start(join(tmp.path, 'etcd-2'));
    up = Date.now();
    await waitFor(found, TTL_MS, 200);
    const foundAfter = Date.now() - up;
    console.log(`etcd restarted empty: service registered again ${foundAfter} ms after etcd was back (TTL ${TTL_MS} ms)`);
    assert.ok(foundAfter < TTL_MS);
    // And the gateway, whose watch had to follow the new cluster, still routes to it.
    await waitFor(call, 15000, 200);
  });

  it('nats-server restarted under a sidecar: a publish while down is a 503, the WebSocket subscription resumes', async () => {
    const sc = startProcess(['sidecar', '--registry=memory', '--broker=nats', `--broker_address=${nats.address}`, ...QUIET, '--address=127.0.0.1:0']);
    procs.push(sc);
    const sidecar = await printed(sc, SIDECAR_LISTENING);
    const topic = `faults.${process.pid}`;
    const sub = await subscribeWs(sidecar, topic);
    try {
      const publish = (text: string) => post(`${sidecar}/broker?topic=${topic}`, text, { 'content-type': 'text/plain' });
      assert.equal((await publish('before')).status, 200);
      await waitFor(() => sub.frames.some((f) => f.text === 'before'), 10000);

      await nats.kill();
      const down = await waitFor<Answer | undefined>(async () => {
        const r = await publish('while down');
        return r.status === 503 ? r : undefined;
      }, 10000, 100);
      assert.match(down!.text, /nats|connect/i);

      await nats.start();
      const up = Date.now();
      // The same WebSocket, never reopened: its NATS subscription is resent on reconnect.
      await waitFor(async () => {
        const r = await publish('after');
        return r.status === 200 && (await waitFor(() => sub.frames.some((f) => f.text === 'after'), 1000, 25).catch(() => false));
      }, 20000, 200);
      console.log(`nats restarted: the WebSocket subscriber got messages again ${Date.now() - up} ms after nats-server was back`);
      assert.equal(sub.ws.readyState, sub.ws.OPEN);
      assert.ok(!sub.frames.some((f) => f.text === 'while down'), 'a message refused with 503 was not delivered later');
    } finally {
      sub.close();
    }
  });
});
