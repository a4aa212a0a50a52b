/**
 * The xds-scale row: `mesh xds` (a real process, from dist/) over an embedded (local, SQLite)
 * registry of SERVICES services × NODES nodes, with STREAMS ADS client streams from PROCS client
 * processes (servers/xds-clients.ts, as Envoy asks: every cluster, then the endpoints of each).
 * Measures: the time to the first full push (every cluster and every endpoint set) of each of the
 * streams opened at once, and of one new client once they are all served; the time from a
 * registry change (one node added to one service, by another process) to its push on every
 * stream, CHANGES times; the RSS of mesh xds before clients, with them, and after the changes.
 * Prints one JSON line.
 * Usage: node --import tsx bench/xds-scale.ts MESH_MAIN TMP_DIR [SERVICES NODES STREAMS PROCS CHANGES]
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { LocalRegistry } from '../src/engines/registry/local/index.js';
import type { Node, Service } from '../src/engines/registry/registry.js';
import { rssKiB, startProcess, stopAll, type Proc } from './lib/proc.js';

const [meshMain, tmp, servicesArg = '1000', nodesArg = '10', streamsArg = '100', procsArg = '4', changesArg = '10'] = process.argv.slice(2);
const SERVICES = Number(servicesArg);
const NODES = Number(nodesArg);
const STREAMS = Number(streamsArg);
const PROCS = Number(procsArg);
const CHANGES = Number(changesArg);
const root = join(import.meta.dirname, '..');
const now = () => performance.timeOrigin + performance.now();
const mib = (kib: number | undefined) => (kib === undefined ? NaN : Math.round(kib / 102.4) / 10);
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const quantile = (xs: number[], q: number) => sorted(xs)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const summary = (xs: number[]) => ({ median: quantile(xs, 0.5), p99: quantile(xs, 0.99), max: Math.max(...xs), n: xs.length });

const name = (i: number) => `go.mesh.srv.x${String(i).padStart(4, '0')}`;
function service(i: number, nodes: number): Service {
  const list: Node[] = Array.from({ length: nodes }, (_, n) => ({
    id: `${name(i)}-${n}`,
    address: `10.${(i >> 8) & 255}.${i & 255}.${n + 1}`,
    port: 8000 + n,
    metadata: { region: 'eu', zone: `eu-${n % 3}`, weight: String(1 + (n % 5)) },
  }));
  return { name: name(i), version: '1.0.0', metadata: {}, endpoints: [{ name: 'Svc.Call', metadata: {} }], nodes: list };
}

/** Lines of a child, waited for by kind. */
class Lines {
  readonly all: string[] = [];
  private waiters: Array<() => void> = [];
  push(line: string): void {
    this.all.push(line);
    for (const w of this.waiters.splice(0)) w();
  }
  async until(test: () => boolean, timeoutMs: number, what: string): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!test()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 1000).unref();
      });
    }
  }
}

async function main(): Promise<void> {
  const dir = join(tmp!, 'xds-registry');
  mkdirSync(dir, { recursive: true });
  const registry = new LocalRegistry(dir);
  let t = performance.now();
  for (let i = 0; i < SERVICES; i++) await registry.register(service(i, NODES));
  const registerMs = performance.now() - t;

  const serverLines = new Lines();
  t = performance.now();
  const server = startProcess('mesh-xds', process.execPath, [meshMain!, 'xds', '--address=127.0.0.1:0', `--registry_address=${dir}`, '--admin_address=off', '--log_level=warning'], {
    cwd: root,
    onLine: (l) => serverLines.push(l),
  });
  await serverLines.until(() => serverLines.all.some((l) => l.startsWith('mesh xds listening')), 120_000, 'mesh xds to listen');
  const startMs = performance.now() - t;
  const address = /grpc:\/\/(\S+)/.exec(serverLines.all.find((l) => l.startsWith('mesh xds listening'))!)![1]!;
  const rssIdle = rssKiB(server.pid);

  const clientLines = new Lines();
  const script = join(root, 'bench', 'servers', 'xds-clients.ts');
  const clients: Proc[] = [];
  const per = Math.ceil(STREAMS / PROCS);
  for (let p = 0; p < PROCS; p++) {
    const n = Math.min(per, STREAMS - p * per);
    clients.push(startProcess(`xds-clients-${p}`, process.execPath, ['--import', 'tsx', script, address, String(n), String(SERVICES)], { cwd: root, onLine: (l) => clientLines.push(l) }));
  }
  const full = () => clientLines.all.filter((l) => l.startsWith('full ')).map((l) => Number(l.slice(5)));
  await clientLines.until(() => full().length >= STREAMS || clientLines.all.some((l) => l.startsWith('error')), 300_000, `${STREAMS} full pushes`);
  const errors = clientLines.all.filter((l) => l.startsWith('error'));
  if (errors.length) throw new Error(`client: ${errors[0]}`);
  const firstPush = summary(full());
  const rssClients = rssKiB(server.pid);

  // One new client once the others are served.
  const lone = new Lines();
  const newcomer = startProcess('xds-client-new', process.execPath, ['--import', 'tsx', script, address, '1', String(SERVICES)], { cwd: root, onLine: (l) => lone.push(l) });
  await lone.until(() => lone.all.some((l) => l.startsWith('full ')), 120_000, 'the new client\'s full push');
  const newClientMs = Number(lone.all.find((l) => l.startsWith('full '))!.slice(5));
  newcomer.child.stdin!.end();
  await newcomer.waitExit();

  // Registry changes: one node added to one service at a time, until every stream has its push.
  const changeMs: number[] = [];
  const pushes = () => clientLines.all.filter((l) => l.startsWith('push '));
  for (let c = 0; c < CHANGES; c++) {
    const seen = pushes().length;
    const s = service(c * 7, NODES);
    s.nodes.push({ id: `${s.name}-extra-${c}`, address: `10.255.${c}.1`, port: 9000, metadata: { region: 'eu', zone: 'eu-0' } });
    const t0 = now();
    await registry.register(s);
    await clientLines.until(() => pushes().length >= seen + STREAMS, 60_000, `change ${c} on every stream`);
    const times = pushes().slice(seen, seen + STREAMS).map((l) => Number(l.slice(5)));
    changeMs.push(Math.max(...times) - t0);
  }
  const rssAfter = rssKiB(server.pid);

  for (const c of clients) c.child.stdin!.end();
  await Promise.all(clients.map((c) => c.waitExit()));
  await server.stop();
  await registry.close();
  process.stdout.write(
    JSON.stringify({
      services: SERVICES,
      nodes: SERVICES * NODES,
      streams: STREAMS,
      procs: PROCS,
      registerMs: Math.round(registerMs),
      startMs: Math.round(startMs),
      firstPushMs: firstPush,
      newClientMs,
      changeToAllStreamsMs: summary(changeMs),
      rssMiB: { idle: mib(rssIdle), clients: mib(rssClients), afterChanges: mib(rssAfter) },
    }) + '\n',
  );
}

main().then(
  () => process.exit(0),
  async (err: unknown) => {
    process.stderr.write(`xds-scale: ${(err as Error).message}\n`);
    await stopAll();
    process.exit(1);
  },
);
