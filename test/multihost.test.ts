/**
 * Three "hosts" as three network namespaces made by this test, joined by veth pairs on a bridge
 * that lives in the first one (nothing is added to the root namespace):
 *
 *            ns a  10.77.0.1  (br0)  etcd :2379, nats-server :4222
 *           /    \
 *   ns b 10.77.0.2            ns c 10.77.0.3
 *   greeter-srv, greeter-api  mesh api :8080 (router), mesh api :8082 (--handler=event),
 *   mesh sidecar :8081        curl, mesh get service, a WebSocket subscriber
 *
 * Every process is a real one started with `ip netns exec`; the services listen on and advertise
 * their ns b address. From ns c: POST /rpc and GET /greeter/say/hello through the gateway reach the
 * services in ns b (found in etcd in ns a); an event posted to the event gateway in ns c goes through
 * NATS in ns a to the sidecar in ns b and out to a WebSocket subscriber back in ns c.
 *
 * Needs root (CAP_NET_ADMIN), `ip` (iproute2), curl, etcd and nats-server. Skips with a loud reason
 * otherwise; with MESH_TEST_REQUIRE_ENGINES=1 as root (CI) a skip is a failure. Cleans up its
 * namespaces (killing what still runs in them) in `after` and on exit, and first removes leftovers
 * of runs whose process is gone (names carry the pid: mesh-mh-<pid>-a|b|c).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { CLI, ROOT, tempDir, waitFor, type RunningProcess } from './helpers.js';
import { GATEWAY_LISTENING, OwnEtcd, OwnNats, SIDECAR_LISTENING, findBinary, printed, serviceListening, startCommand } from './fixtures/engines-common.js';

const run = promisify(execFile);

const PREFIX = 'mesh-mh-';
const NS = { a: `${PREFIX}${process.pid}-a`, b: `${PREFIX}${process.pid}-b`, c: `${PREFIX}${process.pid}-c` };
const IP = { a: '10.77.0.1', b: '10.77.0.2', c: '10.77.0.3' };
/** A second address of ns b, listed first, that nothing routes to (TEST-NET-1). */
const UNREACHABLE_B = '192.0.2.2';

const ipBin = findBinary('ip');
const bins = { etcd: findBinary('etcd'), 'nats-server': findBinary('nats-server'), curl: findBinary('curl') };

