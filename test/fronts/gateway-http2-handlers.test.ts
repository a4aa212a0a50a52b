/**
 * The handlers of `mesh api --enable_http2` over HTTP/1.1 and HTTP/2 (docs/gateway.md "HTTP/2";
 * the route, proxy and edge steps are in gateway-http2.test.ts): the same requests over HTTP/1.1,
 * over h2c by prior knowledge and over h2 chosen by ALPN on the TLS listener get the same answers
 * (status, headers that matter, body bytes) from
 * - the api handler (`--handler=api`) in front of a framework service: the API Request the service
 *   gets, its API Response, its plain JSON, its error, an unknown service;
 * - the rpc handler (`--handler=rpc`): a JSON body or the query as the request, the service's
 *   answer and error, a 415, JSON nested too deep;
 * - Server-Sent Events of a server stream (POST and GET, an error event, a unary endpoint's 406),
 *   each event as it comes, and the client going away cancels the backend's handler;
 * - tracing (`--tracing=otlp`, spans to a real OTLP receiver): a `traceparent` continued the same
 *   way, the backend seeing the caller's trace id, the same spans (but for the protocol's version);
 * - the event handler (`--handler=event`): the answer and the message a broker subscriber gets,
 *   plain Event JSON and a binary CloudEvent.
 * Real servers on loopback; real clients (node:http, node:http2).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ClientHttp2Session } from 'node:http2';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Service } from '../../src/framework/server/service.js';
import type { StreamContext } from '../../src/framework/server/stream-server.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { MeshError } from '../../src/base/errors.js';
import { overHttp1, overHttp2, session, view, type Answer, type Case } from '../fixtures/h2-client.js';
import { startEdgeGateway, type EdgeGateway } from '../fixtures/edge-gateway.js';
import type { ReceivedSpan } from '../fixtures/otlp-receiver.js';
import { makePair } from '../tls-fixtures.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CALLER = '00f067aa0ba902b7';
const TRACEPARENT = `00-${TRACE}-${CALLER}-01`;
const JSON_TYPE = { 'content-type': 'application/json' };
const SSE = { accept: 'text/event-stream' };

/** A body with what is new for each request left out: the call's Mesh-Id and the trace of an untraced request, the hop's span. */
const perRequest = (body: string) => body.replace(/"mesh-id":"[^"]+"/g, '"mesh-id":"<id>"').replace(/"traceparent":"00-[0-9a-f]{32}-[0-9a-f]{16}-/g, '"traceparent":"00-<trace>-<span>-');

/** The status, the headers a client reads, the body's bytes (but for perRequest). */
const withHeaders =
  (...names: string[]) =>
  (a: Answer) => ({ status: a.status, body: perRequest(a.body.toString()), ...Object.fromEntries(['content-type', ...names].map((n) => [n, a.headers[n]])) });

/** The api handler's request set (a --handler=api gateway, namespace go.mesh.api). */
const API_CASES: Case[] = [
  {
    name: 'api: a JSON POST with a query; the API Request the service got, its API Response (status, headers, body)',
    method: 'POST',
    path: '/echo/call?a=1&b=x&b=y',
    headers: { ...JSON_TYPE, 'x-request-id': 'r-1', 'user-agent': 'h2set' },
    body: '{"n":1}',
    compare: withHeaders('x-echo', 'set-cookie', 'content-length'),
  },
  {
    name: 'api: a form POST (post fields), a path with - (CamelCase)',
    method: 'POST',
    path: '/echo/call-me',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: 'name=John&tag=a&tag=b',
    compare: withHeaders('x-echo'),
  },
  { name: 'api: a GET answered with the service\'s own JSON', method: 'GET', path: '/echo/plain?name=John' },
  { name: 'api: the service\'s error', method: 'POST', path: '/echo/fail', headers: JSON_TYPE, body: '{}' },
  { name: 'api: an answer with API Response fields and other keys (502)', method: 'GET', path: '/echo/mixed' },
  { name: 'api: an unknown service', method: 'GET', path: '/nosuch/call' },
  { name: 'api: a path that names no service', method: 'GET', path: '/x' },
  // Server-Sent Events of a server stream, under the same handler.
  { name: 'sse: POST with the JSON request', method: 'POST', path: '/echo/count', headers: { ...SSE, ...JSON_TYPE }, body: '{"to":3}', compare: withHeaders('cache-control', 'x-accel-buffering') },
  { name: 'sse: GET with the request in the query', method: 'GET', path: '/echo/count?to=2', headers: SSE, compare: withHeaders('cache-control') },
  { name: 'sse: an error after the first event (event: error)', method: 'POST', path: '/echo/fail-later', headers: { ...SSE, ...JSON_TYPE }, body: '{}', compare: withHeaders('cache-control') },
  { name: 'sse: a unary endpoint (406)', method: 'POST', path: '/echo/plain', headers: { ...SSE, ...JSON_TYPE }, body: '{}' },
  { name: 'sse: a request of another content type (415)', method: 'POST', path: '/echo/count', headers: { ...SSE, 'content-type': 'text/plain' }, body: 'to=3' },
];

