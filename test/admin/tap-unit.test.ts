/**
 * The pure parts of the tap: /tap's parameters, the filter, the rate cap, redaction, the hub's
 * cap and `active` flag, a stream's drops under backpressure, `mesh tap`'s line and flags.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { parseQuery } from '../../src/admin/query.js';
import { parseTapQuery, RateCap, tapMatches, TapStream, type TapFilter } from '../../src/admin/tap.js';
import { isRedacted, REDACTED, redactHeaders, TapHub, type TapEvent } from '../../src/base/http/tap.js';
import { formatTapEvent, tapAdmins, tapQueryOf } from '../../src/cli/tap.js';
import { parseArgs } from '../../src/cli/flags.js';
import { StatsStore } from '../../src/base/stats/store.js';

const EVENT: TapEvent = {
  time: '2026-11-29T13:00:00.123Z',
  front: 'gateway',
  method: 'GET',
  authority: '127.0.0.1:8080',
  path: '/hello/ada',
  query: null,
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
    assert.deepEqual(filterOf(''), { sample: 1, rate: 100 });
    assert.deepEqual(filterOf('service=a&route=r&path_prefix=/x&method=get&status=4xx&identity=spiffe://d/svc/a&min_duration_ms=2.5&sample=0.25&rate=7'), {
      service: 'a',
      route: 'r',
      pathPrefix: '/x',
      method: 'GET',
      status: { min: 400, max: 499 },
      identity: 'spiffe://d/svc/a',
      minDurationMs: 2.5,
      sample: 0.25,
      rate: 7,
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
    assert.deepEqual(redactHeaders({ authorization: 'Bearer x', 'set-cookie': ['a=1', 'b=2'], accept: 'text/plain', 'x-two': ['1', '2'], gone: undefined }, extra), {
      authorization: REDACTED,
      'set-cookie': REDACTED,
      accept: 'text/plain',
      'x-two': '1, 2',
    });
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
    stream.deliver(EVENT);
    setNeedDrain(true);
    for (let i = 0; i < 50; i++) stream.deliver(EVENT);
    setNeedDrain(false);
    stream.deliver({ ...EVENT, method: 'POST' });
    assert.equal(written.length, 2);
    assert.equal(tapStats.events.value, 2);
    assert.equal(tapStats.dropped.value, 50);
    await stream.end();
    assert.equal(written.at(-1), '{"dropped":50}\n');
    assert.equal(JSON.parse(written[0]!).path, '/hello/ada');
  });

  it('sample 0 takes nothing and drops nothing', () => {
    const stats = new StatsStore();
    const tapStats = { events: stats.counter('e'), dropped: stats.counter('d'), active: stats.gauge('a') };
    const { res, written } = fakeResponse();
    const stream = new TapStream(res, filterOf('sample=0'), tapStats);
    for (let i = 0; i < 5; i++) stream.deliver(EVENT);
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
    const bad = parseArgs(['tap', '--admin=127.0.0.1:9901', '--sample=2']);
    assert.throws(() => tapQueryOf(bad.config, bad.given), /invalid value "2" for flag --sample: a share from 0 to 1/);
  });
});
