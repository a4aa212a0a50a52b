/**
 * `mesh proxy -c FILE` as real processes on loopback, in front of plain node:http backends
 * (test/fixtures/gateway-helpers.ts): routing by exact path, prefix and regex in file order,
 * prefix_rewrite, weighted round robin over static hosts, a registry service, no route, dead hosts
 * (502, 503, outlier and health-check flags in admin /clusters), /routes, /stats, WebSocket, and
 * configuration errors.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { freePort, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { http, registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';

interface ProxyProcess {
  proc: RunningProcess;
  admin: string;
  /** The URL of a listener, from the line the proxy printed once bound (listeners use port 0). */
  listener(name: string): string;
  stop(): Promise<number | null>;
}

async function startProxy(configFile: string, extra: string[] = []): Promise<ProxyProcess> {
  const proc = startProcess(['proxy', '-c', configFile, '--log_level=warning', ...extra]);
  const line = await proc.waitForOutput(/mesh proxy admin on \S+/, 15000);
  await proc.waitForOutput(/mesh proxy ready/, 15000);
  const listener = (name: string) => {
    const m = new RegExp(`mesh proxy listener ${name} on (\\S+)`).exec(proc.output());
    if (!m) throw new Error(`no listener ${name} printed:\n${proc.output()}`);
    return m[1]!;
  };
  return { proc, admin: line.replace('mesh proxy admin on ', ''), listener, stop: () => proc.stop() };
}

/** The lines of admin /clusters that start with prefix. */
function linesOf(text: string, prefix: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(prefix));
}

function wsOpen(url: string): Promise<{ ws: WebSocket; first: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('message', (data) => resolve({ ws, first: data.toString() }));
    ws.once('error', reject);
  });
}

