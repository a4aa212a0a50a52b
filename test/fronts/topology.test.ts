/**
 * `GET /stats/topology` of a real `mesh api --enable_stats` (docs/dashboard.md, "Topology"): the
 * process records of its registry, each admin's /traffic read by the gateway, the caller → service
 * edges with exact counts; the next reading counts only its window; one reading serves many
 * requests; an admin that hangs, refuses or lies is listed with why and never breaks the answer;
 * the sidecar's dashboard has no topology; the method and the gateway's auth apply as to /stats.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { http, waitFor } from '../helpers.js';
import { processService } from '../../src/engines/registry/processes.js';
import { startGatewayProcess } from '../fixtures/gateway-helpers.js';
import { drive } from '../dashboard-fixture.js';
import { fakeAdmin, startTopologyMesh, trafficReport, OK_PATH, BOOM_PATH, SERVICE, WEB, type TopologyMesh } from '../topology-fixture.js';
import type { TopologyJson } from '../../src/fronts/dashboard/topology.js';

const topology = async (base: string): Promise<TopologyJson> => {
  const res = await http('GET', `${base}/stats/topology`);
  assert.equal(res.status, 200, res.text);
  assert.equal(res.headers['content-type'], 'application/json');
  assert.equal(res.headers['cache-control'], 'no-store');
  return res.json() as TopologyJson;
};
/** The next reading after `after` (the cached one is answered until it is stale). */
const nextReading = async (base: string, after: TopologyJson): Promise<TopologyJson> =>
  (await waitFor(async () => {
    const t = await topology(base);
    return t.timestamp > after.timestamp ? t : undefined;
  }, 10000, 100))!;
const edge = (t: TopologyJson, from: string, to: string) => t.edges.find((e) => e.from === from && e.to === to);

