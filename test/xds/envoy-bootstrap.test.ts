/**
 * `mesh envoy bootstrap`: what it prints (YAML, or JSON with --output=json) decodes as Envoy's
 * `envoy.config.bootstrap.v3.Bootstrap` with the full Envoy protos, in proto3 JSON ("5s"
 * durations, "@type" Anys, as `envoy -c` reads it), and passes the protos' validate.rules; TLS
 * options put the files where Envoy reads them; a flag mistake exits 2 with the flag named.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parse } from 'yaml';
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { CLI, ROOT, runCli, tempDir } from '../helpers.js';
import { EnvoyProtos } from '../fixtures/envoy-validate.js';

const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const TLS = 'envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';
type Json = Record<string, any>;

async function bootstrap(...flags: string[]): Promise<{ text: string; value: Json; stderr: string }> {
  const r = await runCli(['envoy', 'bootstrap', ...flags]);
  assert.equal(r.code, 0, r.stderr);
  return { text: r.stdout, value: flags.includes('--output=json') ? JSON.parse(r.stdout) : parse(r.stdout), stderr: r.stderr };
}

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: hello}
spec:
  rules:
    - matches: [{path: {value: /hello}}]
      backendRefs:
        - {name: go.mesh.srv.hello, version: v1, weight: 90}
        - {name: go.mesh.srv.hello, version: v2, weight: 10}
      timeouts: {request: 2s, backendRequest: 250ms}
      retry: {attempts: 2, codes: [503], backoff: 100ms}
`;

describe('mesh envoy bootstrap', () => {
  let protos: EnvoyProtos;
  before(async () => {
    protos = await EnvoyProtos.load();
  });

  it('YAML by default: decodes as a Bootstrap, passes validate.rules, ADS to the address given', async () => {
    const { text, value, stderr } = await bootstrap('--xds_address=127.0.0.1:18000', '--node_id=edge-1', '--node_cluster=edge');
    assert.equal(stderr, '');
    assert.doesNotMatch(text, /[&*]a\d/, 'no YAML anchors or aliases');
    assert.deepEqual(protos.check(BOOTSTRAP, value, 'json'), []);
    const b = protos.type(BOOTSTRAP).toObject(protos.decode(BOOTSTRAP, value, 'json'), { enums: String, longs: Number, defaults: false }) as Json;
    assert.deepEqual(b.node, { id: 'edge-1', cluster: 'edge' });
    assert.deepEqual(b.admin.address.socket_address, { address: '127.0.0.1', port_value: 9905 });
    assert.deepEqual(b.dynamic_resources.ads_config, { api_type: 'GRPC', transport_api_version: 'V3', grpc_services: [{ envoy_grpc: { cluster_name: 'xds_cluster' } }] });
    for (const k of ['cds_config', 'lds_config']) assert.deepEqual(b.dynamic_resources[k], { ads: {}, resource_api_version: 'V3' }, k);
    const [cluster] = b.static_resources.clusters;
    assert.equal(cluster.name, 'xds_cluster');
    assert.equal(cluster.type, 'STATIC', 'an IP address: no DNS');
    assert.deepEqual(cluster.connect_timeout, { seconds: 5, nanos: 0 }, '"5s" is a Duration of 5 seconds');
    assert.deepEqual(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address, { address: '127.0.0.1', port_value: 18000 });
    const options = cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    assert.equal(options.type_url, 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    const http = protos.type('envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    assert.deepEqual(http.toObject(http.decode(options.value)), { explicit_http_config: { http2_protocol_options: {} } }, 'gRPC needs HTTP/2');
    assert.equal(cluster.transport_socket, undefined, 'plain without --xds_tls_ca_file');
  });

  it('--output=json: the same bootstrap as JSON; a host name is STRICT_DNS; --admin_address=off leaves admin out', async () => {
    const { value } = await bootstrap('--xds_address=xds.mesh.internal:18000', '--admin_address=off', '--output=json');
    assert.deepEqual(protos.check(BOOTSTRAP, value, 'json'), []);
    assert.equal(value.admin, undefined);
    assert.equal(value.static_resources.clusters[0].type, 'STRICT_DNS');
    const yaml = await bootstrap('--xds_address=xds.mesh.internal:18000', '--admin_address=off');
    assert.deepEqual(yaml.value, value);
    assert.ok(typeof value.node.id === 'string' && value.node.id.length > 0, 'node id defaults to the host name');
  });

  it('TLS and mutual TLS: the UpstreamTlsContext decodes and validates, with the files and names where Envoy reads them', async () => {
    const { value } = await bootstrap(
      '--xds_address=xds.mesh.internal:18000',
      '--xds_tls_ca_file=/etc/envoy/mesh-ca.pem',
      '--xds_tls_cert_file=/etc/envoy/envoy.pem',
      '--xds_tls_key_file=/etc/envoy/envoy-key.pem',
      '--xds_tls_san=spiffe://mesh.local/svc/mesh.xds,10.0.0.7',
    );
    assert.deepEqual(protos.check(BOOTSTRAP, value, 'json'), []);
    const socket = protos.type(BOOTSTRAP).toObject(protos.decode(BOOTSTRAP, value, 'json'), { enums: String, defaults: false }).static_resources.clusters[0].transport_socket;
    assert.equal(socket.name, 'envoy.transport_sockets.tls');
    assert.equal(socket.typed_config.type_url, `type.googleapis.com/${TLS}`);
    const tls = protos.type(TLS).toObject(protos.type(TLS).decode(socket.typed_config.value), { enums: String, defaults: false });
    assert.deepEqual(tls, {
      sni: 'xds.mesh.internal',
      common_tls_context: {
        alpn_protocols: ['h2'],
        tls_certificates: [{ certificate_chain: { filename: '/etc/envoy/envoy.pem' }, private_key: { filename: '/etc/envoy/envoy-key.pem' } }],
        validation_context: {
          trusted_ca: { filename: '/etc/envoy/mesh-ca.pem' },
          match_typed_subject_alt_names: [
            { san_type: 'URI', matcher: { exact: 'spiffe://mesh.local/svc/mesh.xds' } },
            { san_type: 'IP_ADDRESS', matcher: { exact: '10.0.0.7' } },
          ],
        },
      },
    });
    // TLS only (no client certificate), to an IP address: no SNI, the IP checked as the certificate's name.
    const plain = (await bootstrap('--xds_address=10.0.0.7:18000', '--xds_tls_ca_file=/etc/envoy/mesh-ca.pem', '--output=json')).value;
    assert.deepEqual(protos.check(BOOTSTRAP, plain, 'json'), []);
    const t = plain.static_resources.clusters[0].transport_socket.typed_config;
    assert.equal(t.sni, undefined);
    assert.equal(t.common_tls_context.tls_certificates, undefined);
    assert.deepEqual(t.common_tls_context.validation_context.match_typed_subject_alt_names, [{ san_type: 'IP_ADDRESS', matcher: { exact: '10.0.0.7' } }]);
  });

  it('--routes: an HTTP listener with the route file\'s routes, in the bootstrap; clusters (not listeners) over ADS', async () => {
    const dir = tempDir();
    try {
      const file = join(dir.path, 'routes.yaml');
      writeFileSync(file, ROUTES);
      const { value, stderr } = await bootstrap('--xds_address=127.0.0.1:18000', '--node_id=edge-1', `--routes=${file}`, '--listener_address=127.0.0.1:10000');
      assert.equal(stderr, '', 'versions are honoured: mesh xds serves clusters with subsets by version');
      assert.deepEqual(protos.check(BOOTSTRAP, value, 'json'), []);
      assert.equal(value.dynamic_resources.lds_config, undefined, 'the listener is the bootstrap\'s own');
      assert.deepEqual(value.dynamic_resources.cds_config, { ads: {}, resource_api_version: 'V3' });
      const [listener] = value.static_resources.listeners;
      assert.deepEqual(listener.address, { socket_address: { address: '127.0.0.1', port_value: 10000 } });
      const hcm = listener.filter_chains[0].filters[0].typed_config;
      const [route] = hcm.route_config.virtual_hosts[0].routes;
      assert.deepEqual(route.match, { path_separated_prefix: '/hello' });
      assert.deepEqual(route.route.weighted_clusters.clusters.map((c: Json) => [c.name, c.weight]), [['go.mesh.srv.hello', 90], ['go.mesh.srv.hello', 10]]);
      assert.deepEqual(route.route.weighted_clusters.clusters.map((c: Json) => c.metadata_match), [
        { filter_metadata: { 'envoy.lb': { version: 'v1' } } },
        { filter_metadata: { 'envoy.lb': { version: 'v2' } } },
      ], 'the version to match, in proto3 JSON');
      assert.equal(route.route.timeout, '2s', 'proto3 JSON, as Envoy reads a bootstrap');
      assert.equal(route.route.retry_policy.num_retries, 2);
      const defaultAddress = (await bootstrap('--xds_address=127.0.0.1:18000', `--routes=${file}`, '--output=json')).value;
      assert.deepEqual(defaultAddress.static_resources.listeners[0].address, { socket_address: { address: '0.0.0.0', port_value: 10000 } });
      // A route file mesh would refuse is refused here too, with its line; exit 1 as mesh api.
      const bad = join(dir.path, 'bad.yaml');
      writeFileSync(bad, ROUTES.replace('weight: 10', 'weight: -1'));
      const r = await runCli(['envoy', 'bootstrap', '--xds_address=127.0.0.1:18000', `--routes=${bad}`]);
      assert.equal(r.code, 1);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, new RegExp(`^mesh: ${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} line 9: .*weight`));
    } finally {
      dir.cleanup();
    }
  });

  it('a broken bootstrap fails the check (so the passing ones mean something)', async () => {
    const { value } = await bootstrap('--xds_address=127.0.0.1:18000', '--node_id=edge-1', '--output=json');
    const broken = structuredClone(value);
    broken.static_resources.clusters[0].connect_timeout = '0s';
    broken.dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name = '';
    assert.deepEqual(protos.check(BOOTSTRAP, broken, 'json').map((v) => `${v.path} ${v.rule}`).sort(), [
      'dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name string.min_len',
      'static_resources.clusters[0].connect_timeout duration.gt',
    ]);
    // Envoy reads a bootstrap as proto3 JSON: a duration or a wrapper in the object form is refused.
    const objectForm = structuredClone(value);
    objectForm.static_resources.clusters[0].connect_timeout = { seconds: 5 };
    assert.match(protos.check(BOOTSTRAP, objectForm, 'json')[0]!.message, /static_resources\.clusters\[0\]\.connect_timeout: must be a string of seconds/);
    const misspelt = structuredClone(value);
    misspelt.dynamic_resources.ads_config.transport_api_versoin = 'V3';
    assert.match(protos.check(BOOTSTRAP, misspelt, 'json')[0]!.message, /ads_config\.transport_api_versoin: no such field/);
  });

  it('flag mistakes exit 2 with the flag named, and print nothing on stdout', async () => {
    const cases: Array<[string[], string]> = [
      [['envoy'], 'mesh: usage: mesh envoy bootstrap --xds_address=HOST:PORT\n'],
      [['envoy', 'bootstrap'], 'mesh: mesh envoy bootstrap needs --xds_address: where mesh xds listens, e.g. --xds_address=127.0.0.1:18000 (usage: mesh envoy bootstrap --xds_address=HOST:PORT [--node_id=ID] [--node_cluster=NAME] [--admin_address=HOST:PORT|off] [--routes=FILE [--listener_address=HOST:PORT]] [--xds_tls_ca_file=FILE [--xds_tls_cert_file=FILE --xds_tls_key_file=FILE]])\n'],
      [['envoy', 'bootstrap', '--xds_address=xds'], 'mesh: invalid --xds_address "xds" (use host:port)\n'],
      [['envoy', 'bootstrap', '--xds_address=127.0.0.1:0'], 'mesh: invalid --xds_address "127.0.0.1:0": port out of range (1 to 65535)\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--admin_address=nowhere'], 'mesh: invalid --admin_address "nowhere" (use host:port)\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--xds_tls_cert_file=c.pem'], 'mesh: --xds_tls_cert_file needs --xds_tls_key_file (its private key)\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--xds_tls_cert_file=c.pem', '--xds_tls_key_file=k.pem'], "mesh: --xds_tls_cert_file needs --xds_tls_ca_file (the CA that signs the xDS server's certificate; TLS is on with it)\n"],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--node_id='], 'mesh: --node_id: must not be empty\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', 'extra'], 'mesh: mesh envoy bootstrap: unexpected argument "extra" (usage: mesh envoy bootstrap --xds_address=HOST:PORT [--node_id=ID] [--node_cluster=NAME] [--admin_address=HOST:PORT|off] [--routes=FILE [--listener_address=HOST:PORT]] [--xds_tls_ca_file=FILE [--xds_tls_cert_file=FILE --xds_tls_key_file=FILE]])\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--queue=q'], 'mesh: flag --queue is not used by mesh envoy (the commands that use it: subscribe)\n'],
      [['envoy', 'bootstrap', '--xds_address=a:1', '--listener_address=:10000'], "mesh: --listener_address is for --routes (the route file of Envoy's HTTP listener)\n"],
      [
        ['envoy', 'bootstrap', '--xds_address=a:1', '--routes=routes.yaml', '--listener_address=edge.internal:10000'],
        'mesh: invalid --listener_address "edge.internal:10000": Envoy listens on an IP address, not a host name (e.g. 0.0.0.0:10000 for every address, 127.0.0.1:10000 for this machine only)\n',
      ],
      [['list', 'services', '--xds_address=a:1'], 'mesh: flag --xds_address is not used by mesh list (the commands that use it: envoy)\n'],
    ];
    for (const [args, stderr] of cases) {
      const r = await runCli(args);
      assert.deepEqual({ code: r.code, stdout: r.stdout, stderr: r.stderr }, { code: 2, stdout: '', stderr }, args.join(' '));
    }
  });

  it('the samples of docs/xds.md\'s Envoy section run as written, print what the docs show, and what they write passes the check', () => {
    const doc = readFileSync(join(ROOT, 'docs/xds.md'), 'utf8');
    assert.ok(doc.includes('\n## Envoy\n'), 'docs/xds.md has an "## Envoy" section');
    const section = doc.slice(doc.indexOf('\n## Envoy\n')).split(/\n## (?!Envoy\n)/)[0]!;
    const blocks = [...section.matchAll(/(<!-- sample: not run: [^>]+ -->\n)?```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ notRun: !!m[1], lang: m[2]!, text: m[3]! }));
    const dir = tempDir();
    try {
      mkdirSync(join(dir.path, 'bin'));
      writeFileSync(join(dir.path, 'bin/mesh'), `#!/bin/sh\nexec "${process.execPath}" "${CLI}" "$@"\n`);
      chmodSync(join(dir.path, 'bin/mesh'), 0o755);
      let ran = 0;
      blocks.forEach((b, i) => {
        if (b.lang !== 'sh') return;
        if (b.notRun) {
          assert.match(b.text, /\benvoy -c\b/, 'only the blocks that need Envoy are not run');
          return;
        }
        const r = spawnSync('bash', ['-e', '-c', b.text], { cwd: dir.path, env: { ...process.env, PATH: `${join(dir.path, 'bin')}:${process.env.PATH}` }, encoding: 'utf8' });
        assert.equal(r.status, 0, `${b.text}\n${r.stderr}`);
        assert.equal(r.stderr, '', b.text);
        const next = blocks[i + 1];
        if (!/>\s*\S+\.yaml\s*$/.test(b.text.trim())) {
          assert.equal(next?.lang, 'yaml', 'a command that prints is followed by what it prints');
          assert.equal(r.stdout, next!.text, 'the docs show what it prints');
        }
        ran++;
      });
      assert.equal(ran, 5, 'the bootstrap, the edge (routes served by mesh xds, and in the bootstrap), the sidecar and the TLS samples');
      for (const file of ['envoy.yaml', 'envoy-routes.yaml', 'sidecar.yaml', 'envoy-tls.yaml']) {
        assert.deepEqual(protos.check(BOOTSTRAP, parse(readFileSync(join(dir.path, file), 'utf8')), 'json'), [], file);
      }
    } finally {
      dir.cleanup();
    }
  });
});