describe('mesh proxy -c FILE', () => {
  const dir = tempDir('mesh-proxy-');
  let registry: Registry;
  let a: PlainApp;
  let b: PlainApp;
  let web: PlainApp;
  let deadPort: number;
  let deadPort2: number;
  let stat: ProxyProcess; // static clusters only
  let dyn: ProxyProcess; // with a registry service route (config in JSON)
  let ingress: string;
  let second: string;
  let edge: string;

  before(async () => {
    [a, b, web] = await Promise.all([startPlainApp('a'), startPlainApp('b'), startPlainApp('web')]);
    // Ports nothing listens on: refused connections are the point of these two.
    [deadPort, deadPort2] = await Promise.all([freePort(), freePort()]);
    registry = createRegistry('local', dir.path);
    await registerPlain(registry, 'go.mesh.srv.web', web.port);


    const staticFile = join(dir.path, 'proxy-static.yaml');
    writeFileSync(
      staticFile,
      `# static clusters only
admin: { address: 127.0.0.1:0 }
listeners:
  - name: ingress
    address: 127.0.0.1:0
    routes:
      - match: { path: /exact }
        cluster: a
      - match: { prefix: /api/v2/ }
        cluster: b
      - match: { prefix: /api/ }
        cluster: a
        prefix_rewrite: /
      - match: { regex: '/v[0-9]+/.*' }
        cluster: b
      - match: { prefix: /exact }
        cluster: b
      - match: { prefix: /weighted/ }
        cluster: weighted
      - match: { prefix: /dead/ }
        cluster: dead
      - match: { prefix: /checked/ }
        cluster: checked
      - match: { prefix: /ws/ }
        cluster: a
        prefix_rewrite: /socket/
  - name: second
    address: 127.0.0.1:0
    routes:
      - match: { prefix: / }
        cluster: b
clusters:
  - name: a
    hosts: [127.0.0.1:${a.port}]
  - name: b
    hosts: [127.0.0.1:${b.port}]
  - name: weighted
    lb_policy: round_robin
    hosts: [127.0.0.1:${a.port}, { address: 127.0.0.1, port: ${b.port}, weight: 3 }]
  - name: dead
    hosts: [127.0.0.1:${deadPort}]
    circuit_breakers: { default: { max_requests: 100 } }
    outlier_detection: { consecutive_5xx: 2 }
    panic_threshold: 0
  - name: checked
    hosts: [127.0.0.1:${a.port}, 127.0.0.1:${deadPort2}]
    health_check: { path: /healthz, interval: 200ms, timeout: 500ms }
`,
    );
    const dynFile = join(dir.path, 'proxy-registry.json');
    writeFileSync(
      dynFile,
      JSON.stringify(
        {
          // not an address of this machine: the proxy starts only if --admin_address wins
          admin: { address: '192.0.2.1:9901' },
          listeners: [
            {
              name: 'edge',
              address: '127.0.0.1:0',
              routes: [
                { match: { prefix: '/static/' }, cluster: 'a' },
                { match: { prefix: '/missing/' }, service: 'go.mesh.srv.missing' },
                { match: { prefix: '/' }, service: 'go.mesh.srv.web' },
              ],
            },
          ],
          clusters: [{ name: 'a', hosts: [`127.0.0.1:${a.port}`] }],
        },
        null,
        2,
      ),
    );
    [stat, dyn] = await Promise.all([
      startProxy(staticFile),
      // --admin_address wins over admin.address of the file.
      startProxy(dynFile, [`--registry_address=${dir.path}`, '--admin_address=127.0.0.1:0']),
    ]);
    ingress = stat.listener('ingress');
    second = stat.listener('second');
    edge = dyn.listener('edge');
  });

  after(async () => {
    await Promise.all([stat?.stop(), dyn?.stop()]);
    await Promise.all([a?.close(), b?.close(), web?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  it('prints its listeners and admin address', () => {
    const out = stat.proc.output();
    assert.match(out, new RegExp(`mesh proxy listener ingress on ${ingress.replace(/\./g, '\\.')} \\(9 routes\\)`));
    assert.match(out, new RegExp(`mesh proxy listener second on ${second.replace(/\./g, '\\.')} \\(1 route\\)`));
    assert.match(out, /mesh proxy ready: 5 static clusters, no registry/);
    assert.match(dyn.admin, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.notEqual(dyn.admin, stat.admin);
  });

  it('routes by exact path, prefix and whole-path regex, first match in file order; rewrites prefixes', async () => {
    const to = async (base: string, path: string) => {
      const res = await http('GET', `${base}${path}`);
      assert.equal(res.status, 200, `${path}: ${res.text}`);
      const body = res.json();
      return `${body.app} ${body.url}`;
    };
    assert.equal(await to(ingress, '/exact'), 'a /exact');
    assert.equal(await to(ingress, '/exact?x=1'), 'a /exact?x=1'); // the query is not matched
    assert.equal(await to(ingress, '/exact/more'), 'b /exact/more'); // the path route does not match; the later prefix does
    assert.equal(await to(ingress, '/exactly'), 'b /exactly');
    assert.equal(await to(ingress, '/api/v2/users'), 'b /api/v2/users'); // listed before /api/
    assert.equal(await to(ingress, '/api/users/7?q=a%20b'), 'a /users/7?q=a%20b'); // prefix_rewrite, query kept
    assert.equal(await to(ingress, '/api/'), 'a /');
    assert.equal(await to(ingress, '/v1/things'), 'b /v1/things');
    assert.equal(await to(second, '/anything/at/all'), 'b /anything/at/all');
    // The regex matches the whole path: /x/v1/y is not under it.
    const none = await http('GET', `${ingress}/x/v1/y`);
    assert.equal(none.status, 404);
    // Headers and body go through; X-Forwarded-* are set.
    const posted = await http('POST', `${ingress}/api/echo`, { headers: { 'content-type': 'text/plain', 'x-custom': 'yes' }, body: 'hello' });
    assert.equal(posted.status, 200);
    const body = posted.json();
    assert.equal(body.body, 'hello');
    assert.equal(body.headers['x-custom'], 'yes');
    assert.equal(body.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(body.headers['x-forwarded-proto'], 'http');
    assert.equal(body.headers['x-forwarded-host'], `127.0.0.1:${new URL(ingress).port}`);
  });

  it('no route: 404 error JSON with id go.mesh.proxy', async () => {
    const res = await http('GET', `${ingress}/nowhere?x=1`);
    assert.equal(res.status, 404);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.text, '{"id":"go.mesh.proxy","code":404,"detail":"no route for /nowhere on listener ingress","status":"Not Found"}');
  });

  it('weighted round robin over two static hosts: 1:3', async () => {
    const counts: Record<string, number> = { a: 0, b: 0 };
    for (let i = 0; i < 40; i++) {
      const res = await http('GET', `${ingress}/weighted/${i}`);
      assert.equal(res.status, 200);
      counts[res.json().app]++;
    }
    assert.deepEqual(counts, { a: 10, b: 30 });
  });

  it('a dead static host: 502, then ejected by outlier detection: 503; /clusters shows the flags', async () => {
    const first = await http('GET', `${ingress}/dead/x`);
    assert.equal(first.status, 502, first.text);
    assert.equal(first.json().id, 'go.mesh.proxy');
    assert.match(first.json().detail, new RegExp(`proxy to dead on 127\\.0\\.0\\.1:${deadPort}: `));
    const second503 = await http('GET', `${ingress}/dead/x`);
    assert.equal(second503.status, 503, second503.text);
    assert.equal(second503.json().id, 'go.mesh.proxy');
    assert.match(second503.json().detail, /no healthy upstream/);

    const clusters = (await http('GET', `${stat.admin}/clusters`)).text;
    assert.equal(clusters.split('\n')[0], 'version_info::static');
    const h = `dead::127.0.0.1:${deadPort}::`;
    assert.deepEqual(linesOf(clusters, 'dead::'), [
      'dead::outlier::success_rate_average::-1',
      'dead::outlier::success_rate_ejection_threshold::-1',
      'dead::default_priority::max_connections::1024',
      'dead::default_priority::max_pending_requests::1024',
      'dead::default_priority::max_requests::100',
      'dead::default_priority::max_retries::3',
      'dead::high_priority::max_connections::1024',
      'dead::high_priority::max_pending_requests::1024',
      'dead::high_priority::max_requests::1024',
      'dead::high_priority::max_retries::3',
      'dead::added_via_api::false',
      `${h}cx_active::0`,
      `${h}cx_connect_fail::2`,
      `${h}cx_total::0`,
      `${h}rq_active::0`,
      `${h}rq_error::2`,
      `${h}rq_success::0`,
      `${h}rq_timeout::0`,
      `${h}rq_total::2`,
      `${h}hostname::127.0.0.1`,
      `${h}health_flags::/failed_outlier_check`,
      `${h}weight::1`,
      `${h}region::`,
      `${h}zone::`,
      `${h}canary::false`,
      `${h}success_rate::-1`,
      `${h}version::`,
    ]);
    for (const name of ['a', 'b', 'weighted', 'dead', 'checked']) assert.ok(clusters.includes(`\n${name}::added_via_api::false\n`), name);
    const json = (await http('GET', `${stat.admin}/clusters?format=json`)).json();
    assert.equal(json.version_info, 'static');
    const dead = json.cluster_statuses.find((c: { name: string }) => c.name === 'dead');
    assert.equal(dead.added_via_api, false);
  });

  it('active health checks keep traffic off a failing host', async () => {
    await waitFor(async () => {
      const text = (await http('GET', `${stat.admin}/clusters`)).text;
      return text.includes(`checked::127.0.0.1:${deadPort2}::health_flags::/failed_active_hc\n`) && text.includes(`checked::127.0.0.1:${a.port}::health_flags::healthy\n`);
    }, 15_000); // checks every 200 ms: a loaded machine (CI) has been seen to take over 5 s
    for (let i = 0; i < 6; i++) {
      const res = await http('GET', `${ingress}/checked/${i}`);
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json().app, 'a');
    }
    assert.ok(a.received.some((r) => r.url === '/healthz'), 'the live host was health-checked');
  });

  it('admin /routes: one table per listener, version_info static, in file order', async () => {
    const res = await http('GET', `${stat.admin}/routes`);
    assert.equal(res.status, 200);
    const dump = res.json<any[]>();
    assert.deepEqual(
      dump.map((t) => [t.route_config_name, t.version_info, t.route_table_dump.length]),
      [
        ['ingress', 'static', 9],
        ['second', 'static', 1],
      ],
    );
    assert.deepEqual(dump[0].route_table_dump.slice(0, 4), [
      { match: { path: '/exact' }, cluster: 'a' },
      { match: { prefix: '/api/v2/' }, cluster: 'b' },
      { match: { prefix: '/api/' }, cluster: 'a', prefix_rewrite: '/' },
      { match: { regex: '/v[0-9]+/.*' }, cluster: 'b' },
    ]);
    const one = (await http('GET', `${stat.admin}/routes?route_config_name=second`)).text;
    assert.equal(one, '[\n{\n"version_info": "static",\n"route_config_name": "second",\n"route_table_dump": [{"match":{"prefix":"/"},"cluster":"b"}]\n}\n]\n');
  });

  it('admin /stats: http.<listener>.downstream_rq_*', async () => {
    const stats = (await http('GET', `${stat.admin}/stats?filter=^http\\.`)).text;
    const value = (name: string) => Number(new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(stats)?.[1] ?? NaN);
    assert.ok(value('http.ingress.downstream_rq_total') >= 50, stats);
    assert.ok(value('http.ingress.downstream_rq_2xx') >= 40, stats);
    assert.ok(value('http.ingress.downstream_rq_4xx') >= 1, stats);
    assert.ok(value('http.ingress.downstream_rq_5xx') >= 2, stats);
    assert.ok(value('http.second.downstream_rq_total') >= 1, stats);
  });

  it('WebSocket upgrades are proxied (with prefix_rewrite); an upgrade with no route is a 404', async () => {
    const { ws, first } = await wsOpen(`${ingress.replace('http', 'ws')}/ws/chat?room=1`);
    const hello = JSON.parse(first);
    assert.equal(hello.hello, 'a');
    assert.equal(hello.url, '/socket/chat?room=1');
    assert.equal(hello.forwardedFor, '127.0.0.1');
    const echoed = new Promise<string>((r) => ws.once('message', (d) => r(d.toString())));
    ws.send('ping');
    assert.equal(await echoed, 'echo:ping');
    ws.close();
    await assert.rejects(wsOpen(`${ingress.replace('http', 'ws')}/nowhere`), /Unexpected server response: 404/);
  });

  it('a registry service route: discovered in the local registry; /routes and /clusters carry the registry revision', async () => {
    const res = await http('GET', `${edge}/hello?x=1`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json().app, 'web');
    assert.equal(res.json().url, '/hello?x=1');
    const st = await http('GET', `${edge}/static/x`);
    assert.equal(st.json().app, 'a');
    const missing = await http('GET', `${edge}/missing/x`);
    assert.equal(missing.status, 404);
    assert.equal(missing.json().id, 'go.mesh.proxy');
    assert.match(missing.json().detail, /service go\.mesh\.srv\.missing: not found/);

    const clusters = (await http('GET', `${dyn.admin}/clusters`)).text;
    const version = clusters.split('\n')[0]!;
    assert.match(version, /^version_info::\d+$/);
    assert.ok(clusters.includes('\na::added_via_api::false\n'), clusters);
    assert.ok(clusters.includes('\ngo.mesh.srv.web::added_via_api::true\n'), clusters);
    assert.ok(clusters.includes(`\ngo.mesh.srv.web::127.0.0.1:${web.port}::health_flags::healthy\n`), clusters);
    const routes = (await http('GET', `${dyn.admin}/routes`)).json<any[]>();
    assert.equal(routes.length, 1);
    assert.equal(routes[0].route_config_name, 'edge');
    assert.equal(`version_info::${routes[0].version_info}`, version);
    assert.deepEqual(routes[0].route_table_dump[2], { match: { prefix: '/' }, service: 'go.mesh.srv.web' });
  });
});

describe('mesh proxy: configuration errors stop it at start', () => {
  const dir = tempDir('mesh-proxy-bad-');
  after(() => dir.cleanup());

  const write = (name: string, text: string) => {
    const file = join(dir.path, name);
    writeFileSync(file, text);
    return file;
  };
  const cluster = 'clusters:\n  - name: backend\n    hosts: [127.0.0.1:9]\n';
  const listener = (route: string) => `listeners:\n  - name: l\n    address: 127.0.0.1:0\n    routes:\n      - ${route}\n`;

  it('exits 1 naming the file, the line and the field; exits 2 without -c', async () => {
    const cases: Array<[string, string, RegExp]> = [
      ['unknown.yaml', listener('{ match: { prefix: / }, cluster: backend, retries: 3 }') + cluster, /unknown\.yaml:5:\d+: listeners\[0\]\.routes\[0\]\.retries: unknown field/],
      ['type.yaml', listener('{ match: { prefix: / }, cluster: backend }') + 'clusters:\n  - name: backend\n    hosts: [{ address: 127.0.0.1, port: eighty }]\n', /type\.yaml:8:\d+: clusters\[0\]\.hosts\[0\]\.port: must be an integer/],
      ['cluster.yaml', listener('{ match: { prefix: / }, cluster: backnd }') + cluster, /cluster\.yaml:5:\d+: listeners\[0\]\.routes\[0\]\.cluster: unknown cluster "backnd" \(clusters: backend\)/],
      ['regex.yaml', listener("{ match: { regex: '^/(x' }, cluster: backend }") + cluster, /regex\.yaml:5:\d+: listeners\[0\]\.routes\[0\]\.match\.regex: invalid regex "\^\/\(x": missing closing \): `\^\/\(x`$/m],
      ['dup.yaml', listener('{ match: { prefix: / }, cluster: backend }') + cluster + '  - name: backend\n    hosts: [127.0.0.1:10]\n', /dup\.yaml:9:\d+: clusters\[1\]\.name: cluster "backend" is defined twice/],
      ['duration.yaml', listener('{ match: { prefix: / }, cluster: backend }') + cluster + '    health_check: { path: /h, timeout: 1 }\n', /duration\.yaml:9:\d+: clusters\[0\]\.health_check\.timeout: must be a duration/],
      ['syntax.yaml', 'listeners:\n  - name: l\n   address: x\n', /syntax\.yaml:\d+:\d+: invalid YAML/],
    ];
    const results = await Promise.all(cases.map(([name, text]) => runCli(['proxy', '-c', write(name, text), '--admin_address=off'])));
    results.forEach((r, i) => {
      const [name, , re] = cases[i]!;
      assert.equal(r.code, 1, `${name}: ${r.stderr}`);
      assert.match(r.stderr, /^mesh: proxy config /, name);
      assert.match(r.stderr, re, name);
      assert.equal(r.stdout, '', name);
    });
    const [none, extra, missing] = await Promise.all([
      runCli(['proxy']),
      runCli(['proxy', '-c', join(dir.path, 'unknown.yaml'), 'extra']),
      runCli(['proxy', '-c', join(dir.path, 'nope.yaml')]),
    ]);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /the proxy needs a configuration file: mesh proxy -c FILE/);
    assert.equal(extra.code, 2);
    assert.match(extra.stderr, /proxy takes no arguments \(got "extra"\)/);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /proxy config .*nope\.yaml: cannot read: no such file/);
  });
});
