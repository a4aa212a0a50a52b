/**
 * The pure parts of the tap: /tap's parameters, the filter, the rate cap, redaction, the hub's
 * cap and `active` flag, a stream's drops under backpressure, `mesh tap`'s line and flags.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseQuery } from '../../src/admin/query.js';
import { parseTapQuery, RateCap, tapMatches, TapStream, TAP_PENDING_MAX_BYTES, type TapFilter } from '../../src/admin/tap.js';
import { isRedacted, REDACTED, REDACTION_CACHE_NAMES, redactHeaders, responseHeadersOf, TapHub, type TapEvent } from '../../src/base/http/tap.js';
import { formatTapEvent, tapAdmins, tapQueryOf } from '../../src/cli/tap.js';
import { BodyCapture, renderBody } from '../../src/base/http/tap-body.js';
import { replayOf, ReplayError } from '../../src/cli/tap-replay.js';
import { parseArgs } from '../../src/cli/flags.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { RequestInfo } from '../../src/base/http/access-log.js';
import { waitFor } from '../helpers.js';

const EVENT: TapEvent = {
  time: '2026-11-29T13:00:00.123Z',
  front: 'gateway',
  method: 'GET',
  authority: '127.0.0.1:8080',
  path: '/hello/ada',
  query: null,
  scheme: 'http',
  status: 200,
  request_headers: {},
  response_headers: {},
  bytes_in: 0,
  bytes_out: 12,
  duration_ms: 3.1,
  phases: { upstream_ms: 0.4, first_byte_ms: 2.9 },
  route: 'hello-0',
  grpc_status: null,
  cluster: 'go.mesh.srv.hello',
  host: '10.0.0.7:8080',
  retries: 0,
  response_flags: '-',
  identity: null,
  trace_id: '4bf92f3577b34da6a3ce929d0e0e4736',
};

const filterOf = (q: string): TapFilter => {
  const f = parseTapQuery(parseQuery(q));
  assert.ok(!('parameter' in f), JSON.stringify(f));
  return f as TapFilter;
};

describe('/tap parameters and filter', () => {
  it('parses every parameter; defaults sample 1 and rate 100', () => {
    assert.deepEqual(filterOf(''), { sample: 1, rate: 100, bodies: false });
    assert.deepEqual(filterOf('service=a&route=r&path_prefix=/x&method=get&status=4xx&identity=spiffe://d/svc/a&min_duration_ms=2.5&sample=0.25&rate=7&bodies=true'), {
      service: 'a',
      route: 'r',
      pathPrefix: '/x',
      method: 'GET',
      status: { min: 400, max: 499 },
      identity: 'spiffe://d/svc/a',
      minDurationMs: 2.5,
      sample: 0.25,
      rate: 7,
      bodies: true,
    });
    assert.deepEqual(filterOf('status=503').status, { min: 503, max: 503 });
  });

  it('refuses bad values and unknown parameters, naming them', () => {
    for (const [q, parameter] of [
      ['status=6xx', 'status'],
      ['status=99', 'status'],
      ['sample=1.5', 'sample'],
      ['sample=-1', 'sample'],
      ['rate=1001', 'rate'],
      ['rate=0', 'rate'],
      ['rate=1.5', 'rate'],
      ['min_duration_ms=-1', 'min_duration_ms'],
      ['path_prefix=x', 'path_prefix'],
      ['method=G%20T', 'method'],
      ['service=', 'service'],
      ['bodies=1', 'bodies'],
      ['nope=1', 'nope'],
    ] as const) {
      const f = parseTapQuery(parseQuery(q));
      assert.ok('parameter' in f, q);
      assert.equal(f.parameter, parameter, q);
    }
  });

  it('matches every field given, and only those', () => {
    assert.ok(tapMatches(filterOf(''), EVENT));
    assert.ok(tapMatches(filterOf('service=go.mesh.srv.hello&route=hello-0&path_prefix=/hello/&method=GET&status=2xx&min_duration_ms=3'), EVENT));
    assert.ok(!tapMatches(filterOf('service=other'), EVENT));
    assert.ok(!tapMatches(filterOf('route=other'), EVENT));
    assert.ok(!tapMatches(filterOf('path_prefix=/bye'), EVENT));
    assert.ok(!tapMatches(filterOf('method=POST'), EVENT));
    assert.ok(!tapMatches(filterOf('status=5xx'), EVENT));
    assert.ok(!tapMatches(filterOf('status=201'), EVENT));
    assert.ok(!tapMatches(filterOf('identity=spiffe://mesh.local/svc/a'), EVENT));
    assert.ok(tapMatches(filterOf('identity=spiffe://mesh.local/svc/a'), { ...EVENT, identity: 'spiffe://mesh.local/svc/a' }));
    assert.ok(!tapMatches(filterOf('min_duration_ms=4'), EVENT));
  });

  it('the rate cap holds one second\'s worth and refills with time', () => {
    let now = 0;
    const cap = new RateCap(3, () => now);
    assert.deepEqual([cap.take(), cap.take(), cap.take(), cap.take()], [true, true, true, false]);
    now = 340;
    assert.equal(cap.take(), true);
    assert.equal(cap.take(), false);
    now = 10_000;
    assert.deepEqual([cap.take(), cap.take(), cap.take(), cap.take()], [true, true, true, false]);
  });
});

describe('redaction', () => {
  it('redacts the secrets in any spelling, and the configured names', () => {
    const extra = new Set(['x-api-key']);
    for (const name of ['authorization', 'AUTHORIZATION', 'Proxy-Authorization', 'cookie', 'set-cookie', 'Set_Cookie', 'mesh-auth-subject', 'mesh_auth_scopes', 'Mesh-Auth-Anything', 'x-api-key', 'X_API_KEY']) {
      assert.ok(isRedacted(name, extra), name);
    }
    for (const name of ['content-type', 'x-api-keys', 'mesh-id', 'meshauth-subject']) assert.ok(!isRedacted(name, extra), name);
    assert.deepEqual(redactHeaders({ authorization: 'Bearer x', 'set-cookie': ['a=1', 'b=2'], accept: 'text/plain', 'x-two': ['1', '2'], gone: undefined }, (name) => isRedacted(name, extra)), {
      authorization: REDACTED,
      'set-cookie': REDACTED,
      accept: 'text/plain',
      'x-two': '1, 2',
    });
  });

  it('an answer\'s headers as node sent them: writeHead\'s and setHeader\'s, repeated ones kept, values with colons whole', async () => {
    const heads: Array<Record<string, unknown>> = [];
    const server = createServer((req, res) => {
      if (req.url === '/array') {
        res.writeHead(201, ['Set-Cookie', 'a=1', 'set-cookie', 'b=2', 'Location', 'http://h:1/x', 'X-Empty', '']);
      } else if (req.url === '/mixed') {
        res.setHeader('X-Set', 'by setHeader');
        res.writeHead(202, { 'X-Head': 'by writeHead' });
      } else if (req.url === '/none') {
        res.writeHead(204);
      } else {
        res.statusCode = 200;
        res.setHeader('content-type', 'text/plain');
      }
      res.end();
      heads.push(responseHeadersOf(res));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    try {
      for (const path of ['/array', '/mixed', '/none', '/set']) await (await fetch(`http://127.0.0.1:${port}${path}`)).arrayBuffer();
    } finally {
      server.closeAllConnections();
      server.close();
    }
    const [array, mixed, none, set] = heads;
    assert.deepEqual([mixed!['x-set'], mixed!['x-head']], ['by setHeader', 'by writeHead']);
    assert.deepEqual(array!['set-cookie'], ['a=1', 'b=2']);
    assert.equal(array!.location, 'http://h:1/x');
    assert.equal(array!['x-empty'], '');
    assert.ok(!('' in array!));
    assert.deepEqual(Object.keys(none!).filter((n) => n !== 'date' && n !== 'connection' && n !== 'keep-alive'), []);
    assert.equal(set!['content-type'], 'text/plain');
    assert.equal(set!['content-length'], '0');
  });
});

/** A response that records writes and can be told its socket needs a drain. */
function fakeResponse(): { res: ServerResponse; written: string[]; setNeedDrain(v: boolean): void } {
  const written: string[] = [];
  const em = new EventEmitter() as EventEmitter & Record<string, unknown>;
  let needDrain = false;
  Object.defineProperty(em, 'writableNeedDrain', { get: () => needDrain });
  em.writableEnded = false;
  em.destroyed = false;
  em.write = (chunk: string) => {
    written.push(chunk);
    return true;
  };
  em.end = () => {
    em.writableEnded = true;
    em.emit('close');
  };
  return { res: em as unknown as ServerResponse, written, setNeedDrain: (v) => (needDrain = v) };
}

