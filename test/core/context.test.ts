/**
 * Context that flows by itself (docs/observability.md, "Context"): inside a framework service
 * handler, `mesh.call` and publishes carry the inbound call's remaining deadline, Mesh-Id,
 * metadata and trace without the handler passing them; explicit options win. Real services on
 * loopback, called with undici; the brokers (memory, http, nats) carry the trace in message headers.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Mesh, MeshError, type HandlerContext } from '../../src/index.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { engine, http, waitFor } from '../helpers.js';
import { parseTraceparent } from '../../src/base/util/trace-context.js';

const quiet = { logLevel: 'off', drainDelay: 0, clientRequestTimeout: '30s' } as const;
const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER_SPAN = '00f067aa0ba902b7';

interface Seen {
  ctx: HandlerContext;
  traceparent?: string;
  now: number;
}

/** The inner service: answers what it saw of its call. */
function inner(mesh: Mesh, calls: { n: number }) {
  mesh.service({ name: 'ctx.inner' }).handle('Echo.Ctx', (_req: unknown, ctx: HandlerContext): Seen => {
    calls.n++;
    return { ctx, traceparent: ctx.metadata.traceparent, now: Date.now() };
  });
}

async function call(port: number, endpoint: string, headers: Record<string, string>, body: unknown = {}) {
  const r = await http('POST', `http://127.0.0.1:${port}/`, {
    headers: { 'content-type': 'application/json', 'mesh-service': 'ctx.outer', 'mesh-endpoint': endpoint, ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: r.json() };
}

describe('context: a real two-service chain', () => {
  const registry = new MemoryRegistry();
  const calls = { n: 0 };
  const innerMesh = new Mesh({ ...quiet, registry, broker: 'memory' });
  const outerMesh = new Mesh({ ...quiet, registry, broker: 'memory' });
  let port = 0;
  const published: Array<{ header: Record<string, string>; inner: Seen }> = [];

  before(async () => {
    inner(innerMesh, calls);
    const outer = outerMesh.service({ name: 'ctx.outer' });
    // No deadline, id, metadata or trace passed by hand.
    outer.handle('Chain.Call', async (_req: unknown, ctx: HandlerContext) => ({ outer: ctx, inner: await outerMesh.call<Seen>('ctx.inner', 'Echo.Ctx', {}) }));
    outer.handle('Chain.Explicit', async (_req: unknown, ctx: HandlerContext) => ({
      outer: ctx,
      inner: await outerMesh.call<Seen>('ctx.inner', 'Echo.Ctx', {}, { id: 'mine', timeout: '20s', metadata: { 'x-tenant': 'other', 'x-extra': '1' } }),
    }));
    outer.handle('Chain.Late', async (req: { waitMs: number }) => {
      // Past the caller's deadline: the call has no budget left and never leaves.
      await new Promise((r) => setTimeout(r, req.waitMs)); // a slow handler outliving its deadline (fixture), not ordering
      return outerMesh.call('ctx.inner', 'Echo.Ctx', {});
    });
    outer.handle('Chain.Publish', async () => {
      await outerMesh.publish('ctx.events', { hello: 1 });
      return {};
    });
    await outerMesh.subscribe('ctx.events', async (_event, message) => {
      // A subscriber runs in the message's context: its call continues the publisher's trace.
      published.push({ header: message.header, inner: await outerMesh.call<Seen>('ctx.inner', 'Echo.Ctx', {}) });
    });
    await innerMesh.start();
    const { services } = await outerMesh.start();
    port = services[0]!.nodes[0]!.port;
  });
  after(async () => {
    await outerMesh.close();
    await innerMesh.close();
  });

  it('the inner service sees the outer deadline (what remains), Mesh-Id, metadata and trace', async () => {
    const sent = Date.now();
    const r = await call(port, 'Chain.Call', { 'mesh-id': 'chain-1', 'mesh-timeout': '4000', 'x-tenant': 'acme', traceparent: `00-${TRACE}-${CALLER_SPAN}-01`, tracestate: 'vendor=x' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const { outer, inner: seen } = r.json as { outer: HandlerContext; inner: Seen };
    assert.equal(seen.ctx.id, 'chain-1');
    assert.equal(seen.ctx.metadata['x-tenant'], 'acme');
    // The remaining budget, not the client's 30 s: the outer deadline, give or take the time on
    // the wire (Mesh-Timeout is relative: the inner hop counts from when it got the call, which on
    // a loaded machine can be a good part of a second later).
    assert.ok(seen.ctx.deadline <= outer.deadline + 1000, `inner deadline ${seen.ctx.deadline} well after outer ${outer.deadline}`);
    assert.ok(seen.ctx.deadline > outer.deadline - 2000, 'about what remained');
    assert.ok(outer.deadline <= Date.now() + 4000 && outer.deadline >= sent + 4000 - 50);
    // Trace: the caller's trace id; the outer hop's own span as the parent; the state forwarded.
    assert.equal(outer.traceId, TRACE);
    assert.notEqual(outer.spanId, CALLER_SPAN);
    const tp = parseTraceparent(seen.traceparent);
    assert.ok(tp, `a valid traceparent: ${seen.traceparent}`);
    assert.equal(tp.traceId, TRACE);
    assert.equal(tp.spanId, outer.spanId);
    assert.equal(tp.flags, 1);
    assert.equal(seen.ctx.metadata.tracestate, 'vendor=x');
    assert.equal(seen.ctx.traceId, TRACE);
    assert.notEqual(seen.ctx.spanId, outer.spanId);
  });

  it('explicit options win over the inherited ones (metadata merged, its keys first)', async () => {
    const r = await call(port, 'Chain.Explicit', { 'mesh-id': 'chain-2', 'mesh-timeout': '4000', 'x-tenant': 'acme', 'x-kept': 'k' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const { outer, inner: seen } = r.json as { outer: HandlerContext; inner: Seen };
    assert.equal(seen.ctx.id, 'mine');
    assert.ok(seen.ctx.deadline > outer.deadline + 10000, 'the explicit 20 s budget');
    assert.equal(seen.ctx.metadata['x-tenant'], 'other');
    assert.equal(seen.ctx.metadata['x-extra'], '1');
    assert.equal(seen.ctx.metadata['x-kept'], 'k');
    assert.equal(parseTraceparent(seen.traceparent)?.traceId, outer.traceId, 'the trace still flows');
  });

  it('no traceparent: the call starts a trace that the inner service continues', async () => {
    const r = await call(port, 'Chain.Call', {});
    const { outer, inner: seen } = r.json as { outer: HandlerContext; inner: Seen };
    assert.match(outer.traceId, /^[0-9a-f]{32}$/);
    assert.equal(seen.ctx.traceId, outer.traceId);
    assert.equal(parseTraceparent(seen.traceparent)?.spanId, outer.spanId);
    // A call without Mesh-Id gets one of the client's, and it is the same on the inner hop.
    assert.equal(seen.ctx.id, seen.ctx.metadata['mesh-id']);
  });

  it('a deadline already spent: the call fails with 504 and never reaches the inner service', async () => {
    const before = calls.n;
    const r = await call(port, 'Chain.Late', { 'mesh-timeout': '30' }, { waitMs: 80 });
    assert.equal(r.status, 504, JSON.stringify(r.json));
    assert.equal(r.json.code, 504);
    assert.equal(calls.n, before);
  });

  it('a publish carries the trace and Mesh-Id; the subscriber continues the trace', async () => {
    published.length = 0;
    const r = await call(port, 'Chain.Publish', { 'mesh-id': 'pub-1', traceparent: `00-${TRACE}-${CALLER_SPAN}-01` });
    assert.equal(r.status, 200);
    await waitFor(() => published.length === 1);
    const { header, inner: seen } = published[0]!;
    const tp = parseTraceparent(header.traceparent);
    assert.equal(tp?.traceId, TRACE);
    assert.notEqual(tp?.spanId, CALLER_SPAN);
    assert.equal(header['mesh-id'], 'pub-1');
    assert.equal(seen.ctx.traceId, TRACE);
    assert.equal(seen.ctx.id, 'pub-1');
    assert.notEqual(parseTraceparent(seen.traceparent)?.spanId, tp?.spanId, 'the subscriber is a hop of its own');
  });

  it('publish headers set by the publisher are kept', async () => {
    published.length = 0;
    const mine = `00-${'1'.repeat(32)}-${'2'.repeat(16)}-00`;
    await outerMesh.publish('ctx.events', { x: 1 }, { header: { Traceparent: mine, 'Mesh-Id': 'given' } });
    await waitFor(() => published.length === 1);
    assert.equal(published[0]!.header.Traceparent, mine);
    assert.equal(published[0]!.header.traceparent, undefined);
    assert.equal(published[0]!.header['Mesh-Id'], 'given');
    assert.equal(published[0]!.inner.ctx.traceId, '1'.repeat(32));
  });
});

/** A handler's publish through a real broker backend reaches a subscriber of another process-like Mesh with its trace. */
async function brokerCarriesTrace(options: Record<string, unknown>): Promise<void> {
  const registry = new MemoryRegistry();
  const publisher = new Mesh({ ...quiet, registry, ...options });
  const subscriber = new Mesh({ ...quiet, registry, ...options });
  try {
    const got: Array<{ header: Record<string, string> }> = [];
    const topic = `ctx.broker.${Math.random().toString(36).slice(2)}`;
    await subscriber.subscribe(topic, (_e, message) => {
      got.push({ header: message.header });
    });
    publisher.service({ name: 'ctx.publisher' }).handle('Pub.Lish', async (_req: unknown, ctx: HandlerContext) => {
      await publisher.publish(topic, { n: 1 });
      return { spanId: ctx.spanId };
    });
    const { services } = await publisher.start();
    const r = await http('POST', `http://127.0.0.1:${services[0]!.nodes[0]!.port}/`, {
      headers: { 'content-type': 'application/json', 'mesh-service': 'ctx.publisher', 'mesh-endpoint': 'Pub.Lish', 'mesh-id': 'b-1', traceparent: `00-${TRACE}-${CALLER_SPAN}-01` },
      body: '{}',
    });
    const answer = r.json<{ spanId: string }>();
    assert.equal(r.status, 200);
    await waitFor(() => got.length === 1, 10000);
    const tp = parseTraceparent(got[0]!.header.traceparent);
    assert.equal(tp?.traceId, TRACE);
    assert.equal(tp?.spanId, answer.spanId, 'the publishing hop is the parent');
    assert.equal(got[0]!.header['mesh-id'], 'b-1');
  } finally {
    await publisher.close();
    await subscriber.close();
  }
}

describe('context: broker backends carry the trace in message headers', () => {
  it('http broker', () => brokerCarriesTrace({ broker: 'http' }));

  const nats = engine('MESH_TEST_NATS_ADDRESS', 'nats');
  it('nats broker', { skip: !nats }, () => brokerCarriesTrace({ broker: 'nats', brokerAddress: nats }));
});

describe('context: outside any handler', () => {
  it('mesh.call starts a trace of its own, and honours a traceparent given in the metadata', async () => {
    const registry = new MemoryRegistry();
    const calls = { n: 0 };
    const mesh = new Mesh({ ...quiet, registry, broker: 'memory' });
    inner(mesh, calls);
    await mesh.start();
    try {
      const fresh = await mesh.call<Seen>('ctx.inner', 'Echo.Ctx', {});
      assert.match(fresh.ctx.traceId, /^[0-9a-f]{32}$/);
      const given = await mesh.call<Seen>('ctx.inner', 'Echo.Ctx', {}, { metadata: { traceparent: `00-${TRACE}-${CALLER_SPAN}-01` } });
      assert.equal(given.ctx.traceId, TRACE);
      const tp = parseTraceparent(given.traceparent)!;
      assert.notEqual(tp.spanId, CALLER_SPAN, 'the calling hop has a span id of its own');
    } finally {
      await mesh.close();
    }
  });

  it('MeshError from the inner service passes through the chain unchanged', async () => {
    const registry = new MemoryRegistry();
    const a = new Mesh({ ...quiet, registry, broker: 'memory' });
    a.service({ name: 'ctx.failing' }).handle('F.Fail', () => {
      throw new MeshError('ctx.failing', 409, 'conflict');
    });
    await a.start();
    try {
      await assert.rejects(a.call('ctx.failing', 'F.Fail', {}), { code: 409, detail: 'conflict' });
    } finally {
      await a.close();
    }
  });
});
