/**
 * OTLP export never slows or fails a request (docs/observability.md, "Tracing"): a gateway with
 * --tracing=otlp in front of a plain backend, exporting to a receiver that is down, hangs or
 * answers (test/fixtures/otlp-receiver.ts, a process of its own): requests answer 200 at once;
 * spans that cannot be exported are dropped and counted (`tracing.spans_dropped`); exported ones
 * are counted (`tracing.spans_exported`); shutdown flushes; sampling; tracing off costs no tracer.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { Sidecar } from '../../src/fronts/sidecar/server.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { freePort, http, ROOT, startProcess, waitFor, type RunningProcess } from '../helpers.js';

const RECEIVER = join(ROOT, 'test/fixtures/otlp-receiver.ts');
const TRACE = '5b8efff798038103d269b633813fc60c';
const CALLER = 'eee19b7ec3c1b174';

/** Every receiver started, stopped after the tests whatever their outcome. */
const receivers: RunningProcess[] = [];
after(() => Promise.all(receivers.map((p) => p.stop())));

async function startReceiver(extra: string[] = []): Promise<{ proc: RunningProcess; url: string; base: string }> {
  const proc = startProcess(['--import', 'tsx', RECEIVER, ...extra], {}, '');
  receivers.push(proc);
  const port = await proc.waitForPort(/otlp receiver listening on port (\d+)/, 15000);
  return { proc, base: `http://127.0.0.1:${port}`, url: `http://127.0.0.1:${port}/v1/traces` };
}

async function spansOf(base: string): Promise<Array<{ traceId: string }>> {
  return (await http('GET', `${base}/spans`)).json() as Array<{ traceId: string }>;
}

function gatewayRuntime(registry: MemoryRegistry, flags: string[]): Runtime {
  const options = optionsFromFlags(parseArgs(['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--client_retries=0', ...flags], {}).config, { registry });
  return new Runtime(options, { role: 'api' });
}

/** Sends n requests, `concurrency` at a time, through a gateway; resolves with their statuses. */
async function load(url: string, n: number, concurrency = 20): Promise<{ statuses: Set<number> }> {
  const statuses = new Set<number>();
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        next++;
        const r = await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json' }, body: '{}' });
        statuses.add(r.status);
      }
    }),
  );
  return { statuses };
}