describe('the hub and a stream', () => {
  it('active while a tap is attached; at most maxTaps', () => {
    const hub = new TapHub({ maxTaps: 2 });
    assert.equal(hub.active, false);
    const sink = { deliver: () => undefined };
    const a = hub.attach(sink)!;
    const b = hub.attach(sink === sink ? { deliver: () => undefined } : sink)!;
    assert.equal(hub.active, true);
    assert.equal(hub.attach({ deliver: () => undefined }), undefined);
    a();
    assert.equal(hub.active, true);
    b();
    assert.equal(hub.active, false);
  });

  it('drops (and counts) what comes while the socket needs a drain, and over the rate; says how many at the end', async () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const { res, written, setNeedDrain } = fakeResponse();
    const stream = new TapStream(res, filterOf('rate=1000'), tapStats);
    stream.offer(EVENT);
    setNeedDrain(true);
    for (let i = 0; i < 50; i++) stream.offer(EVENT);
    setNeedDrain(false);
    stream.offer({ ...EVENT, method: 'POST' });
    assert.equal(tapStats.events.value, 2);
    assert.equal(tapStats.dropped.value, 50);
    await stream.end();
    const lines = written.join('').split('\n').filter(Boolean);
    assert.equal(lines.length, 3);
    assert.equal(lines.at(-1), '{"dropped":50}');
    assert.equal(JSON.parse(lines[0]!).path, '/hello/ada');
    assert.equal(JSON.parse(lines[1]!).method, 'POST');
  });

  it('events taken within TAP_FLUSH_MS go out in one write; past TAP_PENDING_MAX_BYTES held, events are dropped', async () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const { res, written } = fakeResponse();
    const stream = new TapStream(res, filterOf('rate=1000'), tapStats);
    for (let i = 0; i < 10; i++) stream.offer({ ...EVENT, path: `/hello/${i}` });
    assert.equal(written.length, 0, 'nothing written before the flush');
    await waitFor(() => written.length > 0);
    assert.equal(written.length, 1);
    assert.deepEqual(written[0]!.split('\n').filter(Boolean).map((l) => JSON.parse(l).path), Array.from({ length: 10 }, (_, i) => `/hello/${i}`));
    // A big event (bodies) fills what a stream may hold until its next flush.
    const big = { ...EVENT, request_headers: { 'x-big': 'x'.repeat(TAP_PENDING_MAX_BYTES) } };
    stream.offer(big);
    stream.offer(EVENT);
    assert.equal(tapStats.dropped.value, 1);
    await stream.end();
    assert.equal(tapStats.events.value, 11);
  });

  it("a request no attached tap may take (its path prefix and method) gets no record; a tap without them takes every request", () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const hub = new TapHub();
    const stream = new TapStream(fakeResponse().res, filterOf('path_prefix=/app&method=post'), tapStats);
    const detach = hub.attach(stream)!;
    assert.deepEqual([hub.mayTake('POST', '/app/x'), hub.mayTake('GET', '/app/x'), hub.mayTake('POST', '/other')], [true, false, false]);
    const req = Object.assign(new EventEmitter(), { method: 'GET', url: '/other', headers: {} }) as any;
    assert.equal(hub.begin(req, new EventEmitter() as any, undefined, '/other'), undefined);
    const everything = hub.attach({ deliver: () => undefined })!;
    assert.equal(hub.mayTake('GET', '/other'), true);
    everything();
    detach();
    stream.stop();
    // An ended stream takes nothing.
    assert.equal(stream.mayTake('POST', '/app/x'), false);
  });

  it('attacker: made-up header names keep at most REDACTION_CACHE_NAMES remembered, and the secrets past them are still redacted', () => {
    const hub = new TapHub({ redact: ['x-api-key'] });
    const events: TapEvent[] = [];
    hub.attach({ deliver: (e) => events.push(e) });
    const send = (headers: Record<string, string>) => {
      const req = Object.assign(new EventEmitter(), { method: 'GET', url: '/x', headers, socket: {} }) as any;
      const res = { headersSent: false, writableFinished: true, statusCode: 0 } as any;
      hub.publish('gateway', req, res, new RequestInfo(Date.now(), '/x'), 1);
      return events.at(-1)!.request_headers;
    };
    for (let i = 0; i < 3 * REDACTION_CACHE_NAMES; i++) send({ [`x-made-up-${i}`]: 'v' });
    assert.equal((hub as unknown as { redactedNames: Map<string, boolean> }).redactedNames.size, REDACTION_CACHE_NAMES);
    assert.deepEqual(send({ AUTHORIZATION: 'Bearer x', X_Api_Key: 'k', 'mesh-auth-subject': 'ada', Mesh_Auth_Scopes: 'admin', Set_Cookie: 's=1', 'x-made-up-0': 'v', 'x-new': 'n' }), {
      AUTHORIZATION: REDACTED,
      X_Api_Key: REDACTED,
      'mesh-auth-subject': REDACTED,
      Mesh_Auth_Scopes: REDACTED,
      Set_Cookie: REDACTED,
      'x-made-up-0': 'v',
      'x-new': 'n',
    });
  });

  it('an event over a tap\'s rate, or out of its filter, gets no headers: only the events a tap takes are given them', async () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const hub = new TapHub();
    const { res: out, written } = fakeResponse();
    const stream = new TapStream(out, filterOf('rate=2&method=get'), tapStats);
    hub.attach(stream);
    let headerReads = 0;
    const send = (method: string) => {
      const req = Object.assign(new EventEmitter(), { method, url: '/x', headers: { host: 'h', authorization: 'Bearer x' }, socket: {} }) as any;
      const res = {
        headersSent: true,
        writableFinished: true,
        statusCode: 200,
        get _header() {
          headerReads++;
          return 'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n';
        },
      } as any;
      hub.publish('gateway', req, res, new RequestInfo(Date.now(), '/x'), 1);
    };
    for (let i = 0; i < 10; i++) send('GET');
    for (let i = 0; i < 5; i++) send('POST');
    assert.equal(headerReads, 2, 'the two events the rate lets through, and no other');
    assert.equal(tapStats.dropped.value, 8, 'the eight over the rate are dropped and counted; the POSTs are out of the filter');
    await stream.end();
    const lines = written.join('').trim().split('\n').map((l) => JSON.parse(l) as TapEvent & { dropped?: number });
    assert.deepEqual(lines.filter((l) => l.dropped === undefined).map((l) => [l.request_headers, l.response_headers]), [
      [{ host: 'h', authorization: REDACTED }, { 'content-type': 'text/plain' }],
      [{ host: 'h', authorization: REDACTED }, { 'content-type': 'text/plain' }],
    ]);
    assert.deepEqual(lines.at(-1), { dropped: 8 });
  });

  it('sample 0 takes nothing and drops nothing', () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const { res, written } = fakeResponse();
    const stream = new TapStream(res, filterOf('sample=0'), tapStats);
    for (let i = 0; i < 5; i++) stream.offer(EVENT);
    stream.stop();
    assert.equal(written.length, 0);
    assert.equal(tapStats.dropped.value, 0);
  });
});