/** The rpc handler's request set (a --handler=rpc gateway): the body or the query as the call's request, the answer as the service gave it. */
const RPC_CASES: Case[] = [
  { name: 'rpc: a JSON POST', method: 'POST', path: '/echo/seen', headers: { ...JSON_TYPE, 'x-request-id': 'r-2' }, body: '{"n":1}', compare: withHeaders('content-length') },
  { name: 'rpc: a GET, its query as the request', method: 'GET', path: '/echo/seen?a=1&b=x&b=y', compare: withHeaders() },
  { name: 'rpc: the service\'s error', method: 'POST', path: '/echo/fail', headers: JSON_TYPE, body: '{}' },
  { name: 'rpc: another content type (415)', method: 'POST', path: '/echo/call', headers: { 'content-type': 'text/plain' }, body: 'hi' },
  { name: 'rpc: JSON nested deeper than 64 levels (400)', method: 'POST', path: '/echo/call', headers: JSON_TYPE, body: '['.repeat(65) + ']'.repeat(65) },
  { name: 'rpc: an SSE stream', method: 'POST', path: '/echo/count', headers: { ...SSE, ...JSON_TYPE }, body: '{"to":2}', compare: withHeaders('cache-control') },
];

type TreeSpan = Omit<ReceivedSpan, 'traceId' | 'spanId' | 'parentSpanId'> & { depth: number; inTrace: boolean };

/**
 * The spans of one request from `root` down, parent before children, as they read with the ids
 * left out and `network.protocol.version` (the one attribute that names the protocol) masked.
 */
function spanTree(spans: ReceivedSpan[], root: ReceivedSpan): TreeSpan[] {
  const out: TreeSpan[] = [];
  const walk = (s: ReceivedSpan, depth: number) => {
    const { traceId, spanId, parentSpanId: _parent, ...rest } = s;
    const attributes = 'network.protocol.version' in rest.attributes ? { ...rest.attributes, 'network.protocol.version': '<version>' } : rest.attributes;
    out.push({ ...rest, attributes, depth, inTrace: traceId === TRACE });
    for (const child of spans.filter((c) => c.parentSpanId === spanId).sort((a, b) => a.name.localeCompare(b.name))) walk(child, depth + 1);
  };
  walk(root, 0);
  return out;
}

