/**
 * A proxy route's `retry` in process (src/edge/handlers/proxy.ts, handleProxy with a route's
 * policy, against a backend on loopback): a try whose connection the backend closes before
 * answering is retried, and so is a try that runs out of `timeouts.backendRequest`; every try
 * ends by `timeouts.request`; a route's spent retries on closed connections answer 503; without
 * a route's `retry` a closed connection is not retried (502); a streamed body is sent once only.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { Pool } from 'undici';
import { handleProxy } from '../../src/edge/handlers/proxy.js';
import type { EdgeHandlerContext } from '../../src/edge/handlers/front-end.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { RuleEffects, type RoutePolicy } from '../../src/edge/routes/effects.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { sendError } from '../../src/base/http/respond.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

/** The backend's behaviour for the tries of one request: `close` (connection destroyed unanswered), `slow` (answers after 600 ms), `ok`. */
type Try = 'close' | 'slow' | 'ok';

describe('proxy route retries: closed connections and try timeouts', () => {
  let backend: Server;
  let front: Server;
  let pool: Pool;
  let frontPort = 0;
  /** By request id: the tries seen, and the plan for them. */
  const seen = new Map<string, number>();
  const plans = new Map<string, Try[]>();
  const bodies: string[] = [];
  let policy: RoutePolicy | undefined;

  const fe = {
    edge: {
      clusters: {
        acquireNow: () => ({ target: { key: `127.0.0.1:${(backend.address() as AddressInfo).port}`, dispatcher: pool }, release: () => {} }),
        acquire: async () => assert.fail('acquireNow answers'),
      },
      settings: { clientRetries: 1, clientRequestTimeoutMs: 5000, streamIdleTimeoutMs: 0 },
      context: { current: undefined, hop: () => ({ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', flags: 1 }) },
      tracer: undefined,
    },
    namespace: 'go.mesh.api',
    errorId: 'go.mesh.api',
    maxBodyBytes: 1 << 20,
  } as unknown as EdgeHandlerContext;

  function policyOf(rule: string): RoutePolicy {
    const file = parseRouteFile(`${HEAD}metadata: {name: r}\nspec:\n  handler: proxy\n  rules:\n    - backendRefs: [{name: go.mesh.srv.b}]\n${rule}`, 'routes.yaml');
    const spec = file.routes[0]!.rules[0]!;
    const effects = new RuleEffects(spec, new StatsStore().scope('vhost.*.route.r.'), Math.random);
    return { requestTimeoutMs: spec.requestTimeoutMs, tryTimeoutMs: spec.backendRequestTimeoutMs, effects };
  }

  before(async () => {
    backend = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const id = String(req.headers['x-id']);
        const n = (seen.get(id) ?? 0) + 1;
        seen.set(id, n);
        bodies.push(Buffer.concat(chunks).toString());
        const plan = plans.get(id)?.[n - 1] ?? 'ok';
        if (plan === 'close') return void req.socket.destroy();
        const answer = () => {
          if (!res.destroyed) res.end(`try ${n}`);
        };
        if (plan === 'slow') setTimeout(answer, 600);
        else answer();
      });
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
    pool = new Pool(`http://127.0.0.1:${(backend.address() as AddressInfo).port}`);
    front = createServer((req, res) => {
      handleProxy(fe, 'go.mesh.srv.b', false, req, res, undefined, policy).catch((err) => sendError(res, err));
    });
    front.listen(0, '127.0.0.1');
    await once(front, 'listening');
    frontPort = (front.address() as AddressInfo).port;
  });

  after(async () => {
    front.close();
    backend.closeAllConnections();
    backend.close();
    await pool.close();
  });

  let ids = 0;
  /** One request through the front; the answer's status and body, and how many tries the backend saw. */
  async function send(plan: Try[], opts: { method?: string; body?: string; chunked?: boolean } = {}): Promise<{ status: number; body: string; tries: number; ms: number }> {
    const id = `r${++ids}`;
    plans.set(id, plan);
    const started = Date.now();
    const headers: Record<string, string> = { 'x-id': id };
    if (opts.body !== undefined) headers[opts.chunked ? 'transfer-encoding' : 'content-length'] = opts.chunked ? 'chunked' : String(Buffer.byteLength(opts.body));
    const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: frontPort, method: opts.method ?? 'GET', path: '/x', headers, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      });
      req.on('error', reject);
      if (opts.body !== undefined) req.write(opts.body);
      req.end();
    });
    return { status, body, tries: seen.get(id) ?? 0, ms: Date.now() - started };
  }

  it("a route's retry: a connection closed before the answer is retried; spent retries answer 503", async () => {
    policy = policyOf('      retry: {attempts: 3}\n');
    assert.deepEqual(await send(['close', 'close']).then(({ status, body, tries }) => ({ status, body, tries })), { status: 200, body: 'try 3', tries: 3 });
    const spent = await send(['close', 'close', 'close', 'close']);
    assert.equal(spent.status, 503);
    assert.equal(spent.tries, 4);
    assert.match(spent.body, /^\{"id":"go\.mesh\.api","code":503,"detail":"proxy to go\.mesh\.srv\.b on 127\.0\.0\.1:\d+: .* \(the last of 4 tries\)","status":"Service Unavailable"\}$/);
    // A small body (held in memory) is sent again as it was, whatever the method.
    const post = await send(['close'], { method: 'POST', body: 'order 1' });
    assert.deepEqual([post.status, post.body, post.tries], [200, 'try 2', 2]);
    assert.deepEqual(bodies.slice(-2), ['order 1', 'order 1']);
  });

  it('without a route\'s retry a closed connection is not retried (502); a streamed body is sent once only', async () => {
    policy = policyOf('');
    const plain = await send(['close']);
    assert.deepEqual([plain.status, plain.tries], [502, 1]);
    policy = policyOf('      retry: {attempts: 3}\n');
    const streamed = await send(['close'], { method: 'POST', body: 'chunked upload', chunked: true });
    assert.deepEqual([streamed.status, streamed.tries], [502, 1]);
  });

  it('a try that runs out of timeouts.backendRequest is retried; spent retries answer 504', async () => {
    policy = policyOf('      retry: {attempts: 2}\n      timeouts: {backendRequest: 100ms}\n');
    const ok = await send(['slow', 'slow']);
    assert.deepEqual([ok.status, ok.body, ok.tries], [200, 'try 3', 3]);
    const spent = await send(['slow', 'slow', 'slow']);
    assert.equal(spent.status, 504);
    assert.equal(spent.tries, 3);
    assert.match(spent.body, /timeout after 100ms/);
    // Without a route's retry, a try timeout is the answer.
    policy = policyOf('      timeouts: {backendRequest: 100ms}\n');
    const once = await send(['slow', 'ok']);
    assert.deepEqual([once.status, once.tries], [504, 1]);
  });

  it('timeouts.request bounds every try together: the try it cuts is not retried (504 naming it)', async () => {
    policy = policyOf('      retry: {attempts: 5}\n      timeouts: {backendRequest: 200ms, request: 300ms}\n');
    const cut = await send(['slow', 'slow', 'slow', 'slow', 'slow']);
    assert.equal(cut.status, 504);
    assert.equal(cut.tries, 2, 'the first try runs out of its 200 ms; the second is cut at 300 ms');
    assert.match(cut.body, /timeout after 300ms/);
    assert.ok(cut.ms < 550, `answered after ${cut.ms} ms: the backend's slow answers (600 ms) were not waited for`);
  });
});