describe('mesh tap: lines and flags', () => {
  it('one line per event', () => {
    assert.equal(
      formatTapEvent(EVENT),
      '2026-11-29T13:00:00.123Z gateway GET /hello/ada 200 3.1ms route=hello-0 upstream=go.mesh.srv.hello@10.0.0.7:8080 trace=4bf92f3577b34da6a3ce929d0e0e4736\n',
    );
    assert.equal(
      formatTapEvent({ ...EVENT, query: 'a=1', route: null, cluster: null, host: null, status: 0, response_flags: 'DC', retries: 2, identity: 'spiffe://d/svc/a', trace_id: null, path: '/x\u001b[2J' }, '127.0.0.1:9901'),
      '2026-11-29T13:00:00.123Z gateway GET /x\\x1b[2J?a=1 0 3.1ms route=- upstream=- trace=- flags=DC retries=2 identity=spiffe://d/svc/a admin=127.0.0.1:9901\n',
    );
  });

  it('the flags become the query; a bad one names its flag', async () => {
    const parsed = parseArgs(['tap', '--admin=127.0.0.1:9901,[::1]:9902', '--path=/a', '--status=5xx', '--min_duration=250ms', '--rate=10', '--method=GET']);
    assert.equal(tapQueryOf(parsed.config, parsed.given), '?path_prefix=%2Fa&method=GET&status=5xx&min_duration_ms=250&rate=10');
    assert.deepEqual(await tapAdmins(parsed.config, { err: () => {} }), ['127.0.0.1:9901', '[::1]:9902']);
    const bodies = parseArgs(['tap', '--admin=127.0.0.1:9901', '--bodies']);
    assert.equal(tapQueryOf(bodies.config, bodies.given), '?bodies=true');
    const bad = parseArgs(['tap', '--admin=127.0.0.1:9901', '--sample=2']);
    assert.throws(() => tapQueryOf(bad.config, bad.given), /invalid value "2" for flag --sample: a share from 0 to 1/);
  });
});

