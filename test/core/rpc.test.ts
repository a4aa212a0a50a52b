/**
 * The RPC wire protocol end to end: a framework client calling (a) a bare node:http backend that
 * knows nothing of mesh but the headers and the body, and (b) a framework service.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { once } from 'node:events';
import { request } from 'undici';
import { Runtime } from '../../src/process/runtime.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { Service } from '../../src/framework/server/service.js';
import { MeshError } from '../../src/base/errors.js';
import { freePort } from '../helpers.js';

function runtimeWith(...flags: string[]): Runtime {
  return new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', ...flags], {}).config), { role: 'test' });
}

interface Seen {
  headers: IncomingMessage['headers'];
  body: string;
}

async function bareBackend(handler: (seen: Seen, res: import('node:http').ServerResponse) => void): Promise<{ server: Server; port: number; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const s = { headers: req.headers, body };
      seen.push(s);
      handler(s, res);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as { port: number }).port, seen };
}

const node = (id: string, port: number) => ({ id, address: '127.0.0.1', port, metadata: {} });

describe('RPC to a bare node:http backend', () => {
  const runtime = runtimeWith('--client_request_timeout=800ms');
  let echo: Awaited<ReturnType<typeof bareBackend>>;

  before(async () => {
    echo = await bareBackend((s, res) => {
      if (s.headers['mesh-endpoint'] === 'Fail.Json') {
        res.writeHead(403, { 'content-type': 'application/json' });
        res.end('{"id":"plain.app","code":403,"detail":"no entry","status":"Forbidden"}');
        return;
      }
      if (s.headers['mesh-endpoint'] === 'Fail.Text') {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('boom');
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(s.body);
    });
    await runtime.registry.register({ name: 'plain.echo', version: '', metadata: {}, endpoints: [], nodes: [node('echo-1', echo.port)] });
  });
  after(async () => {
    await runtime.shutdown();
    echo.server.close();
  });

  it('sends POST / with the Mesh headers and the body, and returns the answer', async () => {
    const body = '{"big":12345678901234567890123,"name":"John"}';
    const res = await runtime.client.call('plain.echo', 'Echo.Call', Buffer.from(body), { metadata: { 'x-trace': 'abc' } });
    assert.equal(res.status, 200);
    assert.equal(res.body.toString(), body, 'bytes pass through untouched (no rounding of big numbers)');
    const h = echo.seen.at(-1)!.headers;
    assert.equal(h['mesh-service'], 'plain.echo');
    assert.equal(h['mesh-endpoint'], 'Echo.Call');
    assert.match(String(h['mesh-id']), /^[0-9a-f-]{36}-\d+$/, 'a unique request id: per-client prefix and counter');
    assert.ok(Number(h['mesh-timeout']) > 0 && Number(h['mesh-timeout']) <= 800);
    assert.equal(h['content-type'], 'application/json');
    assert.equal(h['x-trace'], 'abc');
  });

  it('an inbound Mesh-Timeout shortens the budget', async () => {
    await runtime.client.call('plain.echo', 'Echo.Call', Buffer.from('{}'), { timeoutMs: 100 });
    assert.ok(Number(echo.seen.at(-1)!.headers['mesh-timeout']) <= 100);
  });

  it('an error body in the error form is used as it is', async () => {
    await assert.rejects(runtime.client.call('plain.echo', 'Fail.Json', Buffer.from('{}')), (err: MeshError) => {
      assert.equal(err.toBody(), '{"id":"plain.app","code":403,"detail":"no entry","status":"Forbidden"}');
      return true;
    });
  });

  it('any other error body becomes a go.mesh.client error', async () => {
    await assert.rejects(runtime.client.call('plain.echo', 'Fail.Text', Buffer.from('{}')), (err: MeshError) => {
      assert.equal(err.toBody(), '{"id":"go.mesh.client","code":500,"detail":"boom","status":"Internal Server Error"}');
      return true;
    });
  });

  it('unknown service is a 404', async () => {
    await assert.rejects(runtime.client.call('no.such.service', 'A.B', Buffer.from('{}')), (err: MeshError) => {
      assert.equal(err.code, 404);
      assert.equal(err.detail, 'service no.such.service: not found');
      return true;
    });
  });
});

describe('timeouts and retries', () => {
  const runtime = runtimeWith('--client_request_timeout=300ms', '--client_retries=1');
  let hang: Awaited<ReturnType<typeof bareBackend>>;
  let ok: Awaited<ReturnType<typeof bareBackend>>;
  let deadPort: number;

  before(async () => {
    hang = await bareBackend(() => {
      /* never answers */
    });
    ok = await bareBackend((_s, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
    deadPort = await freePort();
    await runtime.registry.register({ name: 'hangs', version: '', metadata: {}, endpoints: [], nodes: [node('h', hang.port)] });
    await runtime.registry.register({ name: 'half.dead', version: '', metadata: {}, endpoints: [], nodes: [node('dead', deadPort), node('alive', ok.port)] });
  });
  after(async () => {
    await runtime.shutdown();
    hang.server.closeAllConnections();
    hang.server.close();
    ok.server.close();
  });

  it('a node that hangs ends with 504 when the timeout runs out', async () => {
    await assert.rejects(runtime.client.call('hangs', 'A.B', Buffer.from('{}')), (err: MeshError) => {
      assert.equal(err.code, 504);
      assert.equal(err.id, 'go.mesh.client');
      assert.match(err.detail, /timeout after 300ms/);
      return true;
    });
  });

  it('a refused connection is retried on another node and succeeds', async () => {
    for (let i = 0; i < 6; i++) {
      const res = await runtime.client.call('half.dead', 'A.B', Buffer.from('{}'));
      assert.equal(res.body.toString(), '{"ok":true}');
    }
  });

  it('with no retries a refused connection is a 502', async () => {
    const solo = runtimeWith('--client_retries=0');
    await solo.registry.register({ name: 'dead', version: '', metadata: {}, endpoints: [], nodes: [node('d', deadPort)] });
    await assert.rejects(solo.client.call('dead', 'A.B', Buffer.from('{}')), (err: MeshError) => err.code === 502);
    await solo.shutdown();
  });
});

