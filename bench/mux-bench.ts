/**
 * Microbench of the RPC hop between two mesh processes: the mesh client (dist/src/core/transport/rpc.js
 * sendRpc, the gateway's and sidecar's hot path) against a framework service (dist RpcServer, one
 * endpoint answering a small JSON), over
 *   - h1:  HTTP/1.1, an undici Pool (what mesh uses today),
 *   - h2c: HTTP/2 cleartext, one multiplexed connection (undici H2CClient),
 *   - p10, p50: HTTP/1.1 pipelining (undici Pool, 5 connections x 10, 1 x 50),
 *   - h2session: a bare node:http2 client session (no mesh code),
 *   - h2mesh: the mesh's h2c client of the prototype (branch perf-h2c-prototype),
 * interleaved in rounds, with the CPU time of the client (process.cpuUsage) and of the server
 * (/proc/<pid>/stat) per call. Reports medians over the rounds. The HTTP/2 modes need a service
 * that serves h2c: the prototype's `Service` option `h2c` (src/core/transport/h2c-server.ts); without
 * it they are left out with a note. Results and decision: RESULTS.md "Multiplexed transport".
 *
 * Usage: node --import tsx bench/mux-bench.ts [rounds=5] [seconds=3] [concurrency=50] [modes=h1,p10]
 *   (BENCH_PIN_CLIENT / BENCH_PIN_SERVER: CPU lists for taskset; default client 0, server 1)
 * The server child: node bench/mux-bench.ts --server PORT
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Pool, H2CClient, type Dispatcher } from 'undici';
import { cpuMicros, freePort, waitForPort, startProcess, stopAll } from './lib/proc.js';

const dist = new URL('../dist/src/', import.meta.url);
if (!existsSync(fileURLToPath(new URL('framework/server/rpc-server.js', dist)))) {
  console.error('build dist first: npx tsc -p tsconfig.json');
  process.exit(2);
}
const load = (p: string) => import(new URL(p, dist).href);

if (process.argv[2] === '--server') {
  const port = Number(process.argv[3]);
  const { Runtime } = await load('process/runtime.js');
  const { parseArgs } = await load('cli/flags.js');
  const { optionsFromFlags } = await load('cli/options.js');
  const { Service } = await load('framework/server/service.js');
  const args = parseArgs(['--log_level=warning', '--registry=memory']);
  const runtime = new Runtime(optionsFromFlags(args.config), { role: 'mux-bench' });
  runtime.installSignalHandlers();
  const answer = { id: 1, name: 'bench', ok: true, msg: 'hello from the bench backend' };
  // h2c: the prototype's option (ignored by a build without it).
  const options: Record<string, unknown> = { name: 'go.mesh.srv.mux', address: `127.0.0.1:${port}`, h2c: true };
  await new Service(runtime, options).handle('Bench.Call', () => answer).start();
} else {
  const rounds = Number(process.argv[2] ?? 5);
  const seconds = Number(process.argv[3] ?? 3);
  const concurrency = Number(process.argv[4] ?? 50);
  const modes = (process.argv[5] ?? 'h1,p10').split(',');
  const { sendRpc } = await load('core/transport/rpc.js');
  const port = await freePort();
  const server = startProcess('mux-server', process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--server', String(port)], {});
  await waitForPort(server, port);
  const pinClient = process.env.BENCH_PIN_CLIENT ?? '0';
  const pinServer = process.env.BENCH_PIN_SERVER ?? '1';
  if (pinClient) spawnSync('taskset', ['-a', '-p', '-c', pinClient, String(process.pid)]);
  if (pinServer) spawnSync('taskset', ['-a', '-p', '-c', pinServer, String(server.pid)]);

  const dispatchers: Record<string, () => Dispatcher> = {
    h1: () => new Pool(`http://127.0.0.1:${port}`, { connections: 1024, pipelining: 1 }),
    // HTTP/1.1 pipelining: fewer connections, several requests in flight on each.
    p10: () => new Pool(`http://127.0.0.1:${port}`, { connections: 5, pipelining: 10 }),
    p50: () => new Pool(`http://127.0.0.1:${port}`, { connections: 1, pipelining: 50 }),
    h2mesh: () => meshH2 as unknown as Dispatcher,
    h2session: () => session as unknown as Dispatcher,
    h2c: () => new H2CClient(`http://127.0.0.1:${port}`, { maxConcurrentStreams: 1000, pipelining: 1000 }),
  };
  const body = Buffer.from('{"name":"bench","id":1}');
  let n = 0;
  const { connect } = await import('node:http2');
  const h2Available = existsSync(fileURLToPath(new URL('transport/h2c-client.js', dist)));
  const session = h2Available ? connect(`http://127.0.0.1:${port}`) : undefined;
  const viaSession = () =>
    new Promise<{ status: number }>((resolve, reject) => {
      const req = session!.request({ ':method': 'POST', ':path': '/', 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.mux', 'mesh-endpoint': 'Bench.Call', 'mesh-id': `x-${++n}`, 'mesh-timeout': '5000' });
      let status = 0;
      const chunks: Buffer[] = [];
      req.on('response', (h) => (status = Number(h[':status'])));
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => resolve({ status }));
      req.on('error', reject);
      req.end(body);
    });
  const { H2cConnection, sendRpcH2 } = h2Available ? await load('transport/h2c-client.js') : { H2cConnection: undefined, sendRpcH2: undefined };
  const meshH2 = H2cConnection ? new H2cConnection(`127.0.0.1:${port}`, 5000) : undefined;
  const one = (d: Dispatcher) =>
    d === (meshH2 as unknown)
      ? sendRpcH2(meshH2, { service: 'go.mesh.srv.mux', endpoint: 'Bench.Call', id: `x-${++n}`, contentType: 'application/json', body, timeoutMs: 5000 })
      : d === (session as unknown) ? viaSession() : sendRpc(d, { service: 'go.mesh.srv.mux', endpoint: 'Bench.Call', id: `x-${++n}`, contentType: 'application/json', body, timeoutMs: 5000 });

  async function run(d: Dispatcher, ms: number): Promise<{ calls: number; clientUs: number; serverUs: number; errors: number }> {
    const end = Date.now() + ms;
    let calls = 0;
    let errors = 0;
    const c0 = process.cpuUsage();
    const s0 = cpuMicros([server.pid])!;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (Date.now() < end) {
          try {
            const r = await one(d);
            if (r.status !== 200) errors++;
          } catch {
            errors++;
          }
          calls++;
        }
      }),
    );
    const c = process.cpuUsage(c0);
    return { calls, clientUs: c.user + c.system, serverUs: cpuMicros([server.pid])! - s0, errors };
  }

  if (!h2Available && modes.some((m) => m.startsWith('h2'))) {
    console.error('HTTP/2 modes left out: this build has no h2c transport (see branch perf-h2c-prototype)');
    modes.splice(0, modes.length, ...modes.filter((m) => !m.startsWith('h2')));
  }
  const unknown = modes.filter((m) => !(m in dispatchers));
  if (unknown.length) throw new Error(`unknown mode(s) ${unknown.join(', ')}: use ${Object.keys(dispatchers).join(', ')}`);
  const ds = Object.fromEntries(modes.map((m) => [m, dispatchers[m]!()]));
  // Each mode's connections opened and warmed.
  for (const m of modes) await run(ds[m]!, 1000);
  const results: Record<string, { rps: number[]; client: number[]; server: number[]; errors: number }> = {};
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? modes : [...modes].reverse();
    for (const m of order) {
      await run(ds[m]!, 300);
      const x = await run(ds[m]!, seconds * 1000);
      const e = (results[m] ??= { rps: [], client: [], server: [], errors: 0 });
      e.rps.push(x.calls / seconds);
      e.client.push(x.clientUs / x.calls);
      e.server.push(x.serverUs / x.calls);
      e.errors += x.errors;
      console.error(`round ${r + 1} ${m}: ${Math.round(x.calls / seconds)} calls/s, client ${(x.clientUs / x.calls).toFixed(1)} µs, server ${(x.serverUs / x.calls).toFixed(1)} µs/call`);
    }
  }
  const med = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  console.log(`| mode | calls/s | client CPU µs/call | server CPU µs/call | client+server | errors |`);
  console.log(`| --- | ---: | ---: | ---: | ---: | ---: |`);
  for (const m of modes) {
    const e = results[m]!;
    console.log(`| ${m} | ${Math.round(med(e.rps))} | ${med(e.client).toFixed(1)} | ${med(e.server).toFixed(1)} | ${(med(e.client) + med(e.server)).toFixed(1)} | ${e.errors} |`);
  }
  session?.close();
  meshH2?.close();
  for (const d of Object.values(ds)) if (d !== (session as unknown) && d !== (meshH2 as unknown)) await d.destroy();
  await stopAll();
  void spawn;
}
