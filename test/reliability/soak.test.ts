/**
 * Soak: steady mixed traffic against a whole mesh of real processes for MESH_SOAK_SECONDS (120 s
 * in CI, i.e. with MESH_TEST_REQUIRE_ENGINES set; 20 s on a developer's machine), sampling the
 * memory of every mesh process, then asserting no request failed, no process died and memory is
 * flat.
 *
 * Processes (temp local registry, http broker): a who service (go.mesh.srv.who), an API service
 * and its backend (test/fixtures/engines-service.ts), gateway A (default: registry router, api
 * handler fallback, /rpc), gateway B (--handler=proxy) in front of a plain node:http app, and a
 * sidecar. Traffic, 10 clients:
 *   gateway A  GET /<api>/say/hello?name=..   api handler → API service → backend (which publishes)
 *   gateway A  POST /rpc                       go.mesh.srv.who Who.Am
 *   gateway B  GET /plain/...                  proxy handler → plain app
 *   sidecar    POST /who/am                    rpc handler
 *   sidecar    POST /broker?topic=..           publish, received by a WebSocket subscriber
 *   sidecar    POST then DELETE /registry      a registration and its deregistration (one client, in order)
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { startGatewayProcess, startPlainApp, http } from '../fixtures/gateway-helpers.js';
import { startSidecar, subscribe } from '../fixtures/sidecar-common.js';
import { tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { formatReport, startLoad, type LoadRequest, type LoadReport } from './load.js';
import { ENGINES_SERVICE, MiB, ProcessGroup, WHO, alive, median, mib, rssBytes, startService } from './harness.js';

const inCi = !!process.env.MESH_TEST_REQUIRE_ENGINES;
const SOAK_SECONDS = Number(process.env.MESH_SOAK_SECONDS ?? (inCi ? 120 : 20));
if (!Number.isFinite(SOAK_SECONDS) || SOAK_SECONDS < 5) throw new Error(`MESH_SOAK_SECONDS must be a number >= 5, not ${process.env.MESH_SOAK_SECONDS}`);
/** About 30 samples whatever the duration, at most one a second. */
const SAMPLE_MS = Math.max(1000, Math.round((SOAK_SECONDS * 1000) / 30));

/**
 * Memory is flat when, after a warm-up (the first 20 % of the samples: JIT, caches, connection
 * pools and the heap's first growth), the median of the last third of the samples is at most 1.3×
 * the median of the first third, or at most 8 MiB above it. Medians ignore the garbage collector's
 * sawtooth and one-off spikes for RSS (which the process rarely gives back). The heap in use is
 * compared by its lowest sample in each third instead: right after a collection it is what is
 * live, and a leak raises that floor, while the sawtooth above it only says when the collector
 * last ran (a median of heap samples moved by 40 % between runs without any leak). The absolute allowance keeps a small heap (a few MiB, where one GC
 * cycle is 30 %) from failing on noise. A leak of 1 KiB per request at this load (~100 000
 * requests in 120 s) grows by ~100 MiB and fails either way.
 */
const GROWTH_RATIO = 1.3;
const GROWTH_SLACK = 8 * MiB;

interface Watched {
  name: string;
  proc: RunningProcess;
  pid: number;
  admin: string;
  rss: number[];
  heap: number[];
}

function flat(samples: number[], level: (xs: number[]) => number): { first: number; last: number; ok: boolean } | undefined {
  const kept = samples.slice(Math.ceil(samples.length * 0.2));
  if (kept.length < 6) return undefined;
  const third = Math.floor(kept.length / 3);
  const first = level(kept.slice(0, third));
  const last = level(kept.slice(-third));
  return { first, last, ok: last <= first * GROWTH_RATIO || last - first <= GROWTH_SLACK };
}

async function heapUsed(admin: string): Promise<number | undefined> {
  if (!admin) return undefined;
  try {
    const res = await http('GET', `${admin}/stats?format=json&filter=^server\\.memory_allocated$`);
    const stat = (res.json() as { stats: Array<{ name: string; value: number }> }).stats.find((s) => s.name === 'server.memory_allocated');
    return stat?.value;
  } catch {
    return undefined;
  }
}