describe('framework service', () => {
  const runtime = runtimeWith('--max_body_size=1KiB');
  let port = 0;

  before(async () => {
    const svc = new Service(runtime, { name: 'go.mesh.srv.math' })
      .handle({
        name: 'Math.Add',
        handler: (req: { a: number; b: number }) => {
          if (typeof req.a !== 'number' || typeof req.b !== 'number') throw new MeshError('go.mesh.srv.math', 400, 'a and b must be numbers');
          return { sum: req.a + req.b };
        },
      })
      .handle({ name: 'Math.Echo', handler: (req: unknown, ctx) => ({ req, ctx }) })
      .handle({ name: 'Math.Big', handler: () => ({ n: 2n ** 64n + 1n, text: 'é😀' }) })
      .handle({
        name: 'Math.Loop',
        handler: () => {
          const loop: Record<string, unknown> = {};
          loop.self = loop;
          return loop;
        },
      })
      .handle({ name: 'Math.Nothing', handler: () => undefined })
      .handle({
        name: 'Math.Later',
        handler: async (req: { a: number }) => {
          await new Promise<void>((r) => setImmediate(r));
          return { later: req.a };
        },
      })
      .handle({
        name: 'Math.Refuse',
        handler: async () => {
          await new Promise<void>((r) => setImmediate(r));
          throw new MeshError('go.mesh.srv.math', 409, 'refused later');
        },
      })
      .handle({ name: 'Math.Thenable', handler: () => ({ then: (ok: (v: unknown) => void) => ok({ thenable: true }) }) })
      .handle({ name: 'Math.ThenableFails', handler: () => ({ then: (_ok: unknown, fail: (e: unknown) => void) => fail(new MeshError('go.mesh.srv.math', 422, 'thenable refused')) }) });
    const record = await svc.start();
    port = record.nodes[0]!.port;
    assert.equal(record.nodes[0]!.metadata.protocol, 'mesh');
  });
  after(() => runtime.shutdown());

  const post = (endpoint: string, body: string, contentType = 'application/json') =>
    request(`http://127.0.0.1:${port}/`, {
      method: 'POST',
      headers: { 'content-type': contentType, 'mesh-service': 'go.mesh.srv.math', 'mesh-endpoint': endpoint },
      body,
    }).then(async (r) => ({ status: r.statusCode, type: r.headers['content-type'], text: await r.body.text() }));

  it('answers through the client', async () => {
    assert.deepEqual(await runtime.client.callValue('go.mesh.srv.math', 'Math.Add', { a: 2, b: 3 }), { sum: 5 });
  });

  it('JSON answers: exact bytes and Content-Length, big integers and non-ASCII text included', async () => {
    const big = await request(`http://127.0.0.1:${port}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.math', 'mesh-endpoint': 'Math.Big' },
      body: '{}',
    });
    const bytes = Buffer.from(await big.body.arrayBuffer());
    assert.equal(big.statusCode, 200);
    assert.equal(big.headers['content-type'], 'application/json');
    assert.equal(bytes.toString('utf8'), '{"n":18446744073709551617,"text":"é😀"}');
    assert.equal(big.headers['content-length'], String(bytes.byteLength));
    const r = await post('Math.Echo', '{"id":12345678901234567890123,"s":"ü"}');
    assert.equal(r.status, 200);
    assert.match(r.text, /^\{"req":\{"id":12345678901234567890123,"s":"ü"\},"ctx":\{/);
    const nothing = await post('Math.Nothing', '{}');
    assert.deepEqual([nothing.status, nothing.text], [200, '{}']);
  });

  it('the handler context: id, service, endpoint, end-to-end metadata, deadline, trace', async () => {
    const before = Date.now();
    const r = await request(`http://127.0.0.1:${port}/`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'mesh-service': 'go.mesh.srv.math',
        'mesh-endpoint': 'Math.Echo',
        'mesh-id': 'req-1',
        'mesh-timeout': '5000',
        'x-trace': 'abc',
      },
      body: '{"a":1}',
    });
    const { req, ctx } = (await r.body.json()) as { req: unknown; ctx: Record<string, unknown> };
    assert.deepEqual(req, { a: 1 });
    assert.deepEqual(Object.keys(ctx), ['id', 'service', 'endpoint', 'metadata', 'deadline', 'traceId', 'spanId']);
    // No traceparent came: a new trace.
    assert.match(ctx.traceId as string, /^[0-9a-f]{32}$/);
    assert.match(ctx.spanId as string, /^[0-9a-f]{16}$/);
    assert.equal(ctx.id, 'req-1');
    assert.equal(ctx.service, 'go.mesh.srv.math');
    assert.equal(ctx.endpoint, 'Math.Echo');
    assert.equal((ctx.metadata as Record<string, string>)['x-trace'], 'abc');
    assert.equal((ctx.metadata as Record<string, string>)['mesh-endpoint'], undefined);
    assert.ok((ctx.deadline as number) >= before + 5000 && (ctx.deadline as number) <= Date.now() + 5000);
  });

  it('an answer that cannot be encoded is a 500', async () => {
    const r = await post('Math.Loop', '{}');
    assert.equal(r.status, 500);
    assert.match(JSON.parse(r.text).detail, /^encoding response: Converting circular structure to JSON/);
  });

  it('async handlers, thenables and their rejections: the answer or the error JSON, with its code', async () => {
    assert.deepEqual(await post('Math.Later', '{"a":7}'), { status: 200, type: 'application/json', text: '{"later":7}' });
    assert.deepEqual(await post('Math.Thenable', '{}'), { status: 200, type: 'application/json', text: '{"thenable":true}' });
    assert.deepEqual(await post('Math.Refuse', '{}'), {
      status: 409,
      type: 'application/json',
      text: '{"id":"go.mesh.srv.math","code":409,"detail":"refused later","status":"Conflict"}',
    });
    assert.deepEqual(await post('Math.ThenableFails', '{}'), {
      status: 422,
      type: 'application/json',
      text: '{"id":"go.mesh.srv.math","code":422,"detail":"thenable refused","status":"Unprocessable Entity"}',
    });
  });

  it('handler errors keep their code', async () => {
    const r = await post('Math.Add', '{"a":"x"}');
    assert.equal(r.status, 400);
    assert.equal(r.text, '{"id":"go.mesh.srv.math","code":400,"detail":"a and b must be numbers","status":"Bad Request"}');
  });

  it('malformed JSON is a 400', async () => {
    const r = await post('Math.Add', '{"a":');
    assert.equal(r.status, 400);
    assert.equal(r.type, 'application/json');
    assert.match(r.text, /"detail":"malformed JSON/);
  });

  it('unknown endpoint is a 404', async () => {
    const r = await post('Math.Sub', '{}');
    assert.equal(r.text, '{"id":"go.mesh.srv.math","code":404,"detail":"endpoint Math.Sub not found on go.mesh.srv.math","status":"Not Found"}');
  });

  it('unsupported content type is a 415', async () => {
    const r = await post('Math.Add', 'a=1', 'application/x-www-form-urlencoded');
    assert.equal(r.status, 415);
  });

  it('a body over --max_body_size is a 413', async () => {
    const r = await post('Math.Add', JSON.stringify({ a: 1, b: 2, pad: 'x'.repeat(2000) }));
    assert.equal(r.status, 413);
  });

  it('missing Mesh-Endpoint is a 400, GET / a 405, GET /health 200', async () => {
    const r = await request(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{}' });
    assert.equal(r.statusCode, 400);
    await r.body.dump();
    const g = await request(`http://127.0.0.1:${port}/`);
    assert.equal(g.statusCode, 405);
    await g.body.dump();
    const h = await request(`http://127.0.0.1:${port}/health`);
    assert.equal(h.statusCode, 200);
    assert.equal(await h.body.text(), '{"status":"ok"}');
  });

  it('draining withdraws the registration and fails /health; ok restores both', async () => {
    await runtime.state.fail();
    assert.deepEqual(await runtime.registry.getService('go.mesh.srv.math'), []);
    const h = await request(`http://127.0.0.1:${port}/health`);
    assert.equal(h.statusCode, 503);
    await h.body.dump();
    await runtime.state.ok();
    assert.equal((await runtime.registry.getService('go.mesh.srv.math')).length, 1);
  });
});