describe('tracing: export never slows or fails a request', () => {
  let app: PlainApp;
  before(async () => {
    app = await startPlainApp('plain');
  });
  after(() => app.close());

  /** A registry of its own for each runtime: the runtime's shutdown closes it. */
  async function registry(): Promise<MemoryRegistry> {
    const r = new MemoryRegistry();
    await registerPlain(r, 'go.mesh.api.plain', app.port);
    return r;
  }

  async function gatewayTo(address: string) {
    const runtime = gatewayRuntime(await registry(), ['--tracing=otlp', `--tracing_address=${address}`]);
    const gateway = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', handler: 'rpc' });
    const bound = await gateway.start();
    const counter = (name: string) => runtime.stats.counter(name).value;
    return { runtime, url: `http://127.0.0.1:${bound.port}`, counter };
  }

  it('a receiver that is down: requests answer 200 at once, the spans are dropped and counted', async () => {
    const port = await freePort();
    const gw = await gatewayTo(`http://127.0.0.1:${port}/v1/traces`);
    try {
      const { statuses } = await load(gw.url, 300);
      assert.deepEqual([...statuses], [200]);
      await waitFor(() => gw.counter('tracing.spans_dropped') >= 600, 20000);
      assert.equal(gw.counter('tracing.spans_exported'), 0);
    } finally {
      await gw.runtime.shutdown();
    }
  });

  it('a receiver that hangs: requests stay fast; past the bounded queue spans are dropped', async () => {
    const receiver = await startReceiver(['--hang']);
    const gw = await gatewayTo(receiver.url);
    try {
      // 2 spans a request (server and client): 1,500 requests overflow the queue of 2,048.
      // The receiver never answers: a request that waited on an export would never be answered.
      const { statuses } = await load(gw.url, 1500, 30);
      assert.deepEqual([...statuses], [200]);
      assert.equal(gw.counter('tracing.spans_exported'), 0, 'no export finished meanwhile');
      await waitFor(() => gw.counter('tracing.spans_dropped') > 0, 20000);
      assert.ok((await http('GET', `${receiver.base}/requests`)).json().requests >= 1, 'the exporter did try');
    } finally {
      await gw.runtime.shutdown();
      await receiver.proc.stop();
    }
  });

  it('a receiver that answers: spans exported and counted; shutdown flushes what is queued', async () => {
    const receiver = await startReceiver();
    const gw = await gatewayTo(receiver.url);
    try {
      const { statuses } = await load(gw.url, 10, 2);
      assert.deepEqual([...statuses], [200]);
    } finally {
      await gw.runtime.shutdown();
    }
    // The shutdown flushed without waiting for the batch delay.
    assert.equal(gw.counter('tracing.spans_exported'), 20);
    assert.equal(gw.counter('tracing.spans_dropped'), 0);
    assert.equal((await spansOf(receiver.base)).length, 20);
    await receiver.proc.stop();
  });

  it('--tracing_sample_rate=0: new traces are not recorded, a sampled caller trace is', async () => {
    const receiver = await startReceiver();
    const runtime = gatewayRuntime(await registry(), ['--tracing=otlp', `--tracing_address=${receiver.url}`, '--tracing_sample_rate=0']);
    const gateway = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', handler: 'rpc' });
    const url = `http://127.0.0.1:${(await gateway.start()).port}`;
    try {
      const before = app.received.length;
      assert.equal((await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 200);
      // Not recorded, still propagated (flags 00).
      assert.match(String(app.received[before]!.headers.traceparent), /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
      assert.equal((await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json', traceparent: `00-${TRACE}-${CALLER}-01` }, body: '{}' })).status, 200);
    } finally {
      await runtime.shutdown();
    }
    const spans = await spansOf(receiver.base);
    assert.deepEqual([...new Set(spans.map((s) => s.traceId))], [TRACE]);
    assert.equal(spans.length, 2);
    await receiver.proc.stop();
  });

  for (const handler of ['rpc', 'proxy'] as const) {
  it(`the sidecar (--handler=${handler}): a server span per request and a client span per call, service.name mesh-sidecar`, async () => {
    const receiver = await startReceiver();
    const reg = new MemoryRegistry();
    await registerPlain(reg, 'go.mesh.srv.plain', app.port);
    const options = optionsFromFlags(parseArgs(['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--tracing=otlp', `--tracing_address=${receiver.url}`], {}).config, { registry: reg });
    const runtime = new Runtime(options, { role: 'sidecar' });
    const sidecar = new Sidecar(runtime, { handler });
    const url = `http://127.0.0.1:${(await sidecar.start('127.0.0.1:0')).port}`;
    try {
      const r = await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json', traceparent: `00-${TRACE}-${CALLER}-01` }, body: '{}' });
      assert.equal(r.status, 200, r.text);
    } finally {
      await runtime.shutdown();
    }
    const spans = (await (await http('GET', `${receiver.base}/spans`)).json()) as Array<{ traceId: string; spanId: string; parentSpanId: string; name: string; kind: number; resource: Record<string, unknown> }>;
    await receiver.proc.stop();
    assert.equal(spans.length, 2, JSON.stringify(spans));
    const server = spans.find((s) => s.kind === 2)!;
    const client = spans.find((s) => s.kind === 3)!;
    // HTTP semantic conventions: `{method} {http.route}` where the rpc handler resolved a method; a proxied path is no route, so `{method}`.
    assert.deepEqual([server.name, server.traceId, server.parentSpanId, server.resource['service.name']], [handler === 'rpc' ? 'POST /plain/echo' : 'POST', TRACE, CALLER, 'mesh-sidecar']);
    assert.deepEqual([client.name, client.traceId, client.parentSpanId], [handler === 'rpc' ? 'go.mesh.srv.plain/Plain.Echo' : 'POST', TRACE, server.spanId]);
    // The backend saw the client span as its parent.
    assert.equal(String(app.received[app.received.length - 1]!.headers.traceparent), `00-${TRACE}-${client.spanId}-01`);
  });
  }

  it('tracing off: no tracer, no span, no tracing stat', async () => {
    const runtime = gatewayRuntime(await registry(), []);
    assert.equal(runtime.tracer, undefined);
    const gateway = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', handler: 'rpc' });
    const url = `http://127.0.0.1:${(await gateway.start()).port}`;
    try {
      assert.equal((await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 200);
      assert.deepEqual(runtime.stats.list({ filter: /^tracing\./ }), [], 'no tracing stats');
    } finally {
      await runtime.shutdown();
    }
  });
});