describe('tap bodies: capture and rendering', () => {
  const capture = (cap: number, ...chunks: Array<string | Uint8Array>) => {
    const c = new BodyCapture(cap);
    for (const chunk of chunks) c.add(chunk);
    return c;
  };
  const none = new Set<string>();
  const fields = new Set(['password', 'token']);

  it('keeps a copy of the first cap bytes and counts them all', () => {
    const source = Buffer.from('abcdef');
    const c = capture(8, source, 'ghij', Buffer.from('kl'));
    source.fill(0x7a);
    assert.equal(c.bytes().toString(), 'abcdefgh');
    assert.equal(c.total, 12);
    assert.equal(c.truncated, true);
    const hex = new BodyCapture(8);
    hex.add('6869', 'hex');
    assert.equal(hex.bytes().toString(), 'hi');
    assert.equal(capture(8, 'exactly8').truncated, false);
  });

  it('text when the type is text-like and the bytes are UTF-8; else base64', () => {
    assert.deepEqual(renderBody(capture(64, 'h\u00e9llo'), { 'content-type': 'text/plain; charset=utf-8' }, none), { bytes: 6, truncated: false, encoding: 'utf8', data: 'h\u00e9llo', redacted: false });
    assert.equal(renderBody(capture(64, 'a=1'), { 'content-type': 'application/x-www-form-urlencoded' }, none).encoding, 'utf8');
    assert.equal(renderBody(capture(64, '<a/>'), { 'content-type': 'application/atom+xml' }, none).encoding, 'utf8');
    assert.deepEqual(renderBody(capture(64, Buffer.from([0xc3])), { 'content-type': 'text/plain' }, none), { bytes: 1, truncated: false, encoding: 'base64', data: 'ww==', redacted: false });
    assert.equal(renderBody(capture(64, 'plain'), { 'content-type': 'application/octet-stream' }, none).encoding, 'base64');
    assert.equal(renderBody(capture(64, 'plain'), {}, none).encoding, 'base64');
    assert.equal(renderBody(capture(64, 'plain'), { 'content-type': 'text/plain', 'content-encoding': 'gzip' }, none).encoding, 'base64');
    assert.deepEqual(renderBody(capture(64), { 'content-type': 'application/json' }, fields), { bytes: 0, truncated: false, encoding: 'utf8', data: '', redacted: false });
  });

  it('redacts the configured JSON fields at any depth, any case; hides whole what it cannot read whole', () => {
    const json = { 'content-type': 'application/json; charset=utf-8' };
    const body = '{"a":[{"b":{"PassWord":"x","keep":1}}],"token":{"deep":"y"},"n":null}';
    assert.deepEqual(renderBody(capture(256, body), json, fields), {
      bytes: body.length,
      truncated: false,
      encoding: 'utf8',
      data: '{"a":[{"b":{"PassWord":"[redacted]","keep":1}}],"token":"[redacted]","n":null}',
      redacted: true,
    });
    // Nothing to redact: the body as sent (its spacing kept).
    assert.equal(renderBody(capture(256, '{ "keep": 1 }'), json, fields).data, '{ "keep": 1 }');
    const whole = (bytes: number, truncated: boolean) => ({ bytes, truncated, encoding: 'utf8', data: '[redacted]', redacted: true });
    assert.deepEqual(renderBody(capture(8, body), json, fields), whole(body.length, true));
    assert.deepEqual(renderBody(capture(256, '{"password": '), json, fields), whole(13, false));
    assert.deepEqual(renderBody(capture(256, body), { ...json, 'content-encoding': 'gzip' }, fields), whole(body.length, false));
    // Without fields to redact, a JSON body is text like any other (its prefix when cut).
    assert.deepEqual(renderBody(capture(8, body), json, none), { bytes: body.length, truncated: true, encoding: 'utf8', data: body.slice(0, 8), redacted: false });
  });

  it('the hub: bodies only on a process that allows them, and only while a tap that asked is attached', () => {
    assert.throws(() => new TapHub().attach({ bodies: true, deliver: () => undefined }), /not allowed/);
    const hub = new TapHub({ bodiesMaxBytes: 16 });
    assert.equal(hub.bodiesAllowed, true);
    const plain = hub.attach({ deliver: () => undefined })!;
    assert.equal(hub.bodies, false);
    const withBodies = hub.attach({ bodies: true, deliver: () => undefined })!;
    assert.equal(hub.bodies, true);
    withBodies();
    withBodies();
    assert.equal(hub.bodies, false);
    assert.equal(hub.active, true);
    plain();
    assert.equal(hub.active, false);
  });
});

