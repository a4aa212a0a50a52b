/**
 * W3C trace context (docs/observability.md, "Context"; docs/protocol.md): `traceparent` and
 * `tracestate` accepted by the gateway (every handler and /rpc), the sidecar (its RPC and proxy
 * routes), framework services and broker messages; each hop forwards the caller's trace id with a
 * span id of its own and starts a trace when none came; a malformed traceparent is ignored (a
 * new trace), never an error. No exporter here: what a backend sees on the wire is the test.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { formatTraceparent, parseTraceparent, parseTracestate, TraceIds } from '../../src/base/util/trace-context.js';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { Sidecar } from '../../src/fronts/sidecar/server.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { http, waitFor } from '../helpers.js';

const TRACE = '0af7651916cd43dd8448eb211c80319c';
const PARENT = 'b7ad6b7169203331';
const VALID = `00-${TRACE}-${PARENT}-01`;

/** Malformed forms, each ignored: the hop starts a new trace. */
const MALFORMED = [
  '',
  'garbage',
  `00-${TRACE}-${PARENT}`, // no flags
  `00-${TRACE.toUpperCase()}-${PARENT}-01`, // upper-case hex
  `00-${'0'.repeat(32)}-${PARENT}-01`, // all-zero trace id
  `00-${TRACE}-${'0'.repeat(16)}-01`, // all-zero parent id
  `ff-${TRACE}-${PARENT}-01`, // version ff
  `00-${TRACE}-${PARENT}-01-extra`, // version 00 with a fifth field
  `00-${TRACE.slice(1)}-${PARENT}-01`, // short trace id
  `00-${TRACE}x-${PARENT}-01`, // long trace id
  `00_${TRACE}_${PARENT}_01`, // wrong separators
  `0g-${TRACE}-${PARENT}-01`, // non-hex version
  `00-${TRACE}-${PARENT}-zz`, // non-hex flags
];

describe('trace context: the header rules', () => {
  it('a valid traceparent parses; the span id is the caller span', () => {
    assert.deepEqual(parseTraceparent(VALID), { traceId: TRACE, spanId: PARENT, flags: 1, state: undefined });
    assert.deepEqual(parseTraceparent(VALID, 'a=1,b=2'), { traceId: TRACE, spanId: PARENT, flags: 1, state: 'a=1,b=2' });
    // A later version may carry more fields; flags other than sampled are kept.
    assert.deepEqual(parseTraceparent(`01-${TRACE}-${PARENT}-03-more`), { traceId: TRACE, spanId: PARENT, flags: 3, state: undefined });
  });

  it('every malformed form is ignored, none throws', () => {
    for (const bad of MALFORMED) assert.equal(parseTraceparent(bad), undefined, bad);
    assert.equal(parseTraceparent(undefined), undefined);
    assert.equal(parseTraceparent([VALID, VALID]), undefined, 'a repeated header');
  });

  it('tracestate: repeated headers joined; too long or with control characters dropped', () => {
    assert.equal(parseTracestate(['a=1', 'b=2']), 'a=1,b=2');
    assert.equal(parseTracestate(' '), undefined);
    assert.equal(parseTracestate(`a=${'x'.repeat(600)}`), undefined);
    assert.equal(parseTracestate('a=\u0001'), undefined);
  });

  it('formatTraceparent writes version 00 and two-digit flags; ids are random, lower-case hex, never zero', () => {
    assert.equal(formatTraceparent({ traceId: TRACE, spanId: PARENT, flags: 0 }), `00-${TRACE}-${PARENT}-00`);
    const ids = new TraceIds();
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const t = ids.traceId();
      const s = ids.spanId();
      assert.match(t, /^[0-9a-f]{32}$/);
      assert.match(s, /^[0-9a-f]{16}$/);
      seen.add(s);
    }
    assert.equal(seen.size, 2000);
  });
});

function runtimeFor(registry: MemoryRegistry, flags: string[] = []): Runtime {
  const options = optionsFromFlags(parseArgs(['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', ...flags], {}).config, { registry });
  return new Runtime(options, { role: 'test' });
}

/** Checks what a backend saw: the caller's trace id (or a new trace), never the caller's span as its parent. */
function assertHop(traceparent: unknown, sent: string | undefined): void {
  assert.equal(typeof traceparent, 'string', 'the backend got a traceparent');
  const got = parseTraceparent(traceparent as string);
  assert.ok(got, `valid: ${String(traceparent)}`);
  const parent = sent === undefined ? undefined : parseTraceparent(sent);
  if (parent) {
    assert.equal(got.traceId, parent.traceId, 'the same trace');
    assert.notEqual(got.spanId, parent.spanId, 'the hop forwards a span id of its own');
    assert.equal(got.flags, parent.flags);
  } else {
    assert.notEqual(got.traceId, TRACE, 'a new trace');
    assert.equal(got.flags, 0, 'a new trace is not sampled with tracing off');
  }
}

const CASES: Array<[string, string | undefined]> = [
  ['valid', VALID],
  ['none', undefined],
  ...MALFORMED.filter((m) => m !== '').slice(0, 6).map((m): [string, string] => [`malformed ${m.slice(0, 12)}`, m]),
];