function ipSync(args: string[]): string {
  return execFileSync(ipBin!, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Why the test cannot run here, or undefined. Probes `ip netns add` itself. */
function whyNot(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'not root: creating network namespaces needs CAP_NET_ADMIN (CI runs as root)';
  if (!ipBin) return 'the ip command (iproute2) is not on PATH, /usr/sbin or /sbin (apt-get install iproute2)';
  const missing = Object.entries(bins).filter(([, p]) => !p).map(([n]) => n);
  if (missing.length) return `missing ${missing.join(', ')} (apt-get install etcd-server nats-server curl)`;
  const probe = `${PREFIX}${process.pid}-probe`;
  try {
    ipSync(['netns', 'add', probe]);
  } catch (err) {
    const stderr = String((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    return `\`ip netns add\` does not work here (no network namespace support?): ${stderr}`;
  }
  try {
    ipSync(['netns', 'del', probe]);
  } catch {
    // best effort
  }
  return undefined;
}

const reason = whyNot();
if (reason) {
  const required = process.env.MESH_TEST_REQUIRE_ENGINES === '1' && process.getuid?.() === 0;
  if (required) throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 and root, but the multi-host test cannot run: ${reason}`);
  console.warn(`SKIP multi-host test: ${reason}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Kills what runs inside a namespace (only processes this test, or a dead run of it, started there) and deletes it. */
function removeNamespace(ns: string): void {
  try {
    for (const pid of ipSync(['netns', 'pids', ns]).split(/\s+/).filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // already gone
      }
    }
  } catch {
    // no such namespace
  }
  try {
    ipSync(['netns', 'del', ns]);
  } catch {
    // no such namespace
  }
}

function listNamespaces(): string[] {
  return ipSync(['netns', 'list'])
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((n) => n.startsWith(PREFIX));
}

/** Namespaces of earlier runs whose process is gone. */
function removeLeftovers(): void {
  for (const ns of listNamespaces()) {
    const pid = Number(/^mesh-mh-(\d+)-/.exec(ns)?.[1]);
    if (pid && pid !== process.pid && !alive(pid)) removeNamespace(ns);
  }
}

function removeOurs(): void {
  for (const ns of Object.values(NS)) removeNamespace(ns);
  removeNamespace(`${PREFIX}${process.pid}-probe`);
}

async function ip(...args: string[]): Promise<void> {
  try {
    await run(ipBin!, args);
  } catch (err) {
    throw new Error(`ip ${args.join(' ')}: ${String((err as { stderr?: string }).stderr ?? (err as Error).message).trim()}`);
  }
}

/** The star on a bridge in ns a; b and c each get eth0 on 10.77.0.0/24. */
async function buildNetwork(): Promise<void> {
  for (const ns of Object.values(NS)) await ip('netns', 'add', ns);
  await ip('-n', NS.a, 'link', 'add', 'br0', 'type', 'bridge');
  await ip('-n', NS.a, 'addr', 'add', `${IP.a}/24`, 'dev', 'br0');
  await ip('-n', NS.a, 'link', 'set', 'br0', 'up');
  for (const host of ['b', 'c'] as const) {
    // Created directly in the namespaces: the root namespace never sees these interfaces.
    await ip('link', 'add', 'eth0', 'netns', NS[host], 'type', 'veth', 'peer', 'name', `v${host}`, 'netns', NS.a);
    await ip('-n', NS.a, 'link', 'set', `v${host}`, 'master', 'br0');
    await ip('-n', NS.a, 'link', 'set', `v${host}`, 'up');
    // ns b is multi-homed: an address no other namespace can reach comes first, so a wildcard
    // bind there registers it unless told --advertise.
    if (host === 'b') await ip('-n', NS.b, 'addr', 'add', `${UNREACHABLE_B}/24`, 'dev', 'eth0');
    await ip('-n', NS[host], 'addr', 'add', `${IP[host]}/24`, 'dev', 'eth0');
    await ip('-n', NS[host], 'link', 'set', 'eth0', 'up');
  }
  for (const ns of Object.values(NS)) await ip('-n', ns, 'link', 'set', 'lo', 'up');
}

const inNs = (ns: string) => [ipBin!, 'netns', 'exec', ns];

/** A node script (the CLI by default) inside a namespace. */
function nodeIn(ns: string, args: string[], script = CLI): RunningProcess {
  return startCommand(ipBin!, ['netns', 'exec', ns, process.execPath, ...(script ? [script] : []), ...args]);
}

/** curl inside a namespace: status and body. */
async function curlIn(ns: string, method: string, url: string, body?: string): Promise<{ status: number; text: string }> {
  const args = ['netns', 'exec', ns, bins.curl!, '-sS', '-m', '10', '-X', method, '-w', '\n%{http_code}'];
  if (body !== undefined) args.push('-H', 'content-type: application/json', '--data-binary', body);
  args.push(url);
  const { stdout } = await run(ipBin!, args);
  const nl = stdout.lastIndexOf('\n');
  return { status: Number(stdout.slice(nl + 1)), text: stdout.slice(0, nl) };
}

describe('multi-host: etcd + NATS, services, sidecar and gateways in three network namespaces', { skip: reason ?? false }, () => {
  const tmp = tempDir('mesh-multihost-');
  const procs: RunningProcess[] = [];
  const onExit = () => removeOurs();
  let etcd: OwnEtcd;
  let nats: OwnNats;

  before(async () => {
    process.on('exit', onExit);
    removeLeftovers();
    removeOurs();
    await buildNetwork();
    etcd = new OwnEtcd(bins.etcd!, IP.a, 2379, 2380, inNs(NS.a));
    nats = new OwnNats(bins['nats-server']!, IP.a, 4222, inNs(NS.a));
    await Promise.all([etcd.start(join(tmp.path, 'etcd')), nats.start()]);
  });

  after(async () => {
    await Promise.all(procs.map((p) => p.stop().catch(() => undefined)));
    await etcd?.kill().catch(() => undefined);
    await nats?.kill().catch(() => undefined);
    removeOurs();
    process.off('exit', onExit);
    tmp.cleanup();
  });

  it('calls and events cross the namespaces', async () => {
    const engines = ['--registry=etcd', `--registry_address=${etcd.address}`, '--broker=nats', `--broker_address=${nats.address}`, '--log_level=warning'];
    // Services in ns b listen on (and so advertise) their routable address; admin stays on loopback.
    // greeter-srv binds its ns b address; greeter-api binds every interface and names the
    // routable one with --advertise (host only: the bound port is kept).
    const svcFlags = [...engines, '--admin_address=127.0.0.1:0', '--register_ttl=15s', '--register_interval=5s'];
    const srv = nodeIn(NS.b, [...svcFlags, `--address=${IP.b}:0`], join(ROOT, 'dist/examples/greeter-srv.js'));
    const api = nodeIn(NS.b, [...svcFlags, '--address=0.0.0.0:0', `--advertise=${IP.b}`], join(ROOT, 'dist/examples/greeter-api.js'));
    const sidecar = nodeIn(NS.b, ['sidecar', ...engines, `--address=${IP.b}:8081`, '--admin_address=127.0.0.1:0']);
    const gateway = nodeIn(NS.c, ['api', ...engines, `--address=${IP.c}:8080`, '--admin_address=127.0.0.1:9901']);
    const events = nodeIn(NS.c, ['api', ...engines, `--address=${IP.c}:8082`, '--handler=event', '--admin_address=off']);
    procs.push(srv, api, sidecar, gateway, events);
    const [srvAddress, apiAddress] = await Promise.all([
      printed(srv, serviceListening('go.mesh.srv.greeter')),
      printed(api, serviceListening('go.mesh.api.greeter')),
      printed(sidecar, SIDECAR_LISTENING),
      printed(gateway, GATEWAY_LISTENING),
      printed(events, GATEWAY_LISTENING),
    ]);
    assert.match(srvAddress, /^10\.77\.0\.2:\d+$/);
    assert.match(apiAddress, /^10\.77\.0\.2:\d+$/, 'the advertised address, not 0.0.0.0 nor the unreachable first address');

    // The registry, read from ns c with the CLI: the services' nodes are at their ns b address.
    const registered = async (name: string) => {
      const got = await run(ipBin!, ['netns', 'exec', NS.c, process.execPath, CLI, 'get', 'service', name, '--output=json', ...engines]);
      return (JSON.parse(got.stdout) as { nodes: Array<{ address: string; port: number }> }).nodes.map((n) => `${n.address}:${n.port}`);
    };
    const [srvNodes, apiNodes] = await Promise.all([registered('go.mesh.srv.greeter'), registered('go.mesh.api.greeter')]);
    assert.deepEqual(srvNodes, [srvAddress]);
    assert.deepEqual(apiNodes, [apiAddress]);

    // ns c -> gateway (ns c) -> greeter-srv (ns b), found in etcd (ns a).
    const rpc = await waitFor(async () => {
      const r = await curlIn(NS.c, 'POST', `http://${IP.c}:8080/rpc`, JSON.stringify({ service: 'go.mesh.srv.greeter', method: 'Say.Hello', request: { name: 'John' } }));
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.deepEqual(JSON.parse(rpc!.text), { msg: 'Hello John' });

    // ns c -> gateway (ns c) -> greeter-api (ns b) -> greeter-srv (ns b).
    const viaApi = await waitFor(async () => {
      const r = await curlIn(NS.c, 'GET', `http://${IP.c}:8080/greeter/say/hello?name=John`);
      return r.status === 200 ? r : undefined;
    }, 20000, 200);
    assert.deepEqual(JSON.parse(viaApi!.text), { message: 'Hello John' });

    // An event: event gateway (ns c) -> NATS (ns a) -> sidecar (ns b) -> WebSocket subscriber (ns c).
    const subscriber = nodeIn(NS.c, ['--import', 'tsx', join(ROOT, 'test/fixtures/engines-ws-client.ts'), `ws://${IP.b}:8081/broker?topic=go.mesh.api.orders`], '');
    procs.push(subscriber);
    await subscriber.waitForOutput(/^subscribed$/m);
    const posted = await curlIn(NS.c, 'POST', `http://${IP.c}:8082/orders/created`, JSON.stringify({ order: 7 }));
    assert.equal(posted.status, 200, posted.text);
    const line = await subscriber.waitForOutput(/^frame .*$/m, 15000);
    const frame = JSON.parse(line.slice('frame '.length)) as { Header: Record<string, string>; text: string };
    assert.equal(frame.Header['Mesh-Topic'], 'go.mesh.api.orders');
    const event = JSON.parse(frame.text) as { name: string; id: string; data: string };
    assert.equal(event.name, 'created');
    assert.equal(event.id, JSON.parse(posted.text).id);
    assert.deepEqual(JSON.parse(event.data), { order: 7 });
  });
});