describe('mesh tap replay: reading an event', () => {
  const event = (over: Record<string, unknown> = {}) =>
    JSON.stringify({
      ...EVENT,
      method: 'POST',
      query: 'a=1',
      request_headers: { host: '127.0.0.1:8080', authorization: '[redacted]', 'x-key': '[redacted]', connection: 'keep-alive', 'content-length': '3', 'transfer-encoding': 'chunked', ':path': '/x', 'x-tag': 'kept' },
      request_body: { bytes: 3, truncated: false, encoding: 'base64', data: Buffer.from([1, 2, 3]).toString('base64'), redacted: false },
      ...over,
    });

  it('the same method, path, query, body and Host; no redacted, hop-by-hop or pseudo-header', () => {
    const r = replayOf(event(), 1, 'f', undefined);
    assert.equal(r.method, 'POST');
    assert.equal(r.url.href, 'http://127.0.0.1:8080/hello/ada?a=1');
    assert.equal(r.target, '/hello/ada?a=1');
    assert.equal(replayOf(event({ query: 'q=a|b' }), 1, 'f', undefined).target, '/hello/ada?q=a|b');
    assert.deepEqual(r.headers, { 'x-tag': 'kept', host: '127.0.0.1:8080', 'content-length': '3' });
    assert.deepEqual(r.body, Buffer.from([1, 2, 3]));
    assert.equal(replayOf(event({ scheme: 'https' }), 1, 'f', undefined).url.href, 'https://127.0.0.1:8080/hello/ada?a=1');
    assert.equal(replayOf(event(), 1, 'f', new URL('http://10.0.0.1:9000')).url.href, 'http://10.0.0.1:9000/hello/ada?a=1');
  });

  it('refuses what would not be the same request, naming the line', () => {
    const refused = (text: string, why: RegExp) => assert.throws(() => replayOf(text, 7, 'f', undefined), (e: Error) => e instanceof ReplayError && why.test(e.message) && e.message.startsWith('f:7: '));
    refused(event({ request_body: null }), /not captured/);
    refused(event({ request_body: { bytes: 9, truncated: true, encoding: 'utf8', data: 'abc', redacted: false } }), /truncated/);
    refused(event({ request_body: { bytes: 10, truncated: false, encoding: 'utf8', data: '[redacted]', redacted: true } }), /redacted/);
    refused(event({ request_body: { bytes: 4, truncated: false, encoding: 'utf8', data: 'abc', redacted: false } }), /holds 3 bytes, the event says 4/);
    refused(event({ method: 'GE T' }), /"method"/);
    refused(event({ request_headers: { a: 1 } }), /"request_headers"/);
    refused(event({ request_headers: { a: 'x\r\nInjected: 1' } }), /line break/);
    refused(event({ authority: null }), /give --to/);
    refused('[1]', /not a JSON object/);
    refused('{', /not a JSON line/);
  });
});