describe('trace context: the gateway, every handler and /rpc', () => {
  const registry = new MemoryRegistry();
  let app: PlainApp;
  const gateways: Record<string, { runtime: Runtime; url: string }> = {};

  before(async () => {
    app = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', app.port);
    for (const handler of ['api', 'rpc', 'proxy', 'event'] as const) {
      const runtime = runtimeFor(registry);
      const gateway = new Gateway(runtime, { address: '127.0.0.1:0', namespace: 'go.mesh.api', handler });
      const bound = await gateway.start();
      gateways[handler] = { runtime, url: `http://127.0.0.1:${bound.port}` };
    }
  });
  after(async () => {
    for (const g of Object.values(gateways)) await g.runtime.shutdown();
    await app.close();
  });

  const last = () => app.received[app.received.length - 1]!;
  const headersOf = (sent: string | undefined) => (sent === undefined ? {} : { traceparent: sent, tracestate: 'congo=t61rcWkgMzE' });

  for (const [name, sent] of CASES) {
    it(`api, rpc and proxy handlers and /rpc: ${name}`, async () => {
      for (const handler of ['api', 'rpc', 'proxy'] as const) {
        const before = app.received.length;
        const r = await http('POST', `${gateways[handler]!.url}/plain/echo`, { headers: { 'content-type': 'application/json', ...headersOf(sent) }, body: '{}' });
        assert.ok(r.status < 300, `${handler}: ${r.status} ${r.text}`);
        assert.equal(app.received.length, before + 1);
        assertHop(last().headers.traceparent, sent);
        if (parseTraceparent(sent)) assert.equal(last().headers.tracestate, 'congo=t61rcWkgMzE', `${handler}: tracestate forwarded`);
        else assert.equal(last().headers.tracestate, undefined, `${handler}: no tracestate without a valid traceparent`);
      }
      const r = await http('POST', `${gateways.api!.url}/rpc`, {
        headers: { 'content-type': 'application/json', ...headersOf(sent) },
        body: JSON.stringify({ service: 'go.mesh.api.plain', method: 'Plain.Echo', request: {} }),
      });
      assert.equal(r.status, 200, r.text);
      assertHop(last().headers.traceparent, sent);
    });
  }

  it('event handler: the message carries the hop trace', async () => {
    const runtime = gateways.event!.runtime;
    const got: Message[] = [];
    const sub = await runtime.broker.subscribe('go.mesh.api.orders', (m) => {
      got.push(m);
    });
    for (const [, sent] of CASES.slice(0, 3)) {
      got.length = 0;
      const r = await http('POST', `${gateways.event!.url}/orders/created`, { headers: { 'content-type': 'application/json', ...headersOf(sent) }, body: '{"n":1}' });
      assert.equal(r.status, 200, r.text);
      await waitFor(() => got.length === 1);
      assertHop(got[0]!.header.traceparent, sent);
    }
    await sub.unsubscribe();
  });
});

describe('trace context: the sidecar, its RPC and proxy routes and /broker', () => {
  const registry = new MemoryRegistry();
  let app: PlainApp;
  const sidecars: Record<string, { runtime: Runtime; url: string }> = {};

  before(async () => {
    app = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.srv.plain', app.port);
    for (const handler of ['rpc', 'proxy'] as const) {
      const runtime = runtimeFor(registry);
      const sidecar = new Sidecar(runtime, { handler });
      const bound = await sidecar.start('127.0.0.1:0');
      sidecars[handler] = { runtime, url: `http://127.0.0.1:${bound.port}` };
    }
  });
  after(async () => {
    for (const s of Object.values(sidecars)) await s.runtime.shutdown();
    await app.close();
  });

  for (const [name, sent] of CASES.slice(0, 4)) {
    it(`rpc and proxy routes and /rpc: ${name}`, async () => {
      const headers = { 'content-type': 'application/json', ...(sent === undefined ? {} : { traceparent: sent }) };
      for (const handler of ['rpc', 'proxy'] as const) {
        const r = await http('POST', `${sidecars[handler]!.url}/plain/echo`, { headers, body: '{}' });
        assert.ok(r.status < 300, `${handler}: ${r.status} ${r.text}`);
        assertHop(app.received[app.received.length - 1]!.headers.traceparent, sent);
      }
      const r = await http('POST', `${sidecars.rpc!.url}/rpc`, { headers, body: JSON.stringify({ service: 'go.mesh.srv.plain', method: 'Plain.Echo', request: {} }) });
      assert.equal(r.status, 200, r.text);
      assertHop(app.received[app.received.length - 1]!.headers.traceparent, sent);
    });
  }

  it('POST /broker: the message carries the hop trace, not the caller span', async () => {
    const runtime = sidecars.rpc!.runtime;
    const got: Message[] = [];
    const sub = await runtime.broker.subscribe('news', (m) => {
      got.push(m);
    });
    const r = await http('POST', `${sidecars.rpc!.url}/broker?topic=news`, { headers: { 'content-type': 'text/plain', traceparent: VALID }, body: 'hi' });
    assert.equal(r.status, 200, r.text);
    await waitFor(() => got.length === 1);
    const names = Object.keys(got[0]!.header).filter((k) => k.toLowerCase() === 'traceparent');
    assert.deepEqual(names, ['traceparent'], 'one traceparent, the hop one');
    assertHop(got[0]!.header.traceparent, VALID);
    await sub.unsubscribe();
  });
});
