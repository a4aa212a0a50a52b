/**
 * A gateway cut off from etcd, on the hosts of test/fixtures/netns.ts (etcd in ns a, greeter-srv
 * in ns b, `mesh api` in ns c; calls come from ns c). Only ns c loses etcd: ns a drops what it
 * sends there, while b keeps refreshing its registration and c keeps reaching b.
 *
 * - The gateway keeps its last view while it cannot read etcd: calls go on past the nodes' TTL,
 *   the gauge registry.stale_seconds rises, one line says the view went stale; once the link is
 *   back the view is read again, the gauge is 0 and one line says so.
 * - Calls whose whole budget was spent waiting for the registry (etcd stopped while the gateway
 *   reads a service for the first time) are not sent once it answers: the callers get their 504
 *   and no host is charged (admin /clusters shows no error, no ejection).
 *
 * Needs root, iproute2, curl and etcd (skips loudly otherwise, see the fixture).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { ROOT, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { GATEWAY_LISTENING, OwnEtcd, printed, serviceListening } from '../fixtures/engines-common.js';
import { Hosts, IP, bins, netnsSkipReason } from '../fixtures/netns.js';

const reason = netnsSkipReason('multi-host partition test');

const SERVICE = 'go.mesh.srv.greeter';
const TTL_S = 3;
const STALE_LINE = /"msg":"registry unreachable: keeping the last known view \(nothing expires\) until it answers again"/g;
const RECOVERED_LINE = /"msg":"registry reachable again: view resynchronised"/g;

describe('multi-host: a gateway cut off from etcd', { skip: reason ?? false }, () => {
  const tmp = tempDir('mesh-partition-');
  const procs: RunningProcess[] = [];
  const hosts = new Hosts();
  let etcd: OwnEtcd;
  let srvAddress = '';
  const registry = () => ['--registry=etcd', `--registry_address=${etcd.address}`];

  /** A gateway in ns c on `port`, its admin on loopback at `admin`. */
  async function gateway(port: number, admin: number, extra: string[] = []): Promise<RunningProcess> {
    const p = hosts.nodeIn('c', ['api', ...registry(), `--address=${IP.c}:${port}`, `--admin_address=127.0.0.1:${admin}`, '--log_level=info', ...extra]);
    procs.push(p);
    await printed(p, GATEWAY_LISTENING);
    return p;
  }

  const hello = (port: number) => hosts.curlIn('c', 'POST', `http://${IP.c}:${port}/rpc`, JSON.stringify({ service: SERVICE, method: 'Say.Hello', request: { name: 'John' } }));

  /** The gateway's admin, read in ns c. */
  const adminGet = async (admin: number, path: string) => {
    const r = await hosts.curlIn('c', 'GET', `http://127.0.0.1:${admin}${path}`);
    assert.equal(r.status, 200, r.text);
    return r.text;
  };
  const stat = async (admin: number, name: string) => {
    const text = await adminGet(admin, `/stats?filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
    const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(text);
    assert.ok(m, `${name} in admin /stats:\n${text}`);
    return Number(m[1]);
  };
  const count = (p: RunningProcess, re: RegExp) => p.output().match(re)?.length ?? 0;

  before(async () => {
    await hosts.build();
    etcd = new OwnEtcd(bins.etcd!, IP.a, 2379, 2380, hosts.inNs('a'));
    await etcd.start(join(tmp.path, 'etcd'));
    const srv = hosts.nodeIn(
      'b',
      [...registry(), `--address=${IP.b}:0`, '--admin_address=127.0.0.1:0', `--register_ttl=${TTL_S}s`, '--register_interval=1s', '--log_level=warning'],
      join(ROOT, 'dist/examples/greeter-srv.js'),
    );
    procs.push(srv);
    srvAddress = await printed(srv, serviceListening(SERVICE));
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    await etcd?.kill().catch(() => undefined);
    hosts.dispose();
    tmp.cleanup();
  });

  it('keeps its last view past the nodes\' TTL, says how stale it is, and reads etcd again once it can', async () => {
    const gw = await gateway(8080, 9901);
    // The gateway knows the service (its first call read it from etcd).
    await waitFor(async () => (await hello(8080)).status === 200, 20000, 200);
    assert.equal(await stat(9901, 'registry.stale_seconds'), 0);

    await hosts.cut('c');
    let cut = true;
    try {
      // Calls keep working while the view goes stale, and after it is older than the nodes' TTL
      // (without the fix the node expired on the gateway's clock and every call was a 503).
      let calls = 0;
      const failed: string[] = [];
      await waitFor(
        async () => {
          const r = await hello(8080);
          calls++;
          if (r.status !== 200 || r.text !== '{"msg":"Hello John"}') failed.push(`call ${calls} while cut off: ${r.status} ${r.text}`);
          return failed.length > 0 || (await stat(9901, 'registry.stale_seconds')) > TTL_S + 1;
        },
        60000,
        200,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n--- gateway ---\n${gw.output()}`);
      });
      assert.deepEqual(failed, [], `every call answered while the gateway could not see etcd (${calls} calls)`);
      assert.equal(count(gw, STALE_LINE), 1, 'one line when the view goes stale');
      assert.equal(count(gw, RECOVERED_LINE), 0);
      const staleLine = gw.output().split('\n').find((l) => l.match(STALE_LINE))!;
      assert.equal(JSON.parse(staleLine).level, 'warning');

      await hosts.restore('c');
      cut = false;
      await waitFor(async () => (await stat(9901, 'registry.stale_seconds')) === 0 && count(gw, RECOVERED_LINE) === 1, 60000, 250).catch((err: Error) => {
        throw new Error(`${err.message}\n--- gateway ---\n${gw.output()}`);
      });
      assert.equal(count(gw, STALE_LINE), 1, 'still one stale line: not one per call or retry');
      const r = await hello(8080);
      assert.equal(r.status, 200, r.text);
      // The node is still the one etcd lists.
      const clusters = await adminGet(9901, '/clusters');
      assert.match(clusters, new RegExp(`^${SERVICE.replace(/\./g, '\\.')}::${srvAddress.replace(/\./g, '\\.')}::health_flags::healthy$`, 'm'));
    } finally {
      if (cut) await hosts.restore('c');
    }
  });

  it('calls whose budget was spent waiting for the registry are not sent: 504 to the callers, nothing charged to the host', async () => {
    // A gateway that has not called the service yet, with a budget shorter than its etcd reads' (5 s).
    const budgetMs = 1000;
    const CALLS = 8;
    const gw = await gateway(8090, 9911, [`--client_request_timeout=${budgetMs}ms`]);
    const pid = etcd.proc!.child.pid!;
    process.kill(pid, 'SIGSTOP');
    let calls: Array<Promise<{ status: number; text: string }>> = [];
    try {
      calls = Array.from({ length: CALLS }, () => hello(8090));
      // Every call is in the gateway, which is reading the service from etcd (its cluster is warming) ...
      await waitFor(
        async () => (await stat(9911, 'http.gateway.downstream_rq_active')) === CALLS && (await stat(9911, 'cluster_manager.warming_clusters')) === 1,
        20000,
        50,
      );
      const waiting = Date.now();
      // ... and stays so past the calls' budget: a deadline on the gateway's clock, with no event
      // to wait for; every budget started before `waiting`, so this much time spends them.
      await waitFor(() => Date.now() - waiting > budgetMs + 250, budgetMs + 5000, 50);
      assert.equal(await stat(9911, 'cluster_manager.warming_clusters'), 1, 'etcd still has not answered');
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    const answers = await Promise.all(calls);
    for (const a of answers) {
      assert.equal(a.status, 504, a.text);
      assert.equal(a.text, JSON.stringify({ id: 'go.mesh.api', code: 504, detail: `call ${SERVICE}.Say.Hello: timeout after ${budgetMs}ms`, status: 'Gateway Timeout' }));
    }
    // The host was given back untouched: never connected to, no error, no timeout, no ejection.
    const clusters = await adminGet(9911, '/clusters');
    const host = `${SERVICE.replace(/\./g, '\\.')}::${srvAddress.replace(/\./g, '\\.')}`;
    for (const line of ['rq_error::0', 'rq_timeout::0', 'cx_total::0', 'health_flags::healthy'])
      assert.match(clusters, new RegExp(`^${host}::${line}$`, 'm'), `${line} in /clusters:\n${clusters}\n--- gateway ---\n${gw.output()}`);
    assert.equal(await stat(9911, `cluster.${SERVICE}.upstream_rq_cancelled`), answers.length);
    assert.equal(await stat(9911, `cluster.${SERVICE}.outlier_detection.ejections_total`), 0);
    // The host takes calls.
    const r = await waitFor(async () => {
      const x = await hello(8090);
      return x.status === 200 ? x : undefined;
    }, 10000, 200);
    assert.deepEqual(JSON.parse(r!.text), { msg: 'Hello John' });
  });
});