it(`soak: ${SOAK_SECONDS}s of mixed traffic through gateways and a sidecar: no failure, no death, flat memory`, { timeout: (SOAK_SECONDS + 180) * 1000 }, async (t) => {
  const tmp = tempDir('mesh-rel-soak-');
  const group = new ProcessGroup();
  const plain = await startPlainApp('plain');
  const api = `soak${process.pid}`;
  const loads: Array<{ stop(): Promise<LoadReport> }> = [];
  let sub: Awaited<ReturnType<typeof subscribe>> | undefined;
  try {
    const local = [`--registry_address=${tmp.path}`];
    const [who, backend, apiSvc, gwA, gwB, sc] = await Promise.all([
      startService(WHO, 'go.mesh.srv.who', local),
      startService(ENGINES_SERVICE, `go.mesh.srv.${api}`, local, { args: ['backend', api] }),
      startService(ENGINES_SERVICE, `go.mesh.api.${api}`, local, { args: ['api', api] }),
      startGatewayProcess(tmp.path),
      startGatewayProcess(tmp.path, ['--handler=proxy']),
      startSidecar(tmp.path),
    ]);
    for (const p of [who, backend, apiSvc, gwA, gwB, sc]) group.add(p);
    const watched: Watched[] = [
      { name: 'gateway', proc: gwA.proc, admin: gwA.admin },
      { name: 'gateway --handler=proxy', proc: gwB.proc, admin: gwB.admin },
      { name: 'sidecar', proc: sc.proc, admin: sc.admin },
      { name: 'who service', proc: who.proc, admin: who.admin },
      { name: 'api service', proc: apiSvc.proc, admin: apiSvc.admin },
      { name: 'backend service', proc: backend.proc, admin: backend.admin },
    ].map((w) => ({ ...w, pid: w.proc.child.pid!, rss: [], heap: [] }));

    // The plain app, registered through the sidecar without a TTL, for the proxy handler.
    const reg = await http('POST', `${sc.base}/registry`, {
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ Name: 'go.mesh.api.plain', Nodes: [{ Id: 'plain-1', Address: '127.0.0.1', Port: plain.port }] }),
    });
    assert.equal(reg.status, 200, reg.text);
    const topic = `soak.${process.pid}`;
    sub = await subscribe(sc.base, topic);

    const json = { 'content-type': 'application/json' };
    const gatewayMix: LoadRequest[] = [
      { name: 'api handler', method: 'GET', path: `/${api}/say/hello?name=soak` },
      { name: '/rpc', method: 'POST', path: '/rpc', headers: json, body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Am', request: {} }) },
    ];
    const sidecarMix: LoadRequest[] = [
      { name: 'rpc handler', method: 'POST', path: '/who/am', headers: json, body: '{}' },
      { name: 'publish', method: 'POST', path: `/broker?topic=${topic}`, headers: { 'content-type': 'text/plain' }, body: 'soak message' },
    ];
    const registration = (seq: number): LoadRequest => ({
      name: seq % 2 ? 'deregister' : 'register',
      method: seq % 2 ? 'DELETE' : 'POST',
      path: '/registry',
      headers: json,
      body: JSON.stringify({ Name: 'go.mesh.srv.soakreg', Nodes: [{ Id: `reg-${seq >> 1}`, Address: '127.0.0.1', Port: 1 + ((seq >> 1) % 60000) }] }),
    });

    // Every route answers before the clock starts (the gateway's router learns the API service).
    await waitFor(async () => (await http('GET', `${gwA.url}/${api}/say/hello?name=warm`)).status === 200, 30_000, 100);
    await waitFor(async () => (await http('GET', `${gwB.url}/plain/warm`)).status === 200, 30_000, 100);

    const durationMs = SOAK_SECONDS * 1000;
    const started = Date.now();
    const runs = {
      gateway: startLoad({ origin: gwA.url, concurrency: 4, pauseMs: 10, mix: gatewayMix, durationMs }),
      proxy: startLoad({ origin: gwB.url, concurrency: 2, pauseMs: 10, mix: [{ name: 'proxy handler', method: 'GET', path: '/plain/items?page=1' }], durationMs }),
      sidecar: startLoad({ origin: sc.base, concurrency: 3, pauseMs: 10, mix: sidecarMix, durationMs }),
      registry: startLoad({ origin: sc.base, concurrency: 1, pauseMs: 10, mix: registration, durationMs }),
    };
    loads.push(...Object.values(runs));

    while (Date.now() - started < durationMs) {
      await Promise.all(
        watched.map(async (w) => {
          const rss = rssBytes(w.pid);
          const heap = await heapUsed(w.admin);
          if (rss !== undefined) w.rss.push(rss);
          if (heap !== undefined) w.heap.push(heap);
        }),
      );
      await new Promise((r) => setTimeout(r, SAMPLE_MS)); // the sampling period of a soak, not ordering
    }
    const reports = Object.fromEntries(await Promise.all(Object.entries(runs).map(async ([k, l]) => [k, await l.done] as const)));
    for (const [k, r] of Object.entries(reports)) t.diagnostic(`${formatReport(r, k)} ${JSON.stringify(r.byName)}`);

    // Every message published with a 200 reaches the subscriber.
    const published = reports.sidecar!.byName['publish']?.ok ?? 0;
    await waitFor(() => sub!.frames.length >= published, 15_000, 50).catch(() => undefined);
    t.diagnostic(`publishes answered 200: ${published}; frames received by the WebSocket subscriber: ${sub.frames.length}`);

    const problems: string[] = [];
    for (const w of watched) {
      const r = flat(w.rss, (xs) => median(xs)!);
      const h = flat(w.heap, (xs) => Math.min(...xs));
      t.diagnostic(
        `${w.name}: ${w.rss.length} samples every ${SAMPLE_MS}ms; RSS ${mib(r?.first)} → ${mib(r?.last)} (first → last third median after warm-up), ` +
          `max ${mib(Math.max(...w.rss))}; heap used (lowest) ${mib(h?.first)} → ${mib(h?.last)}, max ${mib(w.heap.length ? Math.max(...w.heap) : undefined)}`,
      );
      if (!alive(w.proc)) problems.push(`${w.name} died: ${w.proc.output().slice(-2000)}`);
      if (r && !r.ok) problems.push(`${w.name}: RSS grew from ${mib(r.first)} to ${mib(r.last)}`);
      if (h && !h.ok) problems.push(`${w.name}: heap grew from ${mib(h.first)} to ${mib(h.last)}`);
      if (!r && process.platform === 'linux') problems.push(`${w.name}: too few RSS samples (${w.rss.length})`);
    }
    for (const [k, r] of Object.entries(reports)) {
      if (r.failed > 0) problems.push(formatReport(r, k));
      if (r.ok === 0) problems.push(`${k}: no request succeeded`);
    }
    if (sub.frames.length < published) problems.push(`the subscriber got ${sub.frames.length} of ${published} messages published`);
    assert.deepEqual(problems, []);
  } finally {
    await Promise.all(loads.map((l) => l.stop()));
    sub?.ws.terminate();
    await group.stopAll();
    await plain.close();
    tmp.cleanup();
  }
});
