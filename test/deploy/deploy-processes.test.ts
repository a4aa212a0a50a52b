/**
 * deploy/'s image and manifests run as real processes, since no container engine or cluster runs
 * here: the image's entrypoint (deploy/entrypoint.sh in a read-only copy of the image's /app, laid
 * out by the Dockerfile's COPY instructions, as a user that cannot write it, with /var/lib/mesh and
 * /tmp on writable directories) starts the gateway and the sidecar with their manifests' args and
 * environment (ports rewritten to free loopback ones, etcd and NATS our own), and the gateway as
 * `docker run` would start it (the Dockerfile's CMD and ENV, the local registry); then the manifests'
 * readiness and liveness probes, the image's HEALTHCHECK and the preStop drain run as the kubelet
 * and Docker would run them; SIGTERM ends each process with exit code 0 and nothing cut off.
 *
 * Needs etcd and nats-server (Debian's etcd-server and nats-server); skipped loudly without them,
 * a failure with MESH_TEST_REQUIRE_ENGINES=1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { ROOT, http, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { OwnEtcd, OwnNats, findBinary } from '../fixtures/engines-common.js';
import { DOCKERFILE, find, loadManifests, parseDockerfile, podSpec, shellBlock } from '../fixtures/deploy.js';
import { containerRun, dockerDefault, execInImage, httpProbe, imageCopy, kubectlStandIn, startEntrypoint, type ContainerRun, type ImageCopy } from '../fixtures/deploy-run.js';
import { spawnSync } from 'node:child_process';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');
const manifests = loadManifests();
const healthcheck = parseDockerfile(readFileSync(DOCKERFILE, 'utf8')).stages.at(-1)!.instructions.find((i) => i.keyword === 'HEALTHCHECK')!.exec!;

const etcdBin = findBinary('etcd');
const natsBin = findBinary('nats-server');
const missing = [!etcdBin && 'etcd', !natsBin && 'nats-server'].filter(Boolean).join(' and ');
const skip = missing ? `the ${missing} binary is not on PATH, /usr/bin or /usr/sbin (apt-get install etcd-server nats-server)` : false;
if (skip) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${skip}`);
  console.warn(`SKIP deploy processes: ${skip}`);
}

/** `{"service":...}` for the gateway's /rpc. */
const rpc = (method: string, request: object) => JSON.stringify({ service: 'go.mesh.srv.who', method, request });
const JSON_HEADERS = { 'content-type': 'application/json' };

