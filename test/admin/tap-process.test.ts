/**
 * admin /tap of a real `mesh api` (proxy handler, a route file) in front of a plain backend:
 * events for the matching requests only (each filter), redaction of secrets whatever the
 * spelling, exact 400/401/503 bodies, the concurrent-tap cap, the rate cap's drops (counted, not
 * queued: a reader that never reads grows nothing), and a closed client frees its slot.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { tempDir, waitFor } from '../helpers.js';
import { helloRoutes, openTap, statValue } from '../fixtures/tap-client.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const ROUTES = helloRoutes(`    - name: other
      matches: [{path: {type: PathPrefix, value: /other}}]
      backendRefs: [{name: go.mesh.api.plain}]
    - name: flaky
      matches: [{path: {type: PathPrefix, value: /flaky}}]
      backendRefs: [{name: go.mesh.api.flaky}]
`);
/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}


describe('admin /tap on a real mesh api', () => {
  const dir = tempDir();
  let registry: Registry;
  let plain: PlainApp;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    // Two nodes, one refusing connections: a try on it is retried on the other (a retry the tap shows).
    const flaky = await registerPlain(registry, 'go.mesh.api.flaky', plain.port);
    await registry.register({ ...flaky, nodes: [...flaky.nodes, { id: 'flaky-down', address: '127.0.0.1', port: await closedPort(), metadata: {} }] });
    const routes = join(dir.path, 'routes.yaml');
    writeFileSync(routes, ROUTES);
    gw = await startGatewayProcess(dir.path, [`--routes=${routes}`, '--tap_redact_headers=X-Api-Key', '--headers_with_underscores=allow']);
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('streams NDJSON events of finished requests with the route, cluster, host, status, bytes and trace id', async () => {
    const tap = await openTap(gw.admin);
    try {
      assert.equal(tap.res.statusCode, 200);
      assert.equal(tap.res.headers['content-type'], 'application/x-ndjson');
      const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
      const answer = await http('POST', `${gw.url}/hello/world?x=1`, { body: 'abc', headers: { 'content-type': 'text/plain', traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
      assert.equal(answer.status, 200);
      const [e] = await waitFor(() => (tap.lines().length >= 1 ? tap.lines() : undefined));
      assert.equal(e!.front, 'gateway');
      assert.equal(e!.method, 'POST');
      assert.equal(e!.path, '/hello/world');
      assert.equal(e!.query, 'x=1');
      assert.equal(e!.status, 200);
      assert.equal(e!.route, 'hello');
      assert.equal(e!.cluster, 'go.mesh.api.plain');
      assert.equal(e!.host, `127.0.0.1:${plain.port}`);
      assert.equal(e!.retries, 0);
      assert.equal(e!.response_flags, '-');
      assert.equal(e!.identity, null);
      assert.equal(e!.trace_id, traceId);
      assert.equal(e!.bytes_in, 3);
      assert.equal(e!.bytes_out, answer.bytes.length);
      assert.equal(e!.authority, new URL(gw.url).host);
      assert.equal(e!.request_headers['content-type'], 'text/plain');
      assert.equal(e!.response_headers['content-type'], 'application/json');
      assert.ok(typeof e!.duration_ms === 'number' && e!.duration_ms >= 0);
      assert.ok(e!.phases.upstream_ms !== null && e!.phases.first_byte_ms !== null);
      assert.ok(!Number.isNaN(Date.parse(e!.time)));
    } finally {
      tap.close();
    }
    await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 0);
  });

  it('a path_prefix takes the other spellings of its paths (percent-encoded, dot segments): events show the normal form', async () => {
    const tap = await openTap(gw.admin, '?path_prefix=/hello/enc');
    try {
      const spellings = ['/hel%6Co/enc/1', '/hello/./enc/2', '/hello/x/../enc/3', '/%68ello/%65nc/4', '/other/enc/5'];
      for (const p of spellings) assert.equal((await http('GET', `${gw.url}${p}`)).status, 200, p);
      const events = await waitFor(() => (tap.events().length >= 4 ? tap.events() : undefined));
      assert.deepEqual(events.map((e) => e.path), ['/hello/enc/1', '/hello/enc/2', '/hello/enc/3', '/hello/enc/4']);
      for (const e of events) assert.equal(e.route, 'hello');
    } finally {
      tap.close();
    }
  });

  it('shows the retry of a try that could not connect, and the host that answered', async () => {
    const tap = await openTap(gw.admin, '?route=flaky');
    try {
      // Round robin over two nodes: one of the two requests tries the closed one first.
      for (let i = 0; i < 2; i++) assert.equal((await http('GET', `${gw.url}/flaky/${i}`)).status, 200);
      const events = await waitFor(() => (tap.lines().length >= 2 ? tap.lines() : undefined));
      assert.deepEqual(events.map((e) => e.retries).sort(), [0, 1]);
      for (const e of events) assert.equal(e.host, `127.0.0.1:${plain.port}`);
    } finally {
      tap.close();
    }
  });

  it('redacts Authorization, Cookie, Mesh-Auth-* and --tap_redact_headers in any spelling', async () => {
    const tap = await openTap(gw.admin);
    try {
      await http('GET', `${gw.url}/hello/secret`, {
        headers: { AUTHORIZATION: 'Bearer s3cret', cookie: 'sid=s3cret', 'Proxy-Authorization': 'Basic s3cret', 'x-api-key': 's3cret', x_api_key: 's3cret', mesh_auth_subject: 's3cret', 'X-Visible': 'shown' },
      });
      const [e] = await waitFor(() => (tap.lines().length >= 1 ? tap.lines() : undefined));
      const h = e!.request_headers as Record<string, string>;
      assert.equal(h['x-visible'], 'shown');
      assert.ok(!JSON.stringify(e).includes('s3cret'), JSON.stringify(h));
      for (const name of ['authorization', 'cookie', 'proxy-authorization', 'x-api-key']) assert.equal(h[name], '[redacted]', name);
      // With --headers_with_underscores=allow the edge lets these spellings through: still redacted.
      assert.equal(h.x_api_key, '[redacted]');
      if (h.mesh_auth_subject !== undefined) assert.equal(h.mesh_auth_subject, '[redacted]');
    } finally {
      tap.close();
    }
  });

  it('each filter takes the matching requests only', async () => {
    const cases: Array<[string, () => Promise<unknown>, () => Promise<unknown>]> = [
      ['?path_prefix=/hello/a', () => http('GET', `${gw.url}/hello/a1`), () => http('GET', `${gw.url}/hello/b1`)],
      ['?method=delete', () => http('DELETE', `${gw.url}/hello/m`), () => http('GET', `${gw.url}/hello/m`)],
      ['?route=other', () => http('GET', `${gw.url}/other/x`), () => http('GET', `${gw.url}/hello/x`)],
      ['?status=4xx', () => http('GET', `${gw.url}/nowhere`), () => http('GET', `${gw.url}/hello/ok`)],
      ['?status=200', () => http('GET', `${gw.url}/hello/ok`), () => http('GET', `${gw.url}/nowhere`)],
      ['?service=go.mesh.api.plain', () => http('GET', `${gw.url}/hello/s`), () => http('GET', `${gw.url}/nowhere`)],
      ['?min_duration_ms=0', () => http('GET', `${gw.url}/hello/d`), async () => undefined],
      ['?sample=0', async () => undefined, () => http('GET', `${gw.url}/hello/never`)],
      ['?identity=spiffe://mesh.local/svc/nobody', async () => undefined, () => http('GET', `${gw.url}/hello/i`)],
    ];
    for (const [query, match, miss] of cases) {
      const tap = await openTap(gw.admin, query);
      // A witness without a filter: once it has both events, the filtered tap had its chance at them.
      const witness = await openTap(gw.admin);
      try {
        await miss();
        await match();
        await waitFor(() => witness.lines().length >= 2 || (query.startsWith('?min') || query.startsWith('?sample') || query.startsWith('?identity') ? witness.lines().length >= 1 : false));
        const expected = query === '?sample=0' || query.startsWith('?identity') ? 0 : 1;
        if (expected > 0) await waitFor(() => tap.lines().length >= expected);
        const lines = tap.lines();
        assert.equal(lines.length, expected, `${query}: ${JSON.stringify(lines)}`);
      } finally {
        tap.close();
        witness.close();
      }
      await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 0);
    }
  });

  it('a bad parameter is 400 error JSON naming it', async () => {
    const cases: Array<[string, string]> = [
      ['?status=6xx', 'invalid tap parameter status=\\"6xx\\": use a class 1xx to 5xx or a status code 100 to 599'],
      ['?sample=2', 'invalid tap parameter sample=\\"2\\": a share from 0 to 1'],
      ['?rate=0', 'invalid tap parameter rate=\\"0\\": events a second, 1 to 1000'],
      ['?min_duration_ms=soon', 'invalid tap parameter min_duration_ms=\\"soon\\": not a number of milliseconds'],
      ['?path_prefix=hello', 'invalid tap parameter path_prefix=\\"hello\\": a path prefix starts with /'],
      ['?colour=red', 'unknown tap parameter \\"colour\\": use service, route, path_prefix, method, status, identity, min_duration_ms, sample, rate, bodies'],
    ];
    for (const [query, detail] of cases) {
      const res = await http('GET', `${gw.admin}/tap${query}`);
      assert.equal(res.status, 400, query);
      assert.equal(res.headers['content-type'], 'application/json');
      assert.equal(res.text, `{"id":"go.mesh.admin","code":400,"detail":"${detail}","status":"Bad Request"}`);
    }
  });

  it('at most 8 taps at once (503), and a closed client frees its slot', async () => {
    const taps: Tap[] = [];
    try {
      for (let i = 0; i < 8; i++) taps.push(await openTap(gw.admin));
      assert.equal(await statValue(gw.admin, 'admin.tap.active'), 8);
      const refusedBefore = await statValue(gw.admin, 'admin.tap.refused');
      const ninth = await http('GET', `${gw.admin}/tap`);
      assert.equal(ninth.status, 503);
      assert.equal(ninth.text, '{"id":"go.mesh.admin","code":503,"detail":"too many taps: at most 8 at once on this process; retry later","status":"Service Unavailable"}');
      assert.equal(await statValue(gw.admin, 'admin.tap.refused'), refusedBefore + 1);
      taps.pop()!.close();
      await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 7);
      const again = await openTap(gw.admin);
      taps.push(again);
      assert.equal(again.res.statusCode, 200);
    } finally {
      for (const t of taps) t.close();
    }
    await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 0);
  });

  it('over the rate cap events are dropped and counted, and a reader that never reads buffers nothing', async () => {
    // rate=1: one event a second; the rest of a burst is dropped and said in a {"dropped":N} line.
    const tap = await openTap(gw.admin, '?rate=1');
    const droppedBefore = await statValue(gw.admin, 'admin.tap.dropped');
    try {
      const started = performance.now();
      for (let i = 0; i < 5; i++) await http('GET', `${gw.url}/hello/r${i}`);
      const seconds = (performance.now() - started) / 1000;
      // Every request is an event or counted in a {"dropped":N} line (said once a second).
      const dropped = () => tap.lines().reduce((n, l) => n + (typeof l.dropped === 'number' ? l.dropped : 0), 0);
      await waitFor(() => tap.events().length + dropped() === 5, 5000);
      // One token at the start, and one more for each second the burst took (a loaded machine).
      assert.ok(tap.events().length >= 1 && tap.events().length <= 1 + Math.floor(seconds), `${tap.events().length} events in ${seconds.toFixed(2)} s`);
      for (const l of tap.lines().filter((x) => 'dropped' in x)) assert.deepEqual(Object.keys(l), ['dropped']);
      assert.equal(await statValue(gw.admin, 'admin.tap.dropped'), droppedBefore + dropped());
    } finally {
      tap.close();
    }
    // A reader that never reads: once the socket's buffers are full, events are dropped, not queued.
    const stalled = await openTap(gw.admin, '?rate=1000');
    stalled.res.pause();
    stalled.res.removeAllListeners('data');
    try {
      const before = await statValue(gw.admin, 'admin.tap.dropped');
      const big = 'x'.repeat(4000);
      // Each event carries a 4 KB header: a thousand or more fill the socket buffers of both ends
      // (the events go out in a write every 20 ms, which the kernel packs tighter than one write each).
      for (let round = 0; round < 400; round++) {
        await Promise.all(Array.from({ length: 25 }, (_, i) => http('GET', `${gw.url}/hello/s${round}-${i}`, { headers: { 'x-big': big } })));
        if ((await statValue(gw.admin, 'admin.tap.dropped')) > before) break;
      }
      assert.ok((await statValue(gw.admin, 'admin.tap.dropped')) > before, 'a stalled reader makes the tap drop events');
    } finally {
      stalled.close();
    }
    await waitFor(async () => (await statValue(gw.admin, 'admin.tap.active')) === 0);
  });
});

describe('admin /tap with --admin_token', () => {
  const dir = tempDir();
  let gw: GatewayProcess;
  before(async () => {
    gw = await startGatewayProcess(dir.path, [], { MESH_ADMIN_TOKEN: 'tap-token' });
  });
  after(async () => {
    await gw?.stop();
    dir.cleanup();
  });

  it('needs the token: 401 without it (counted as a refused tap), 200 with it', async () => {
    const none = await http('GET', `${gw.admin}/tap`);
    assert.equal(none.status, 401);
    assert.equal(none.text, 'Unauthorized: this admin interface needs "Authorization: Bearer <token>"\n');
    const wrong = await http('GET', `${gw.admin}/tap`, { headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    const auth = { authorization: 'Bearer tap-token' };
    const stats = await http('GET', `${gw.admin}/stats?format=json&filter=^admin\\.tap\\.refused$`, { headers: auth });
    assert.deepEqual(stats.json<{ stats: unknown[] }>().stats, [{ name: 'admin.tap.refused', value: 2 }]);
    const tap = await openTap(gw.admin, '', auth);
    try {
      assert.equal(tap.res.statusCode, 200);
    } finally {
      tap.close();
    }
  });

  it('refuses a cross-site tap with 403 even with the token', async () => {
    const cross = await http('GET', `${gw.admin}/tap`, { headers: { authorization: 'Bearer tap-token', 'sec-fetch-site': 'cross-site' } });
    assert.equal(cross.status, 403);
    assert.equal(cross.text, 'Forbidden: /tap changes state and refuses cross-site requests.\n');
  });

  it('shutdown ends every tap cleanly: the chunked answer completes', async () => {
    const tap = await openTap(gw.admin, '', { authorization: 'Bearer tap-token' });
    const complete = new Promise<boolean>((resolve) => tap.res.on('close', () => resolve(tap.res.complete)));
    assert.equal(await gw.stop(), 0);
    assert.equal(await complete, true);
  });
});
