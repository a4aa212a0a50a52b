/**
 * A route file's Gateway documents (docs/routing.md, "Gateways and listeners"): parsing and its
 * errors, how routes attach and how hostnames intersect, the route status, and a real `mesh api`
 * serving the listeners: hostnames per port, HTTPS certificates chosen by SNI, 421 for a Host of
 * another listener, reloads (hostnames and certificates change, ports do not), the own paths, and
 * the other spellings a client may try.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { parseRouteFile, RouteFileError, type RouteFile } from '../../src/edge/routes/file.js';
import { attachRoute, compileTables, intersectHostnames } from '../../src/edge/routes/listeners.js';
import { refuseGateways } from '../../src/edge/routes/live.js';
import { routeStatus } from '../../src/edge/routes/status.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, runCli, tempDir, waitFor } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { makePair } from '../tls-fixtures.js';
import { startEcho, type EchoBackend, type EchoedRequest } from '../conformance/echo.js';

const GW = 'apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n';
const RT = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

function parse(text: string): RouteFile {
  return parseRouteFile(text, '/etc/mesh/routes.yaml');
}

function error(text: string): string {
  try {
    parse(text);
  } catch (err) {
    assert.ok(err instanceof RouteFileError, String(err));
    return err.message;
  }
  assert.fail('the file was accepted');
}

describe('Gateway documents: parsing', () => {
  it('reads listeners, their hostnames, kinds and certificate files (relative to the route file)', () => {
    const file = parse(`${GW}metadata: {name: web}
spec:
  gatewayClassName: anything
  listeners:
    - {name: plain, port: 80, protocol: HTTP, hostname: "*.example.com", allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: HTTPRoute}, {group: other.io, kind: Thing}]}}
    - name: secure
      port: 443
      protocol: HTTPS
      tls: {mode: Terminate, options: {mesh-platform.dev/cert-file: certs/a.crt, mesh-platform.dev/key-file: /abs/a.key}}
---
${RT}metadata: {name: r}
spec:
  parentRefs: [{name: web, sectionName: secure, port: 443}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
`);
    assert.deepEqual(file.gateways, [
      {
        name: 'web',
        line: 1,
        listeners: [
          { name: 'plain', line: 7, port: 80, protocol: 'HTTP', hostname: '*.example.com', kinds: ['HTTPRoute', 'other.io/Thing'] },
          { name: 'secure', line: 8, port: 443, protocol: 'HTTPS', kinds: ['HTTPRoute', 'GRPCRoute'], tls: { certFile: '/etc/mesh/certs/a.crt', keyFile: '/abs/a.key' } },
        ],
      },
    ]);
    assert.deepEqual(file.routes[0]!.parentRefs, [{ name: 'web', group: 'gateway.networking.k8s.io', kind: 'Gateway', sectionName: 'secure', port: 443 }]);
  });

  it('refuses what mesh cannot serve, each with its line and a way out', () => {
    const https = (tls: string) => `${GW}metadata: {name: web}\nspec:\n  listeners:\n    - name: s\n      port: 443\n      protocol: HTTPS\n${tls}`;
    assert.equal(
      error(https('      tls: {certificateRefs: [{name: my-secret}]}\n')),
      '/etc/mesh/routes.yaml line 9: Gateway web spec.listeners[0].tls.certificateRefs: a certificateRef names a Kubernetes Secret, which mesh cannot read: give the PEM files in tls.options mesh-platform.dev/cert-file and mesh-platform.dev/key-file',
    );
    assert.equal(error(https('')), '/etc/mesh/routes.yaml line 6: Gateway web spec.listeners[0]: an HTTPS listener needs tls (with options mesh-platform.dev/cert-file and mesh-platform.dev/key-file)');
    assert.equal(error(https('      tls: {mode: Passthrough}\n')), '/etc/mesh/routes.yaml line 9: Gateway web spec.listeners[0].tls.mode: "Passthrough" is not served: mesh terminates TLS (Terminate)');
    assert.equal(
      error(https('      tls: {options: {mesh-platform.dev/cert-file: a.crt}}\n')),
      '/etc/mesh/routes.yaml line 9: Gateway web spec.listeners[0].tls.options: an HTTPS listener needs tls.options mesh-platform.dev/cert-file and mesh-platform.dev/key-file (PEM files)',
    );
    const listener = (l: string) => `${GW}metadata: {name: web}\nspec:\n  listeners:\n${l}`;
    assert.equal(error(listener('    - {name: t, port: 443, protocol: TLS}\n')), '/etc/mesh/routes.yaml line 6: Gateway web spec.listeners[0].protocol: "TLS" is not served: mesh api serves HTTP and HTTPS listeners');
    assert.equal(error(listener('    - {name: t, port: 0, protocol: HTTP}\n')), '/etc/mesh/routes.yaml line 6: Gateway web spec.listeners[0].port: must be an integer from 1 to 65535');
    assert.equal(error(listener('    - {name: t, port: 80, protocol: HTTP}\n    - {name: t, port: 81, protocol: HTTP}\n')), '/etc/mesh/routes.yaml line 7: Gateway web spec.listeners[1]: listener name "t" is used twice');
    assert.equal(
      error(listener('    - {name: a, port: 80, protocol: HTTP, hostname: a.com}\n    - {name: b, port: 80, protocol: HTTP, hostname: a.com}\n')),
      '/etc/mesh/routes.yaml line 7: Gateway web listener b: port 80 and hostname a.com are served by Gateway web listener a already (line 6)',
    );
    assert.equal(
      error(`${listener('    - {name: a, port: 8443, protocol: HTTP}\n')}---\n${GW}metadata: {name: other}\nspec:\n  listeners:\n    - name: b\n      port: 8443\n      protocol: HTTPS\n      hostname: b.com\n      tls: {options: {mesh-platform.dev/cert-file: a.crt, mesh-platform.dev/key-file: a.key}}\n`),
      '/etc/mesh/routes.yaml line 13: Gateway other listener b: port 8443 is HTTP for Gateway web listener a (line 6): listeners on one port share one protocol',
    );
    assert.equal(error(listener('    - {name: a, port: 80, protocol: HTTP, hostname: "10.0.0.1:80"}\n')), '/etc/mesh/routes.yaml line 6: Gateway web spec.listeners[0].hostname: "10.0.0.1:80" is not a hostname (lower case, optionally *. first; no port, no IP address)');
    assert.equal(error(listener('    - {name: a, port: 80, protocol: HTTP, tls: {}}\n')), '/etc/mesh/routes.yaml line 6: Gateway web spec.listeners[0].tls: an HTTP listener has no tls (protocol HTTPS terminates TLS)');
    assert.equal(error(`${GW}metadata: {name: web}\nspec:\n  listeners: []\n`), '/etc/mesh/routes.yaml line 5: Gateway web spec.listeners: listeners: at least one listener is needed');
  });

  it('is refused by the front ends that serve routes only (sidecar, mesh proxy, xds, envoy)', () => {
    const file = parse(`${RT}metadata: {name: r}\nspec:\n  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]\n---\n${GW}metadata: {name: web}\nspec:\n  listeners: [{name: a, port: 80, protocol: HTTP}]\n`);
    assert.throws(() => refuseGateways(file, 'mesh sidecar'), { message: '/etc/mesh/routes.yaml line 7: Gateway web: Gateway documents are served by mesh api only; mesh sidecar serves HTTPRoute documents' });
  });
});

describe('Gateway documents: attaching routes', () => {
  it('intersects hostnames as the Gateway API does', () => {
    assert.deepEqual(intersectHostnames(undefined, ['a.com']), ['a.com']);
    assert.deepEqual(intersectHostnames(undefined, []), []);
    assert.deepEqual(intersectHostnames('a.com', []), ['a.com']);
    assert.deepEqual(intersectHostnames('*.wildcard.io', ['wildcard.io', 'foo.wildcard.io', 'foo.bar.wildcard.io']), ['foo.wildcard.io', 'foo.bar.wildcard.io']);
    assert.deepEqual(intersectHostnames('very.specific.com', ['*.specific.com']), ['very.specific.com']);
    assert.deepEqual(intersectHostnames('*.a.io', ['*.b.a.io']), ['*.b.a.io']);
    assert.deepEqual(intersectHostnames('*.b.a.io', ['*.a.io']), ['*.b.a.io']);
    assert.equal(intersectHostnames('*.a.io', ['*.b.io', 'a.io']), undefined);
    // A wildcard is one label or more: `*.com` does not take `com`, and no suffix game (`evilcom`).
    assert.equal(intersectHostnames('*.com', ['com', 'evilcom']), undefined);
  });

  it('says why a route attached to nothing, in the route status', () => {
    const file = parse(`${GW}metadata: {name: web}
spec:
  listeners:
    - {name: a, port: 80, protocol: HTTP, hostname: a.com}
    - {name: only-grpc, port: 81, protocol: HTTP, allowedRoutes: {kinds: [{kind: GRPCRoute}]}}
---
${RT}metadata: {name: ok}
spec:
  parentRefs: [{name: web}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${RT}metadata: {name: nogateway}
spec:
  parentRefs: [{name: elsewhere}, {name: web, kind: Service, group: ""}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${RT}metadata: {name: nosection}
spec:
  parentRefs: [{name: web, sectionName: b}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${RT}metadata: {name: kinds}
spec:
  parentRefs: [{name: web, port: 81}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${RT}metadata: {name: hosts}
spec:
  parentRefs: [{name: web, sectionName: a}]
  hostnames: [b.com]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${RT}metadata: {name: own}
spec:
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
`);
    const accepted = Object.fromEntries(routeStatus(file).map((s) => [s.route, { ...s.conditions[0], listeners: s.listeners }]));
    assert.deepEqual(accepted.ok, { type: 'Accepted', status: 'True', reason: 'Accepted', message: 'the route is in use on web/a', listeners: ['web/a'] });
    assert.deepEqual(accepted.nogateway, {
      type: 'Accepted',
      status: 'False',
      reason: 'NoMatchingParent',
      message: 'parentRefs[0] (Gateway elsewhere): no Gateway of that name in the file; parentRefs[1] (Service web): no Gateway of that name in the file',
      listeners: [],
    });
    assert.equal(accepted.nosection!.message, 'parentRefs[0] (Gateway web sectionName b): Gateway web has no such listener');
    assert.equal(accepted.kinds!.reason, 'NotAllowedByListeners');
    assert.equal(accepted.hosts!.reason, 'NoMatchingListenerHostname');
    assert.deepEqual(accepted.own, { type: 'Accepted', status: 'True', reason: 'Accepted', message: "the route is in use on the front end's own listener (no parentRefs)", listeners: undefined });
    // The front end's own listener serves only the route without parentRefs; port 80 only `ok`, port 81 none.
    const tables = compileTables(file);
    assert.deepEqual(tables.main.inOrder().map((e) => e.route.name), ['own']);
    assert.deepEqual(tables.ports.get(80)!.listeners[0]!.table.inOrder().map((e) => [e.route.name, e.hostname]), [['ok', 'a.com']]);
    assert.equal(tables.ports.get(81)!.listeners[0]!.table.size, file.routes.length);
    assert.deepEqual(tables.ports.get(81)!.listeners[0]!.table.inOrder(), []);
    assert.deepEqual(attachRoute(file.routes[0]!, file.gateways).refused, []);
  });

  it('attaches a GRPCRoute as an HTTPRoute: by parentRefs, to listeners that allow GRPCRoute (the default), hostnames intersected', () => {
    const GR = 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\n';
    const file = parse(`${GW}metadata: {name: web}
spec:
  listeners:
    - {name: grpc, port: 80, protocol: HTTP, hostname: "*.example.com"}
    - {name: http-only, port: 81, protocol: HTTP, allowedRoutes: {kinds: [{kind: HTTPRoute}]}}
---
${GR}metadata: {name: on-grpc}
spec:
  parentRefs: [{name: web}]
  hostnames: [api.example.com, other.net]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${GR}metadata: {name: refused}
spec:
  parentRefs: [{name: web, port: 81}]
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
---
${GR}metadata: {name: own}
spec:
  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]
`);
    assert.deepEqual(file.gateways[0]!.listeners.map((l) => l.kinds), [['HTTPRoute', 'GRPCRoute'], ['HTTPRoute']]);
    const status = Object.fromEntries(routeStatus(file).map((s) => [s.route, { kind: s.kind, ...s.conditions[0], listeners: s.listeners }]));
    assert.deepEqual(status['on-grpc'], { kind: 'GRPCRoute', type: 'Accepted', status: 'True', reason: 'Accepted', message: 'the route is in use for gRPC calls on web/grpc', listeners: ['web/grpc'] });
    assert.deepEqual(status.refused, { kind: 'GRPCRoute', type: 'Accepted', status: 'False', reason: 'NotAllowedByListeners', message: 'parentRefs[0] (Gateway web port 81): no listener allows a GRPCRoute (allowedRoutes.kinds)', listeners: [] });
    assert.deepEqual(status.own, { kind: 'GRPCRoute', type: 'Accepted', status: 'True', reason: 'Accepted', message: "the route is in use for gRPC calls on the front end's own listener (no parentRefs)", listeners: undefined });
    const tables = compileTables(file);
    const call = (host: string) => ({ path: '/pkg.S/M', authority: host, headers: {} });
    // Port 80 takes on-grpc for its hostnames under the listener's wildcard only.
    const grpc80 = tables.ports.get(80)!.listeners[0]!.grpc;
    assert.equal(grpc80.match(call('api.example.com'))?.route, 'on-grpc');
    assert.equal(grpc80.match(call('other.net')), undefined);
    assert.equal(tables.ports.get(81)!.listeners[0]!.grpc.match(call('api.example.com')), undefined);
    // The own listener: only the GRPCRoute without parentRefs.
    assert.equal(tables.grpc.match(call('api.example.com'))?.route, 'own');
  });

  it('ignores parentRefs in a file without Gateways (every route on the own listener)', () => {
    const file = parse(`${RT}metadata: {name: r}\nspec:\n  parentRefs: [{name: somewhere-in-a-cluster}]\n  rules: [{backendRefs: [{name: go.mesh.srv.a}]}]\n`);
    assert.deepEqual(compileTables(file).main.inOrder().map((e) => e.route.name), ['r']);
    assert.equal(routeStatus(file)[0]!.conditions[0]!.status, 'True');
  });
});

describe('Gateway documents: mesh api serves the listeners', () => {
  const dir = tempDir('mesh-gateway-listeners-');
  const routesFile = join(dir.path, 'routes.yaml');
  let registry: Registry;
  let echoes: EchoBackend[] = [];
  let gw: GatewayProcess;
  let ports: Map<number, string>;

  const file = (certBase: string, host2: string) => `${GW}metadata: {name: web}
spec:
  listeners:
    - {name: plain, port: 80, protocol: HTTP, hostname: "*.example.com"}
    - {name: any, port: 80, protocol: HTTP}
    - name: secure-a
      port: 443
      protocol: HTTPS
      hostname: a.example.org
      tls: {options: {mesh-platform.dev/cert-file: ${certBase}-a.crt, mesh-platform.dev/key-file: ${certBase}-a.key}}
    - name: secure-b
      port: 443
      protocol: HTTPS
      hostname: "*.b.example.org"
      tls: {options: {mesh-platform.dev/cert-file: b.crt, mesh-platform.dev/key-file: b.key}}
---
${RT}metadata: {name: plain}
spec:
  parentRefs: [{name: web, sectionName: plain}]
  hostnames: [${host2}]
  rules: [{backendRefs: [{name: echo-v1}]}]
---
${RT}metadata: {name: catchall}
spec:
  parentRefs: [{name: web, sectionName: any}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /api}}]
      backendRefs: [{name: echo-v2}]
---
${RT}metadata: {name: secure}
spec:
  parentRefs: [{name: web, port: 443}]
  rules: [{backendRefs: [{name: echo-v2}]}]
---
${RT}metadata: {name: own}
spec:
  rules: [{backendRefs: [{name: echo-v1}]}]
`;

  const write = (text: string) => {
    writeFileSync(`${routesFile}.tmp`, text);
    renameSync(`${routesFile}.tmp`, routesFile);
  };
  const stat = async (name: string) => {
    const res = await http('GET', `${gw.admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
    return res.json<{ stats: Array<{ name: string; value: number }> }>().stats.find((s) => s.name === name)?.value ?? 0;
  };
  const get = (port: number, path: string, host: string, servername?: string) => http('GET', `${ports.get(port)}${path}`, { headers: { host }, servername: servername ?? host.replace(/:.*/, ''), insecure: true });
  const pod = (text: string) => (JSON.parse(text) as EchoedRequest).pod.replace(/-[0-9]+$/, '');
  /** The subject CN of the certificate presented for an SNI name on port 443. */
  const presented = (servername: string | undefined) =>
    new Promise<string>((resolve, reject) => {
      const url = new URL(ports.get(443)!);
      const s = connect({ host: url.hostname, port: Number(url.port), servername, rejectUnauthorized: false }, () => {
        resolve(String(s.getPeerCertificate().subject.CN));
        s.end();
      });
      s.once('error', reject);
    });

  before(async () => {
    makePair(dir.path, 'a1-a', { cn: 'a-one' });
    makePair(dir.path, 'b', { cn: 'b-wild' });
    makePair(dir.path, 'a2-a', { cn: 'a-two' });
    registry = createRegistry('local', join(dir.path, 'registry'));
    echoes = await Promise.all(['echo-v1', 'echo-v2'].map((name) => startEcho(name)));
    for (const e of echoes) await registry.register({ name: e.name, version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: e.pod, address: '127.0.0.1', port: e.port, metadata: {} }] });
    write(file('a1', 'www.example.com'));
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--handler=proxy', `--routes=${routesFile}`, '--gateway_ports=80=0,443=0']);
    ports = new Map([...gw.proc.output().matchAll(/mesh api Gateway port ([0-9]+) on (\S+) \(([^)]*)\)/g)].map((m) => [Number(m[1]), m[2]!]));
  });

  after(async () => {
    await gw?.stop();
    await Promise.all(echoes.map((e) => e.close()));
    await registry?.close();
    dir.cleanup();
  });

  it('prints each port and lists it in admin /listeners', async () => {
    assert.match(gw.proc.output(), /mesh api Gateway port 80 on http:\/\/127\.0\.0\.1:[0-9]+ \(web\/plain, web\/any\)\n/);
    assert.match(gw.proc.output(), /mesh api Gateway port 443 on https:\/\/127\.0\.0\.1:[0-9]+ \(web\/secure-a, web\/secure-b\)\n/);
    const listeners = (await http('GET', `${gw.admin}/listeners`)).text;
    assert.match(listeners, /^gateway::127\.0\.0\.1:[0-9]+\ngateway_80::127\.0\.0\.1:[0-9]+\ngateway_443::127\.0\.0\.1:[0-9]+\n$/);
  });

  it('serves each listener its own routes, by the Host', async () => {
    assert.equal(pod((await get(80, '/x', 'www.example.com')).text), 'echo-v1');
    // Any spelling of the same name: upper case, a port.
    assert.equal(pod((await get(80, '/x', 'WWW.Example.COM:8080')).text), 'echo-v1');
    // Under *.example.com, but the route's hostname is www only: the catch-all listener is not asked.
    const other = await get(80, '/api', 'mail.example.com');
    assert.equal(other.status, 404);
    assert.equal(other.text, '{"id":"go.mesh.api","code":404,"detail":"no route for /api on listener web/plain","status":"Not Found"}');
    assert.equal(pod((await get(80, '/api/v1', 'elsewhere.net')).text), 'echo-v2');
    // A trailing dot is another name, and the bare domain is not under its wildcard.
    assert.equal((await get(80, '/x', 'www.example.com.')).status, 404);
    assert.equal(pod((await get(80, '/api', 'example.com')).text), 'echo-v2');
    // The own listener keeps the routes without parentRefs.
    assert.equal(pod((await http('GET', `${gw.url}/x`)).text), 'echo-v1');
    assert.equal((await http('GET', `${gw.url}/api`)).status, 200);
  });

  it('serves none of the gateway\'s own paths on a Gateway listener but /_mesh/', async () => {
    for (const path of ['/rpc', '/stats', '/']) {
      const res = await get(80, path, 'elsewhere.net');
      assert.equal(res.status, 404, path);
      assert.equal(res.text, `{"id":"go.mesh.api","code":404,"detail":"no route for ${path} on listener web/any","status":"Not Found"}`);
    }
    assert.equal((await http('POST', `${ports.get(80)}/rpc`, { headers: { host: 'elsewhere.net', 'content-type': 'application/json' }, body: '{"service":"echo-v1","endpoint":"X","request":{}}' })).status, 404);
    assert.equal((await get(80, '/_mesh/health', 'elsewhere.net')).status, 200);
    // A route that takes every path of its host still never gets /_mesh/.
    const hidden = await get(80, '/_mesh/anything', 'www.example.com');
    assert.equal(hidden.status, 404);
    assert.equal(hidden.text, '{"id":"go.mesh.api","code":404,"detail":"no route for /_mesh/anything on listener web/plain","status":"Not Found"}');
    assert.equal((await get(80, '/_mesh/version', 'www.example.com')).status, 200);
  });

  it('presents the certificate of the listener the SNI name is for', async () => {
    assert.equal(await presented('a.example.org'), 'a-one');
    assert.equal(await presented('x.b.example.org'), 'b-wild');
    assert.equal(await presented('A.EXAMPLE.ORG'), 'a-one');
    // No name (a client that connects to an IP address) or a name no listener is for: the first listener's.
    assert.equal(await presented(undefined), 'a-one');
    assert.equal(await presented('unknown.net'), 'a-one');
    const res = await get(443, '/x', 'a.example.org');
    assert.equal(res.status, 200);
    assert.equal(pod(res.text), 'echo-v2');
    assert.equal(pod((await get(443, '/x', 'deep.x.b.example.org')).text), 'echo-v2');
  });

  it('answers 421 to a Host of another listener than the connection\'s SNI name', async () => {
    const res = await get(443, '/x', 'a.example.org', 'x.b.example.org');
    assert.equal(res.status, 421);
    assert.equal(res.text, '{"id":"go.mesh.api","code":421,"detail":"Host a.example.org is served on another TLS connection than this one (for x.b.example.org): open a connection for a.example.org","status":"Misdirected Request"}');
    // The same listener under another spelling or port is no misdirection.
    assert.equal((await get(443, '/x', 'A.example.org:443', 'a.example.org')).status, 200);
    // A Host no listener is for, on a connection for a listener: 421 too (it could be served nowhere here).
    assert.equal((await get(443, '/x', 'unknown.net', 'a.example.org')).status, 421);
    assert.equal((await get(443, '/x', 'unknown.net', 'unknown.net')).status, 404);
  });

  it('takes new hostnames and certificates on a reload, and refuses new ports', async () => {
    const ok = await stat('routes.update_success');
    write(file('a2', 'mail.example.com'));
    await waitFor(async () => (await stat('routes.update_success')) > ok, 10000);
    assert.equal((await get(80, '/x', 'www.example.com')).status, 404);
    assert.equal(pod((await get(80, '/x', 'mail.example.com')).text), 'echo-v1');
    assert.equal(await presented('a.example.org'), 'a-two');
    const certs = (await http('GET', `${gw.admin}/certs`)).text;
    assert.match(certs, /a2-a\.crt/);

    const bad = await stat('routes.update_failure');
    write(file('a2', 'mail.example.com').replace('port: 80, protocol: HTTP, hostname: "*.example.com"', 'port: 8081, protocol: HTTP, hostname: "*.example.com"'));
    await waitFor(async () => (await stat('routes.update_failure')) > bad, 10000);
    const routes = (await http('GET', `${gw.admin}/routes`)).text;
    assert.ok(routes.includes(`"last_reload_error":"${routesFile} line 1: the Gateway listeners' ports and protocols changed (80/HTTP,443/HTTPS to 80/HTTP,443/HTTPS,8081/HTTP): they are read at start, restart mesh api to change them"`), routes);
    assert.equal(pod((await get(80, '/x', 'mail.example.com')).text), 'echo-v1');

    // A certificate file that cannot be read keeps the old file in use too.
    const bad2 = await stat('routes.update_failure');
    write(file('missing', 'mail.example.com'));
    await waitFor(async () => (await stat('routes.update_failure')) > bad2, 10000);
    assert.match((await http('GET', `${gw.admin}/routes`)).text, /"last_reload_error":"[^"]*routes\.yaml line 8: Gateway web listener secure-a tls: cannot read TLS certificate file [^"]*missing-a\.crt: ENOENT"/);
    assert.equal(await presented('a.example.org'), 'a-two');
  });
});