async function stat(run: ContainerRun, name: string): Promise<number> {
  const res = await http('GET', `http://${run.env.MESH_ADMIN_ADDRESS}/stats?filter=${encodeURIComponent(`^${name}$`)}`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(res.text);
  return m ? Number(m[1]) : -1;
}

describe('deploy/: the image entrypoint, the probes and the preStop drain as processes', { skip }, () => {
  const dir = tempDir('mesh-deploy-');
  let image: ImageCopy;
  let etcd: OwnEtcd;
  let nats: OwnNats;
  let engines: Record<string, string>;
  const procs: RunningProcess[] = [];
  /** The mesh CA's container as a process, and what its pods need to join it. */
  let ca: { run: ContainerRun; proc: RunningProcess; port: number; secrets: string; join: string };
  /** How the gateway's and the sidecar's containers reach the CA: its Service's port, its name on loopback, the join Secret. */
  let joined: () => { fixed: Record<number, number>; hosts: string[]; secrets: Record<string, Record<string, string>>; mounts: Record<string, string> };

  before(async () => {
    image = imageCopy(dir.path);
    etcd = await OwnEtcd.onLoopback(etcdBin!);
    await etcd.start(join(dir.path, 'etcd'));
    nats = await OwnNats.onLoopback(natsBin!);
    await nats.start();
    engines = { MESH_REGISTRY_ADDRESS: etcd.address, MESH_BROKER_ADDRESS: `nats://${nats.address}` };

    // The mesh CA: its init container makes the CA in the volume (once), then `mesh ca serve`.
    const pod = podSpec(find(manifests, 'Deployment', 'mesh-ca'));
    const volume = join(image.state, 'mesh-ca-volume');
    mkdirSync(volume, { mode: 0o700 });
    image.own(volume);
    const fields = { 'metadata.namespace': 'mesh-test' };
    const init = await containerRun(pod.initContainers![0]!, manifests, image, { fields, volume });
    const first = await execInImage(image, init, [...init.container.command!, ...(init.container.args ?? [])]);
    assert.equal(first.code, 0, first.output);
    assert.match(first.output, /^made a mesh CA in .*\/mesh-ca-volume\/home\/ca$/m);
    const again = await execInImage(image, init, [...init.container.command!, ...(init.container.args ?? [])]);
    assert.deepEqual([again.code, again.output], [0, ''], 'the init container leaves an existing CA alone');
    const run = await containerRun(pod.containers[0]!, manifests, image, { fields, volume });
    const proc = startEntrypoint(image, run);
    procs.push(proc);
    await proc.waitForOutput(/mesh ca serve listening on/, 30000);
    assert.match(proc.output(), /as spiffe:\/\/mesh\.local\/svc\/mesh\.ca \(names: mesh-ca, mesh-ca\.mesh-test\.svc, mesh-ca\.mesh-test\.svc\.cluster\.local;/);
    const ready = await httpProbe(run, run.container.readinessProbe);
    assert.equal(ready.ok, true, `${ready.status} ${ready.text}`);

    // The join token Secret, made by the commands of docs/kubernetes.md as written, a kubectl standing in for the cluster.
    const kubectl = kubectlStandIn(join(image.state, 'kubectl'), image, { 'mesh-ca': run });
    const block = shellBlock(readFileSync(join(ROOT, 'docs/kubernetes.md'), 'utf8'), 'kubectl rollout status deployment/mesh-ca');
    const work = join(image.state, 'kubectl', 'work');
    mkdirSync(work);
    const made = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', block], { cwd: work, env: { PATH: `${kubectl.bin}:/usr/bin:/bin` }, encoding: 'utf8' });
    assert.equal(made.status, 0, `${block}\n${made.stdout}${made.stderr}`);
    const port = run.ports.get(9943)!;
    ca = { run, proc, port, secrets: kubectl.secrets, join: join(kubectl.secrets, 'mesh-ca-join') };
    joined = () => ({
      fixed: { 9943: ca.port },
      hosts: ['mesh-ca'],
      secrets: { 'mesh-ca-join': { root_fingerprint: readFileSync(join(ca.join, 'root_fingerprint'), 'utf8') } },
      mounts: { '/var/run/mesh-ca-join': ca.join },
    });
  });
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    await etcd?.kill();
    await nats?.kill();
    image?.release();
    dir.cleanup();
  });

  it('the entrypoint refuses a MESH_HOME it cannot write, before mesh starts, and says what to mount (exit 78)', async () => {
    const gateway = podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers[0]!;
    const run = await containerRun(gateway, manifests, image, { overrides: { ...engines }, ...joined() });
    // The copy of /app is read-only to the runner, as the image's root file system.
    run.env.MESH_HOME = join(image.app, 'state');
    const proc = startEntrypoint(image, run);
    procs.push(proc);
    const code = proc.child.exitCode ?? ((await once(proc.child, 'exit')) as [number | null])[0];
    assert.equal(code, 78, proc.output());
    assert.match(proc.output(), new RegExp(`^mesh: cannot create MESH_HOME=${run.env.MESH_HOME}: mount a writable volume there \\(the root file system is read-only\\)$`, 'm'));
    assert.doesNotMatch(proc.output(), /listening/);
  });

  it('docker run with the image defaults (CMD, ENV, the local registry in the /var/lib/mesh volume): healthy, then docker stop exits 0', async (t) => {
    t.diagnostic(`runs as ${image.who}`);
    // A named volume starts as a copy of the image's /var/lib/mesh: 0700, the mesh user's.
    const volume = join(image.state, 'docker');
    mkdirSync(volume, { mode: 0o700 });
    image.own(volume);
    const run = await containerRun(dockerDefault(), manifests, image, { volume });
    assert.equal(run.env.MESH_HOME, volume);
    assert.equal(run.args[0], 'api');
    const before = image.snapshot();
    const proc = startEntrypoint(image, run);
    procs.push(proc);
    await proc.waitForOutput(/mesh api listening on/, 30000);
    const healthy = await execInImage(image, run, healthcheck);
    assert.equal(healthy.code, 0, healthy.output);
    const ready = await http('GET', run.url(9102, '/ready'));
    assert.deepEqual([ready.status, ready.text], [200, 'LIVE\n']);
    assert.equal((await http('GET', run.url(8080, '/rpc'))).status, 405);
    const code = await proc.stop('SIGTERM');
    assert.equal(code, 0, proc.output());
    // Stopped: the HEALTHCHECK fails, saying why; so does an admin address it cannot use.
    const down = await execInImage(image, run, healthcheck);
    assert.equal(down.code, 1, down.output);
    assert.match(down.output, /^probe: connect ECONNREFUSED 127\.0\.0\.1:\d+$/m);
    const off = await execInImage(image, { ...run, env: { ...run.env, MESH_ADMIN_ADDRESS: 'off' } }, healthcheck);
    assert.deepEqual([off.code, off.output], [1, 'probe: MESH_ADMIN_ADDRESS=off: expected host:port of the admin interface\n']);
    // Read-only root: nothing changed in /app; the local registry (SQLite) is in the volume, private.
    assert.deepEqual(image.snapshot(), before);
    assert.equal(statSync(volume).mode & 0o777, 0o700);
    assert.equal(statSync(join(volume, 'registry.db')).mode & 0o777, 0o600);
    assert.doesNotMatch(proc.output(), /open to other users|"level":(40|50|60)|"level":"(warn|error|fatal)"/);
  });

  it('gateway: ready and alive once up; the preStop drain turns /ready to 503 while a call in flight finishes; SIGTERM exits 0', async (t) => {
    t.diagnostic(`runs as ${image.who}`);
    // A framework service on mutual TLS strict, joined to the same CA with the same Secret.
    const pin = readFileSync(join(ca.join, 'root_fingerprint'), 'utf8');
    const mtls = ['--mtls=strict', `--ca_server=https://127.0.0.1:${ca.port}`, `--ca_token_file=${join(ca.join, 'token')}`, `--ca_root_fingerprint=${pin}`];
    const who = startProcess(['--import', 'tsx', WHO, '--registry=etcd', `--registry_address=${etcd.address}`, '--broker=nats', `--broker_address=nats://${nats.address}`, '--log_level=warning', ...mtls], { MESH_HOME: join(dir.path, 'who-home') }, '');
    procs.push(who);
    await who.waitForOutput(/go\.mesh\.srv\.who listening/, 30000);

    const container = podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers[0]!;
    const run = await containerRun(container, manifests, image, { overrides: { ...engines }, ...joined() });
    const before = image.snapshot();
    const gw = startEntrypoint(image, run);
    procs.push(gw);
    await gw.waitForOutput(/mesh api listening on/, 30000);
    const url = run.url('http', '');

    // Up: the readiness probe (metrics listener /ready), the liveness probe (/_mesh/health) and the HEALTHCHECK pass.
    const ready = await httpProbe(run, container.readinessProbe);
    assert.deepEqual([ready.ok, ready.status, ready.text], [true, 200, 'LIVE\n']);
    const live = await httpProbe(run, container.livenessProbe);
    assert.deepEqual([live.ok, live.status, live.text], [true, 200, '{"status":"ok"}']);
    const healthy = await execInImage(image, run, healthcheck);
    assert.equal(healthy.code, 0, healthy.output);
    assert.match(healthy.output, /^ready: http:\/\/127\.0\.0\.1:\d+\/ready answered 200 LIVE$/m);
    await waitFor(async () => (await http('POST', `${url}/rpc`, { headers: JSON_HEADERS, body: rpc('Who.Am', {}) })).status === 200, 20000);
    // Over mutual TLS: the service sees the gateway's certificate, issued by the CA's signing service.
    const peer = await http('POST', `${url}/rpc`, { headers: JSON_HEADERS, body: rpc('Who.Peer', {}) });
    assert.deepEqual([peer.status, peer.text], [200, '{"peer":"spiffe://mesh.local/svc/mesh.api"}']);
    assert.match(ca.proc.output(), /issued spiffe:\/\/mesh\.local\/svc\/mesh\.api \(serial [0-9a-f]+\) with join token [0-9a-f]+/);

    // A call in flight when the pod is told to stop.
    const slow = http('POST', `${url}/rpc`, { headers: JSON_HEADERS, body: rpc('Who.Slow', { ms: 1500 }), timeoutMs: 30000 });
    await waitFor(async () => (await stat(run, 'http.gateway.downstream_rq_active')) >= 1, 10000);

    // The preStop hook: the gateway turns to draining, and says so.
    const preStop = await execInImage(image, run, container.lifecycle!.preStop!.exec!.command!);
    assert.equal(preStop.code, 0, preStop.output);
    assert.match(preStop.output, /^drain: http:\/\/127\.0\.0\.1:\d+\/ready answered 503 DRAINING$/m);
    const unready = await httpProbe(run, container.readinessProbe);
    assert.deepEqual([unready.ok, unready.status, unready.text], [false, 503, 'DRAINING\n']);
    const draining = await httpProbe(run, container.livenessProbe);
    assert.deepEqual([draining.status, draining.text], [503, '{"status":"draining"}']);
    const unhealthy = await execInImage(image, run, healthcheck);
    assert.equal(unhealthy.code, 1, unhealthy.output);
    // Still serving: an endpoint list a node has not updated yet still reaches it.
    assert.equal((await http('POST', `${url}/rpc`, { headers: JSON_HEADERS, body: rpc('Who.Am', {}) })).status, 200);

    // Then the kubelet's SIGTERM: the rest of --drain_delay, the call finishes, exit 0.
    const code = await gw.stop('SIGTERM');
    const answer = await slow;
    assert.deepEqual([answer.status, answer.text], [200, '{"done":true}']);
    assert.equal(code, 0, gw.output());
    assert.doesNotMatch(gw.output(), /drain timed out|"level":"(error|fatal)"|"level":50|"level":60/);

    // Read-only root: nothing changed in the copy of /app; MESH_HOME was made private.
    assert.deepEqual(image.snapshot(), before);
    assert.equal(statSync(run.env.MESH_HOME!).mode & 0o777, 0o700);
  });

  it('app with its sidecar: the sidecar registers the app at the pod IP, its probes pass; preStop withdraws the app and turns /ready to 503; SIGTERM exits 0', async (t) => {
    t.diagnostic(`runs as ${image.who}`);
    // The app container: an HTTP server with GET /health and the RPC at POST /.
    let calls = 0;
    const peers: Array<string | undefined> = [];
    const app = createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/health') return res.end('ok');
      calls++;
      peers.push(req.headers['mesh-peer-identity'] as string | undefined);
      req.resume().on('end', () => {
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ charged: true }));
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    t.after(() => new Promise<void>((r) => app.close(() => r())));
    const appPort = (app.address() as AddressInfo).port;

    const containers = podSpec(find(manifests, 'Deployment', 'billing')).containers;
    const container = containers.find((c) => c.name === 'mesh-sidecar')!;
    const appContainer = containers.find((c) => c.name === 'app')!;
    const reach = joined();
    const run = await containerRun(container, manifests, image, {
      ...reach,
      fields: { 'status.podIP': '127.0.0.1' },
      overrides: { ...engines },
      fixed: { ...reach.fixed, [appContainer.ports![0]!.containerPort]: appPort },
    });
    const sidecar = startEntrypoint(image, run);
    procs.push(sidecar);
    await sidecar.waitForOutput(/mesh sidecar listening on/, 30000);
    const local = `http://${run.args.find((a) => a.startsWith('--address='))!.split('=')[1]}`;

    const ready = await httpProbe(run, container.readinessProbe);
    assert.deepEqual([ready.ok, ready.status, ready.text], [true, 200, 'LIVE\n']);
    const live = await httpProbe(run, container.livenessProbe);
    assert.equal(live.ok, true, `${live.status} ${live.text}`);
    assert.match(live.text, /^# TYPE /m);
    const healthy = await execInImage(image, run, healthcheck);
    assert.equal(healthy.code, 0, healthy.output);

    // Registered at the pod's IP and the inbound listener's port (mutual TLS in front of the app), once its health path answered; reachable through the sidecar.
    const nodes = await waitFor(async () => {
      const res = await http('GET', `${local}/registry?service=go.mesh.srv.billing`);
      return res.status === 200 ? (res.json() as { nodes: Array<{ address: string; port: number; metadata?: Record<string, string> }> }).nodes : undefined;
    }, 30000);
    assert.deepEqual(nodes!.map((n) => [n.address, n.port, n.metadata?.mtls]), [['127.0.0.1', run.ports.get(9443), 'true']]);
    const call = await http('POST', `${local}/billing/charge`, { headers: JSON_HEADERS, body: '{}' });
    assert.deepEqual([call.status, call.text, calls], [200, '{"charged":true}', 1]);
    assert.equal(peers.at(-1), 'spiffe://mesh.local/svc/go.mesh.srv.billing');
    // A plain caller at the inbound listener is refused (strict): nothing reaches the app around mutual TLS.
    const plain = await http('POST', `http://127.0.0.1:${run.ports.get(9443)}/`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(plain.status, 400);
    assert.equal(calls, 1);

    // preStop: the sidecar drains, withdraws the app from the registry, and answers 503 on /ready.
    const preStop = await execInImage(image, run, container.lifecycle!.preStop!.exec!.command!);
    assert.equal(preStop.code, 0, preStop.output);
    assert.match(preStop.output, /^drain: http:\/\/127\.0\.0\.1:\d+\/ready answered 503 DRAINING$/m);
    const unready = await httpProbe(run, container.readinessProbe);
    assert.deepEqual([unready.ok, unready.status], [false, 503]);
    await waitFor(async () => (await http('GET', `${local}/registry?service=go.mesh.srv.billing`)).status === 404, 10000);

    const code = await sidecar.stop('SIGTERM');
    assert.equal(code, 0, sidecar.output());
    assert.ok(existsSync(run.env.MESH_HOME!));
  });

  it("the trial's call: through the gateway to the app, over mutual TLS from the gateway to the app's sidecar (docs/kubernetes.md)", async (t) => {
    t.diagnostic(`runs as ${image.who}`);
    // The stand-in app of the trial, as traefik/whoami answers: the request it got, as text.
    const app = createServer((req, res) => {
      if (req.method === 'GET' && req.url === '/health') return res.end('ok');
      req.resume().on('end', () => {
        res.setHeader('content-type', 'text/plain; charset=utf-8');
        res.end(`${req.method} ${req.url} HTTP/${req.httpVersion}\n${Object.entries(req.headers).map(([k, v]) => `${k}: ${String(v)}`).join('\n')}\n`);
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    t.after(() => new Promise<void>((r) => app.close(() => r())));
    const appPort = (app.address() as AddressInfo).port;

    // Each pod's /var/lib/mesh: an emptyDir of its own, open to every user.
    const emptyDir = (name: string) => {
      const path = join(image.state, name);
      mkdirSync(path);
      chmodSync(path, 0o777);
      return path;
    };
    const reach = joined();
    const containers = podSpec(find(manifests, 'Deployment', 'billing')).containers;
    const sidecarRun = await containerRun(containers.find((c) => c.name === 'mesh-sidecar')!, manifests, image, {
      ...reach,
      fields: { 'status.podIP': '127.0.0.1' },
      overrides: { ...engines },
      volume: emptyDir('billing-mesh-home'),
      fixed: { ...reach.fixed, [containers.find((c) => c.name === 'app')!.ports![0]!.containerPort]: appPort },
    });
    const gatewayRun = await containerRun(podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers[0]!, manifests, image, {
      ...reach,
      overrides: { ...engines },
      volume: emptyDir('gateway-mesh-home'),
    });
    const sidecar = startEntrypoint(image, sidecarRun);
    procs.push(sidecar);
    const gateway = startEntrypoint(image, gatewayRun);
    procs.push(gateway);
    await sidecar.waitForOutput(/mesh sidecar listening on/, 30000);
    await gateway.waitForOutput(/mesh api listening on/, 30000);

    // The page's curl: POST /rpc with the service, a method and a request.
    const body = JSON.stringify({ service: 'go.mesh.srv.billing', method: 'Billing.Charge', request: {} });
    const answer = await waitFor(async () => {
      const res = await http('POST', gatewayRun.url('http', '/rpc'), { headers: JSON_HEADERS, body });
      return res.status === 200 ? res : undefined;
    }, 30000);
    assert.match(answer!.text, /^POST \/ HTTP\/1\.1$/m);
    assert.match(answer!.text, /^mesh-peer-identity: spiffe:\/\/mesh\.local\/svc\/mesh\.api$/m);
    assert.match(answer!.text, /^mesh-endpoint: Billing\.Charge$/m);
    assert.equal(await sidecar.stop('SIGTERM'), 0, sidecar.output());
    assert.equal(await gateway.stop('SIGTERM'), 0, gateway.output());
  });
});
