/**
 * The request's call context (docs/observability.md, "Context"): the front server gives every
 * request a context holding its hop's trace. Without an auth step, the rpc and proxy paths of the
 * gateway, the sidecar and `mesh proxy` get it as an argument and no AsyncLocalStorage is entered
 * for the request (on Node 20 entering one turns on promise hooks for the whole process); every
 * other path (POST /rpc, the dashboard, the broker, SSE) still runs inside it. Either way the
 * backend gets this hop's traceparent: the caller's trace id, a span id of the hop.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { Sidecar } from '../../src/fronts/sidecar/server.js';
import { FrontServer } from '../../src/edge/front-server.js';
import { sendJson } from '../../src/base/http/respond.js';
import type { CallContext } from '../../src/base/util/call-context.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { http } from '../helpers.js';
import { edgeContext } from '../../src/edge/context.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE}-${CALLER}-01`;

function runtimeWith(registry: MemoryRegistry | undefined, role: 'api' | 'sidecar' | 'test'): Runtime {
  const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--client_retries=0', ...(registry ? [] : ['--registry=memory'])];
  return new Runtime(optionsFromFlags(parseArgs(flags, {}).config, registry ? { registry } : {}), { role });
}

/** Counts the contexts entered through the runtime's ContextStore. */
function countRuns(runtime: Runtime): () => number {
  const store = runtime.context;
  const run = store.run.bind(store);
  let runs = 0;
  store.run = <R>(ctx: CallContext, fn: () => R): R => {
    runs++;
    return run(ctx, fn);
  };
  return () => runs;
}

describe('front server: the request context as an argument', () => {
  async function front(explicit: boolean) {
    const runtime = runtimeWith(undefined, 'test');
    const seen: Array<{ ctx: CallContext; ambient: CallContext | undefined }> = [];
    const server = new FrontServer({
      edge: edgeContext(runtime),
      statPrefix: 'ctx',
      errorId: 'go.mesh.api',
      explicitContext: () => explicit,
      handle: async (req, res, ctx) => {
        req.resume();
        await new Promise((r) => setImmediate(r)); // an async hop inside the handler, not ordering
        seen.push({ ctx, ambient: runtime.context.current });
        sendJson(res, 200, '{}');
      },
    });
    const bound: AddressInfo = await server.listen('127.0.0.1:0');
    runtime.onShutdown(() => server.close().then(() => undefined));
    return { runtime, url: `http://127.0.0.1:${bound.port}`, seen };
  }

  it('explicitContext: the handler gets the hop context; none is ambient', async () => {
    const f = await front(true);
    try {
      const r = await http('GET', `${f.url}/x`, { headers: { traceparent: TRACEPARENT } });
      assert.equal(r.status, 200);
      assert.equal(f.seen.length, 1);
      const { ctx, ambient } = f.seen[0]!;
      assert.equal(ambient, undefined);
      assert.equal(ctx.trace?.traceId, TRACE);
      assert.match(ctx.trace!.spanId, /^[0-9a-f]{16}$/);
      assert.notEqual(ctx.trace!.spanId, CALLER);
    } finally {
      await f.runtime.shutdown();
    }
  });

  it('without it: the same context is also the ambient one, across awaits', async () => {
    const f = await front(false);
    try {
      const r = await http('GET', `${f.url}/x`, { headers: { traceparent: TRACEPARENT } });
      assert.equal(r.status, 200);
      const { ctx, ambient } = f.seen[0]!;
      assert.equal(ambient, ctx);
      assert.equal(ctx.trace?.traceId, TRACE);
    } finally {
      await f.runtime.shutdown();
    }
  });
});

describe('gateway and sidecar: rpc, api and proxy paths enter no context; the backend gets the hop trace', () => {
  let app: PlainApp;
  before(async () => {
    app = await startPlainApp('plain');
  });
  after(() => app.close());

  /** The traceparent of the last request the backend received. */
  function lastTraceparent(): string {
    const last = app.received[app.received.length - 1];
    assert.ok(last, 'the backend got a request');
    return String(last.headers.traceparent);
  }

  function assertHopTrace(): void {
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(lastTraceparent());
    assert.ok(m, lastTraceparent());
    assert.equal(m[1], TRACE);
    assert.notEqual(m[2], CALLER, 'the hop span, not the caller');
  }

  async function gateway(handler: 'rpc' | 'proxy' | 'api') {
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.api.plain', app.port);
    const runtime = runtimeWith(registry, 'api');
    const runs = countRuns(runtime);
    const gw = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', handler });
    const bound = await gw.start();
    return { runtime, runs, url: `http://127.0.0.1:${bound.port}` };
  }

  for (const handler of ['rpc', 'proxy', 'api'] as const) {
    it(`gateway --handler=${handler}`, async () => {
      const gw = await gateway(handler);
      try {
        const r = await http('POST', `${gw.url}/plain/echo`, { headers: { 'content-type': 'application/json', traceparent: TRACEPARENT }, body: '{}' });
        assert.equal(r.status, handler === 'api' ? 201 : 200, r.text); // the plain app's API Response says 201
        assertHopTrace();
        assert.equal(gw.runs(), 0);
      } finally {
        await gw.runtime.shutdown();
      }
    });
  }

  it('gateway POST /rpc still runs inside the context', async () => {
    const gw = await gateway('rpc');
    try {
      const body = JSON.stringify({ service: 'go.mesh.api.plain', method: 'Plain.Echo', request: {} });
      const r = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json', traceparent: TRACEPARENT }, body });
      assert.equal(r.status, 200, r.text);
      assertHopTrace();
      assert.equal(gw.runs(), 1);
    } finally {
      await gw.runtime.shutdown();
    }
  });

  it('sidecar /<service>/<method>', async () => {
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.srv.plain', app.port);
    const runtime = runtimeWith(registry, 'sidecar');
    const runs = countRuns(runtime);
    const sidecar = new Sidecar(runtime, { handler: 'rpc' });
    const url = `http://127.0.0.1:${(await sidecar.start('127.0.0.1:0')).port}`;
    try {
      const r = await http('POST', `${url}/plain/echo`, { headers: { 'content-type': 'application/json', traceparent: TRACEPARENT }, body: '{}' });
      assert.equal(r.status, 200, r.text);
      assertHopTrace();
      assert.equal(runs(), 0);
    } finally {
      await runtime.shutdown();
    }
  });
});