describe('Gateway documents: mesh api start-up', () => {
  it('refuses a bad --gateway_ports and a port in use, naming the flag', async () => {
    const dir = tempDir('mesh-gateway-ports-');
    try {
      const routes = join(dir.path, 'routes.yaml');
      writeFileSync(routes, `${GW}metadata: {name: web}\nspec:\n  listeners: [{name: a, port: 80, protocol: HTTP}]\n`);
      const common = ['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${join(dir.path, 'registry')}`, `--routes=${routes}`];
      const bad = await runCli([...common, '--gateway_ports=80:8080']);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /invalid value "80:8080" for flag --gateway_ports: not PORT=BIND \(a Gateway listener's port = the port to listen on, 0 for any free one\)/);
      const holder = await startGatewayProcess(join(dir.path, 'registry'), [`--routes=${routes}`, '--gateway_ports=80=0']);
      try {
        const taken = /mesh api Gateway port 80 on http:\/\/127\.0\.0\.1:([0-9]+)/.exec(holder.proc.output())![1];
        const clash = await runCli([...common, `--gateway_ports=80=${taken}`]);
        assert.equal(clash.code, 1);
        // Who holds the port (the first gateway), and the flag to change.
        assert.match(clash.stderr, new RegExp(`gateway cannot listen on 127\\.0\\.0\\.1:${taken} for the Gateway listeners of port 80: address already in use: mesh api \\(pid ${holder.proc.child.pid}\\) listens on port ${taken}; stop it, or give another mapping of port 80 in --gateway_ports\n`));
      } finally {
        await holder.stop();
      }
    } finally {
      dir.cleanup();
    }
  });
});