describe('GET /stats/topology of mesh api', () => {
  let mesh: TopologyMesh;

  before(async () => {
    mesh = await startTopologyMesh([], ['--enable_stats']);
  });
  after(async () => {
    await mesh?.close();
  });

  it('the edges of every recorded process, since they started, then over the window', async () => {
    assert.deepEqual(new Set(await drive(mesh.gw.url, OK_PATH, 8)), new Set([200]));
    assert.deepEqual(new Set(await drive(mesh.gw.url, BOOM_PATH, 2)), new Set([500]));
    assert.deepEqual(new Set(await mesh.callFromWeb(5)), new Set([200]));
    const first = await topology(mesh.gw.url);
    assert.equal(first.since_start, true);
    assert.deepEqual(first.processes.map((p) => [p.kind, p.name, p.status]), [['api', '', 'ok'], ['sidecar', WEB, 'ok']]);
    assert.equal(first.processes_skipped, 0);
    assert.deepEqual(first.nodes, ['api', SERVICE, WEB]);
    const api = edge(first, 'api', SERVICE)!;
    assert.deepEqual([api.requests, api.success, api.mtls], [10, 0.8, 0]);
    assert.equal(typeof api.p99_ms, 'number');
    assert.ok(api.rps! > 0);
    const web = edge(first, WEB, SERVICE)!;
    assert.deepEqual([web.requests, web.success], [5, 1]);
    assert.deepEqual(first.services.map((s) => [s.name, s.requests]), [[SERVICE, 15]]);

    // The next reading: only what happened since the one before.
    assert.deepEqual(new Set(await mesh.callFromWeb(3)), new Set([200]));
    const second = await nextReading(mesh.gw.url, first);
    assert.equal(second.since_start, false);
    assert.ok(second.window_s >= 1, `window ${second.window_s}`);
    assert.deepEqual([edge(second, WEB, SERVICE)!.requests, edge(second, WEB, SERVICE)!.success], [3, 1]);
    assert.deepEqual([edge(second, 'api', SERVICE)!.requests, edge(second, 'api', SERVICE)!.success], [0, null]);
  });

  it('one reading serves many requests: 20 at once read a fake admin once', async () => {
    const fake = await fakeAdmin(mesh.registry, 'fake-1-aaaaaa', 'go.mesh.srv.fake', () => trafficReport('fake-1-aaaaaa', 'go.mesh.srv.fake', { [SERVICE]: 7 }));
    try {
      const seen = (await waitFor(async () => {
        const t = await topology(mesh.gw.url);
        return t.processes.some((p) => p.name === 'go.mesh.srv.fake') ? t : undefined;
      }, 10000, 100))!;
      const hits = fake.hits;
      assert.equal(hits, 1);
      const all = await Promise.all(Array.from({ length: 20 }, () => topology(mesh.gw.url)));
      // Either the reading seen (still fresh) or one new reading shared by all.
      assert.ok(fake.hits <= hits + 1, `hits ${fake.hits}`);
      assert.ok(new Set(all.map((t) => t.timestamp)).size <= 2);
      assert.ok(edge(seen, 'go.mesh.srv.fake', SERVICE));
    } finally {
      await fake.close();
    }
  });

  it('attacker: an admin that hangs, refuses or lies is listed with why; the answer still comes, with the others\' edges', async () => {
    const hang = await fakeAdmin(mesh.registry, 'hang-1-aaaaaa', 'go.mesh.srv.hang', () => ({}), { hang: true });
    const liar = await fakeAdmin(mesh.registry, 'liar-1-aaaaaa', 'go.mesh.srv.liar', () => '{"process":{"id":"x","kind":"api","name":"<b>","mtls":"off","started_ms":1},"latency_bounds_ms":[1],"clusters":[]}');
    const gone = await fakeAdmin(mesh.registry, 'gone-1-aaaaaa', 'go.mesh.srv.gone', () => ({}));
    const gonePort = gone.port;
    // The server goes, the record stays: connection refused.
    await gone.close();
    await mesh.registry.register(processService(gone.record), { ttlMs: 60_000 });
    try {
      const t = (await waitFor(async () => {
        const started = Date.now();
        const x = await topology(mesh.gw.url);
        return x.processes.some((p) => p.name === 'go.mesh.srv.hang') && x.processes.some((p) => p.name === 'go.mesh.srv.gone') ? { x, ms: Date.now() - started } : undefined;
      }, 15000, 100))!;
      const status = (name: string) => t.x.processes.find((p) => p.name === name)!.status;
      assert.equal(status('go.mesh.srv.hang'), 'cannot read /traffic (no answer within 1000 ms)');
      assert.equal(status('go.mesh.srv.liar'), '/traffic did not answer a traffic report');
      assert.match(status('go.mesh.srv.gone'), new RegExp(`^cannot read /traffic \\(.*ECONNREFUSED.*${gonePort}.*\\)$`));
      assert.equal(status(WEB), 'ok');
      assert.ok(edge(t.x, WEB, SERVICE), 'the live processes\' edges are there');
      assert.ok(t.x.nodes.includes('go.mesh.srv.hang'), 'a process down is a node');
      assert.ok(t.ms < 5000, `answered in ${t.ms} ms`);
    } finally {
      await hang.close();
      await liar.close();
      await mesh.registry.deregister(processService(gone.record));
    }
  });

  it('GET and HEAD only; the sidecar\'s dashboard has no topology', async () => {
    const post = await http('POST', `${mesh.gw.url}/stats/topology`);
    assert.equal(post.status, 405);
    assert.equal(post.headers.allow, 'GET, HEAD');
    const side = await http('GET', `${mesh.sidecar.base}/stats/topology`);
    assert.equal(side.status, 404);
    assert.match(side.text, /no topology here: mesh api --enable_stats serves it/);
    const asset = await http('GET', `${mesh.gw.url}/stats/assets/topology.js`);
    assert.equal(asset.status, 200);
    assert.equal(asset.headers['content-type'], 'text/javascript; charset=utf-8');
    // The sidecar's page asks for no topology (no 404 in a browser's console); the gateway's does.
    const sidePage = await http('GET', `${mesh.sidecar.base}/stats`, { headers: { accept: 'text/html' } });
    assert.equal(sidePage.status, 200);
    assert.doesNotMatch(sidePage.text, /topology/);
    assert.match(sidePage.text, /<table id="clusters">/);
    const gwPage = await http('GET', `${mesh.gw.url}/stats`, { headers: { accept: 'text/html' } });
    assert.match(gwPage.text, /<script src="stats\/assets\/topology\.js" defer><\/script>/);
    assert.match(gwPage.text, /<section id="topology" hidden/);
  });

  it('behind the gateway\'s auth like /stats: no key, 401', async () => {
    const keys = join(mesh.dir, 'keys.txt');
    writeFileSync(keys, 'k-0123456789abcdef billing read\n');
    const keyed = await startGatewayProcess(mesh.dir, ['--enable_stats', '--handler=rpc', '--auth=key', `--auth_keys=${keys}`]);
    try {
      const none = await http('GET', `${keyed.url}/stats/topology`);
      const stats = await http('GET', `${keyed.url}/stats?format=json`);
      assert.equal(none.status, stats.status);
      assert.equal(none.status, 401);
      const ok = await http('GET', `${keyed.url}/stats/topology`, { headers: { authorization: 'Bearer k-0123456789abcdef' } });
      assert.equal(ok.status, 200, ok.text);
    } finally {
      await keyed.stop();
    }
  });
});