describe('the handlers of mesh api over HTTP/2 (--enable_http2)', () => {
  const dir = tempDir('mesh-gateway-h2-handlers-');
  const registry = new MemoryRegistry();
  let backend: Runtime;
  let receiver: RunningProcess;
  let receiverBase = '';
  const gateways: EdgeGateway[] = [];
  let api: { plain: EdgeGateway; tls: EdgeGateway };
  let rpc: { plain: EdgeGateway; tls: EdgeGateway };
  let event: { plain: EdgeGateway; tls: EdgeGateway };
  /** The reasons the endless stream's handler was cancelled with, in order. */
  const cancelled: string[] = [];

  before(async () => {
    receiver = startProcess(['--import', 'tsx', join(ROOT, 'test/fixtures/otlp-receiver.ts')], {}, '');
    receiverBase = `http://127.0.0.1:${await receiver.waitForPort(/otlp receiver listening on port (\d+)/, 15_000)}`;
    const tracing = ['--tracing=otlp', `--tracing_address=${receiverBase}/v1/traces`];
    backend = new Runtime(optionsFromFlags(parseArgs(['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--address=127.0.0.1:0', ...tracing], {}).config, { registry }), { role: 'test' });
    const echo = new Service(backend, { name: 'go.mesh.api.echo' });
    echo.handle('Echo.Call', (req: unknown, ctx) => ({
      statusCode: 201,
      header: {
        'X-Echo': { key: 'X-Echo', values: ['one', 'two'] },
        'Set-Cookie': { key: 'Set-Cookie', values: ['a=1', 'b=2'] },
        'X-Trace-Id': { key: 'X-Trace-Id', values: [ctx.traceId] },
      },
      body: JSON.stringify({ request: req, metadata: ctx.metadata }),
    }));
    echo.handle('Echo.CallMe', (req: unknown) => ({ header: { 'X-Echo': { key: 'X-Echo', values: ['form'] } }, body: JSON.stringify(req) }));
    echo.handle('Echo.Seen', (req: unknown, ctx) => ({ request: req, metadata: ctx.metadata }));
    echo.handle('Echo.Plain', () => ({ msg: 'Hello' }));
    echo.handle('Echo.Fail', () => {
      throw new MeshError('go.mesh.api.echo', 409, 'echo conflict');
    });
    echo.handle('Echo.Mixed', () => ({ statusCode: 200, msg: 'both' }));
    echo.stream(
      'Echo.Count',
      async function* (req: { to: number | string }) {
        for (let i = 1; i <= Number(req.to); i++) yield { n: i };
      },
      { kind: 'server' },
    );
    echo.stream(
      'Echo.FailLater',
      async function* () {
        yield { n: 1 };
        throw new MeshError('go.mesh.api.echo', 409, 'echo conflict');
      },
      { kind: 'server' },
    );
    echo.stream(
      'Echo.Forever',
      async function* (_req: unknown, ctx: StreamContext) {
        ctx.signal.addEventListener('abort', () => cancelled.push((ctx.signal.reason as MeshError).detail));
        for (let i = 0; ; i++) {
          yield { n: i };
          await new Promise((r) => setTimeout(r, 5)); // paces an endless stream (fixture), not ordering
        }
      },
      { kind: 'server' },
    );
    await echo.start();
    backend.onShutdown(() => echo.stop());
    const pair = makePair(dir.path, 'gateway');
    const tls = ['--enable_tls', `--tls_cert_file=${pair.certFile}`, `--tls_key_file=${pair.keyFile}`];
    const start = (flags: string[]) => startEdgeGateway(['--enable_http2', '--client_retries=0', ...flags], {}, registry);
    const [a1, a2, r1, r2, e1, e2] = await Promise.all([
      start(['--handler=api', ...tracing]),
      start(['--handler=api', ...tracing, ...tls]),
      start(['--handler=rpc']),
      start(['--handler=rpc', ...tls]),
      start(['--handler=event']),
      start(['--handler=event', ...tls]),
    ]);
    gateways.push(a1!, a2!, r1!, r2!, e1!, e2!);
    api = { plain: a1!, tls: a2! };
    rpc = { plain: r1!, tls: r2! };
    event = { plain: e1!, tls: e2! };
  });
  after(async () => {
    await Promise.all(gateways.map((g) => g.close()));
    await backend?.shutdown();
    await receiver?.stop();
    dir.cleanup();
  });

  for (const listener of ['plain', 'tls'] as const) {
    const over = listener === 'plain' ? 'HTTP/1.1 and h2c (prior knowledge)' : 'HTTPS/1.1 and h2 chosen by ALPN';
    it(`the api handler and SSE streams: the same answers over ${over}`, async () => {
      const g = api[listener];
      const s = await session(g.url);
      try {
        assert.equal(s.alpnProtocol, listener === 'plain' ? 'h2c' : 'h2');
        const statuses: number[] = [];
        for (const c of API_CASES) {
          const one = await overHttp1(g.url, c);
          const two = await overHttp2(s, c);
          assert.deepEqual(view(c, two), view(c, one), c.name);
          statuses.push(one.status);
        }
        assert.deepEqual(statuses, [201, 200, 200, 409, 502, 404, 404, 200, 200, 200, 406, 415]);
      } finally {
        s.close();
      }
      // What came back is what the service said (not two answers wrong the same way).
      const s2 = await session(g.url);
      try {
        const call = await overHttp2(s2, API_CASES[0]!);
        assert.equal(call.status, 201);
        assert.deepEqual(call.headers['set-cookie'], ['a=1', 'b=2']);
        const seen = JSON.parse(call.body.toString()) as { request: { method: string; url: string; body: string; get: unknown; header: Record<string, unknown> } };
        assert.equal(seen.request.url, '/echo/call?a=1&b=x&b=y');
        assert.equal(seen.request.body, '{"n":1}');
        assert.deepEqual(seen.request.get, { a: { key: 'a', values: ['1'] }, b: { key: 'b', values: ['x', 'y'] } });
        assert.deepEqual(seen.request.header['X-Request-Id'], { key: 'X-Request-Id', values: ['r-1'] });
        const events = await overHttp2(s2, API_CASES.find((c) => c.name.startsWith('sse: POST'))!);
        assert.equal(events.body.toString(), 'data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\n');
        assert.equal(events.headers['content-type'], 'text/event-stream');
      } finally {
        s2.close();
      }
      assert.ok(g.counter('http.gateway.downstream_cx_http2_total') >= 2);
    });

    it(`the rpc handler: the same answers over ${over}`, async () => {
      const g = rpc[listener];
      const s = await session(g.url);
      try {
        const statuses: number[] = [];
        for (const c of RPC_CASES) {
          const one = await overHttp1(g.url, c);
          const two = await overHttp2(s, c);
          assert.deepEqual(view(c, two), view(c, one), c.name);
          statuses.push(one.status);
        }
        assert.deepEqual(statuses, [200, 200, 409, 415, 400, 200]);
        const get = await overHttp2(s, RPC_CASES[1]!);
        assert.equal(get.status, 200);
        // The service's answer as it gave it, the query its request.
        assert.deepEqual((JSON.parse(get.body.toString()) as { request: unknown }).request, { a: '1', b: ['x', 'y'] });
      } finally {
        s.close();
      }
    });
  }

  it('an SSE stream comes event by event over HTTP/2 as over HTTP/1.1; the client going away cancels the handler either way', async () => {
    const g = api.plain;
    /** Reads an endless stream until its second event, then goes away; what it read. */
    const overHttp1Endless = () =>
      new Promise<{ status: number; type: string; text: string }>((resolve, reject) => {
        const req = httpRequest(`${g.url}/echo/forever`, { method: 'GET', headers: SSE, agent: false }, (res) => {
          let text = '';
          res.on('data', (d: Buffer) => {
            text += d.toString();
            if (text.split('\n\n').length > 2) {
              req.destroy();
              resolve({ status: res.statusCode!, type: String(res.headers['content-type']), text: text.split('\n\n').slice(0, 2).join('\n\n') });
            }
          });
        });
        req.on('error', (err) => (err.message === 'socket hang up' ? undefined : reject(err)));
        req.end();
      });
    const overHttp2Endless = (s: ClientHttp2Session) =>
      new Promise<{ status: number; type: string; text: string }>((resolve) => {
        const req = s.request({ ':method': 'GET', ':path': '/echo/forever', ...SSE });
        let head: Record<string, unknown> = {};
        let text = '';
        req.on('response', (h) => (head = h));
        req.on('data', (d: Buffer) => {
          text += d.toString();
          if (text.split('\n\n').length > 2) {
            req.close(); // RST_STREAM CANCEL
            resolve({ status: Number(head[':status']), type: String(head['content-type']), text: text.split('\n\n').slice(0, 2).join('\n\n') });
          }
        });
        req.on('error', () => undefined);
        req.end();
      });
    const one = await overHttp1Endless();
    await waitFor(() => cancelled.length === 1, 10_000);
    const s = await session(g.url);
    try {
      const two = await overHttp2Endless(s);
      await waitFor(() => cancelled.length === 2, 10_000);
      assert.deepEqual(two, one);
      assert.deepEqual(one, { status: 200, type: 'text/event-stream', text: 'data: {"n":0}\n\ndata: {"n":1}' });
      assert.equal(cancelled[1], cancelled[0]);
      // The session goes on.
      assert.equal((await overHttp2(s, { name: 'health', method: 'GET', path: '/_mesh/health' })).status, 200);
    } finally {
      s.close();
    }
    assert.equal(g.runtime.stats.gauge('http.gateway.downstream_rq_active').value, 0);
  });

  it('tracing: a traceparent over HTTP/1.1 and HTTP/2 is continued the same way (the backend\'s trace id, the spans)', async () => {
    const g = api.plain;
    const c: Case = { name: 'traced', method: 'POST', path: '/echo/call', headers: { ...JSON_TYPE, traceparent: TRACEPARENT }, body: '{"n":2}', compare: withHeaders('x-trace-id') };
    const one = await overHttp1(g.url, c);
    const s = await session(g.url);
    let two: Answer;
    try {
      two = await overHttp2(s, c);
    } finally {
      s.close();
    }
    assert.deepEqual(view(c, two), view(c, one));
    // The service's handler ran in the caller's trace; the traceparent it was given is the gateway's hop.
    assert.equal(one.headers['x-trace-id'], TRACE);
    const forwarded = (a: Answer) => (JSON.parse(a.body.toString()) as { request: { header: Record<string, { values: string[] }> } }).request.header['Traceparent']?.values[0];
    assert.equal(forwarded(one), TRACEPARENT, 'the API Request carries the header as the client sent it');
    for (const a of [one, two]) assert.match(a.body.toString(), new RegExp(`"traceparent":"00-${TRACE}-[0-9a-f]{16}-01"`), 'the call carries the caller\'s trace');
    // Two server spans under the caller's, one per protocol, each with the same spans below it.
    const spans = await waitFor(async () => {
      const all = ((await http('GET', `${receiverBase}/spans`)).json() as ReceivedSpan[]).filter((sp) => sp.traceId === TRACE);
      const roots = all.filter((sp) => sp.parentSpanId === CALLER);
      return roots.length === 2 && all.length === 2 * spanTree(all, roots[0]!).length && all.length >= 6 ? all : undefined;
    }, 20_000);
    const roots = spans.filter((sp) => sp.parentSpanId === CALLER);
    const byVersion = new Map(roots.map((r) => [r.attributes['network.protocol.version'], r]));
    assert.deepEqual([...byVersion.keys()].sort(), ['1.1', '2']);
    const h1 = spanTree(spans, byVersion.get('1.1')!);
    assert.deepEqual(spanTree(spans, byVersion.get('2')!), h1);
    // Gateway server span, its client span, the service's server span.
    assert.deepEqual(
      h1.map((sp) => [sp.depth, sp.name, sp.kind, sp.status.code]),
      [
        [0, 'POST /echo/call', 2, 0],
        [1, 'go.mesh.api.echo/Echo.Call', 3, 0],
        [2, 'go.mesh.api.echo/Echo.Call', 2, 0],
      ],
    );
    assert.equal(h1[0]!.attributes['http.response.status_code'], 201);
  });

  for (const listener of ['plain', 'tls'] as const) {
    const over = listener === 'plain' ? 'HTTP/1.1 and h2c (prior knowledge)' : 'HTTPS/1.1 and h2 chosen by ALPN';
    it(`the event handler: the same answer and the same message to a subscriber over ${over}`, async () => {
      const g = event[listener];
      const got: Message[] = [];
      const sub = await g.runtime.broker.subscribe('go.mesh.api.orders', (m) => {
        got.push(m);
      });
      const s = await session(g.url);
      try {
        // Plain Event JSON: its id and timestamp are the gateway's, new for each request.
        const plainEvent: Case = { name: 'an event', method: 'POST', path: '/orders/created?x=1', headers: { ...JSON_TYPE, 'x-shop': 'one' }, body: '{"order":7}' };
        const answers = [await overHttp1(g.url, plainEvent), await overHttp2(s, plainEvent)];
        await waitFor(() => got.length === 2, 10_000);
        const ids = answers.map((a) => (JSON.parse(a.body.toString()) as { id: string }).id);
        const sameBut = (text: string, id: string) => text.replace(id, '<id>');
        assert.deepEqual(
          answers.map((a, i) => ({ status: a.status, type: a.headers['content-type'], body: sameBut(a.body.toString(), ids[i]!) })),
          Array(2).fill({ status: 200, type: 'application/json', body: '{"id":"<id>","topic":"go.mesh.api.orders","name":"created"}' }),
        );
        const published = got.map((m, i) => {
          const e = JSON.parse(Buffer.from(m.body).toString()) as { id: string; timestamp: number };
          assert.equal(e.id, ids[i]);
          assert.ok(Math.abs(e.timestamp - Date.now() / 1000) < 60);
          const header = Object.fromEntries(Object.entries(m.header).map(([k, v]) => [k, k === 'traceparent' ? v.replace(/-[0-9a-f]{32}-[0-9a-f]{16}-/, '-<trace>-<span>-') : v === ids[i] ? '<id>' : v]));
          return { event: { ...e, id: '<id>', timestamp: 0 }, header };
        });
        assert.deepEqual(published[1], published[0]);
        assert.equal((published[0]!.event as unknown as { data: string }).data, '{"order":7}');
        assert.deepEqual((published[0]!.event as unknown as { header: Record<string, unknown> }).header['X-Shop'], { key: 'X-Shop', values: ['one'] });

        // A binary CloudEvent: its id is the client's, so the answer and the message are the same bytes.
        got.length = 0;
        const cloud: Case = { name: 'a CloudEvent', method: 'POST', path: '/orders/paid', headers: { 'ce-specversion': '1.0', 'ce-id': 'ce-9', 'ce-source': '/shop', 'ce-type': 'com.example.order.paid', 'content-type': 'text/plain' }, body: 'paid!' };
        const c1 = await overHttp1(g.url, cloud);
        const c2 = await overHttp2(s, cloud);
        assert.deepEqual(view(cloud, c2), view(cloud, c1));
        assert.equal(c1.body.toString(), '{"id":"ce-9","topic":"go.mesh.api.orders","name":"paid"}');
        await waitFor(() => got.length === 2, 10_000);
        const message = (m: Message) => ({ body: Buffer.from(m.body).toString(), header: { ...m.header, traceparent: m.header['traceparent']?.replace(/-[0-9a-f]{32}-[0-9a-f]{16}-/, '-<trace>-<span>-') } });
        assert.deepEqual(message(got[1]!), message(got[0]!));
        assert.equal(message(got[0]!).body, 'paid!');
        // A refused CloudEvent: the same 400 error JSON.
        const bad: Case = { ...cloud, name: 'a CloudEvent without ce-type', headers: { ...cloud.headers, 'ce-type': '' } };
        const b1 = await overHttp1(g.url, bad);
        assert.equal(b1.status, 400);
        assert.deepEqual(view(bad, await overHttp2(s, bad)), view(bad, b1));
      } finally {
        s.close();
        await sub.unsubscribe();
      }
    });
  }
});
