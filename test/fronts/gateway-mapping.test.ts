/**
 * Every row of the SPEC 4.4 tables through real gateway processes: `--handler=rpc` (request
 * mapping and versioned paths, `-` to CamelCase), `--handler=proxy` (the proxy mapping, full path
 * and query, X-Forwarded-*, WebSockets) and `--handler=event` (topic and name). Backends: plain
 * node:http apps registered by hand, and a framework service.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { Runtime } from '../../src/process/runtime.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { Service } from '../../src/framework/server/service.js';
import { MeshError } from '../../src/base/errors.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const JSON_HEADERS = { 'content-type': 'application/json' };

describe('SPEC 4.4 through the gateway', () => {
  const dir = tempDir('mesh-gateway-map-');
  let registry: Registry;
  let runtime: Runtime;
  let foo: PlainApp;
  let greeter: PlainApp;
  let v1foo: PlainApp;
  let rpcGw: GatewayProcess;
  let proxyGw: GatewayProcess;
  let eventGw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    runtime = new Runtime(optionsFromFlags(parseArgs([`--registry_address=${dir.path}`, '--admin_address=off', '--log_level=error']).config), { role: 'test' });
    const calc = new Service(runtime, { name: 'go.mesh.api.calc' }).handle({
      name: 'Calc.Add',
      handler: (req: { a?: unknown; b?: unknown }) => {
        const a = Number(req.a);
        const b = Number(req.b);
        if (!Number.isFinite(a) || !Number.isFinite(b)) throw new MeshError('go.mesh.api.calc', 400, 'a and b: numbers required');
        return { sum: a + b };
      },
    });
    await calc.start();
    [foo, greeter, v1foo] = await Promise.all([startPlainApp('foo'), startPlainApp('greeter'), startPlainApp('v1foo')]);
    await registerPlain(registry, 'go.mesh.api.foo', foo.port);
    await registerPlain(registry, 'go.mesh.api.foo.bar', foo.port);
    await registerPlain(registry, 'go.mesh.api.v1.foo', v1foo.port);
    await registerPlain(registry, 'go.mesh.api.v2.foo', foo.port);
    await registerPlain(registry, 'go.mesh.api.greeter', greeter.port);
    [rpcGw, proxyGw, eventGw] = await Promise.all([
      startGatewayProcess(dir.path, ['--handler=rpc']),
      startGatewayProcess(dir.path, ['--handler=proxy', '--client_request_timeout=1s']),
      startGatewayProcess(dir.path, ['--handler=event']),
    ]);
  });

  after(async () => {
    await Promise.all([rpcGw?.stop(), proxyGw?.stop(), eventGw?.stop()]);
    await runtime?.shutdown();
    await Promise.all([foo?.close(), greeter?.close(), v1foo?.close()]);
    await registry?.close();
    dir.cleanup();
  });

  const rpcRows: Array<[string, string, string]> = [
    // request mapping
    ['/foo/bar', 'go.mesh.api.foo', 'Foo.Bar'],
    ['/foo/bar/baz', 'go.mesh.api.foo', 'Bar.Baz'],
    ['/foo/bar/baz/cat', 'go.mesh.api.foo.bar', 'Baz.Cat'],
    // versioned paths
    ['/v1/foo/bar', 'go.mesh.api.v1.foo', 'Foo.Bar'],
    ['/v1/foo/bar/baz', 'go.mesh.api.v1.foo', 'Bar.Baz'],
    ['/v2/foo/bar', 'go.mesh.api.v2.foo', 'Foo.Bar'],
    ['/v2/foo/bar/baz', 'go.mesh.api.v2.foo', 'Bar.Baz'],
    // `-` to CamelCase
    ['/foo/get-user', 'go.mesh.api.foo', 'Foo.GetUser'],
    ['/foo/user-admin/get-all-users', 'go.mesh.api.foo', 'UserAdmin.GetAllUsers'],
  ];
  for (const [path, service, method] of rpcRows) {
    it(`rpc handler: ${path} → ${service} ${method}`, async () => {
      const res = await http('POST', `${rpcGw.url}${path}`, { headers: JSON_HEADERS, body: '{"n":1}' });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['content-type'], 'application/json');
      const seen = res.json();
      assert.equal(seen.service, service);
      assert.equal(seen.endpoint, method);
      assert.deepEqual(seen.body, { n: 1 });
      assert.equal(seen.app, service === 'go.mesh.api.v1.foo' ? 'v1foo' : 'foo');
    });
  }

  it('rpc handler: GET query as a JSON object, protobuf passes through, 415 for other types, framework service', async () => {
    const get = await http('GET', `${rpcGw.url}/foo/bar?a=1&b=x&b=y`);
    assert.deepEqual(get.json().body, { a: '1', b: ['x', 'y'] });
    const proto = await http('POST', `${rpcGw.url}/foo/bar`, { headers: { 'content-type': 'application/protobuf' }, body: Buffer.from([8, 1]) });
    assert.equal(proto.status, 200);
    assert.equal(proto.headers['content-type'], 'application/protobuf');
    assert.equal(JSON.parse(proto.text).contentType, 'application/protobuf');
    const text = await http('POST', `${rpcGw.url}/foo/bar`, { headers: { 'content-type': 'text/plain' }, body: 'hi' });
    assert.equal(text.status, 415);
    assert.equal(text.json().id, 'go.mesh.api');
    // A framework service through the rpc handler, by query and by body; its error passes through.
    assert.deepEqual((await http('GET', `${rpcGw.url}/calc/add?a=2&b=3`)).json(), { sum: 5 });
    assert.deepEqual((await http('POST', `${rpcGw.url}/calc/add`, { headers: JSON_HEADERS, body: '{"a":4,"b":5}' })).json(), { sum: 9 });
    const bad = await http('POST', `${rpcGw.url}/calc/add`, { headers: JSON_HEADERS, body: '{"a":"x"}' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json().id, 'go.mesh.api.calc');
    const unknown = await http('POST', `${rpcGw.url}/nosuch/thing`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(unknown.text, '{"id":"go.mesh.api","code":404,"detail":"service go.mesh.api.nosuch: not found","status":"Not Found"}');
    const fail = await http('POST', `${rpcGw.url}/foo/echo/fail`, { headers: JSON_HEADERS, body: '{}' });
    assert.equal(fail.status, 422);
    assert.equal(fail.json().detail, 'bad thing');
  });

  const proxyRows: Array<[string, string, string]> = [
    ['/foo/bar', 'foo', '/foo/bar'],
    ['/greeter', 'greeter', '/greeter'],
    ['/greeter/:name', 'greeter', '/greeter/:name'],
    ['/v1/foo/bar', 'v1foo', '/v1/foo/bar'],
  ];
  for (const [path, app, servicePath] of proxyRows) {
    it(`proxy handler: ${path} → service of ${app}, path ${servicePath}`, async () => {
      const res = await http('GET', `${proxyGw.url}${path}`);
      assert.equal(res.status, 200, res.text);
      const seen = res.json();
      assert.equal(seen.app, app);
      assert.equal(seen.url, servicePath);
    });
  }

  it('proxy handler: query kept, X-Forwarded-*, bodies, WebSocket echo, unknown service 404, backend down 502', async () => {
    const res = await http('PUT', `${proxyGw.url}/greeter/John?x=1&y=%2F&y=2`, {
      headers: { 'content-type': 'text/plain', 'x-forwarded-proto': 'https', host: 'public.example:443' },
      body: 'the body',
    });
    const seen = res.json();
    assert.equal(seen.method, 'PUT');
    assert.equal(seen.url, '/greeter/John?x=1&y=%2F&y=2');
    assert.equal(seen.body, 'the body');
    assert.equal(seen.headers['x-forwarded-for'], '127.0.0.1');
    assert.equal(seen.headers['x-forwarded-proto'], 'https', 'a proto set by a front proxy is kept');
    assert.equal(seen.headers['x-forwarded-host'], 'public.example:443');
    const plainProto = (await http('GET', `${proxyGw.url}/foo`)).json();
    assert.equal(plainProto.headers['x-forwarded-proto'], 'http');
    assert.equal(plainProto.headers['x-forwarded-host'], `127.0.0.1:${proxyGw.port}`);

    const ws = new WebSocket(`ws://127.0.0.1:${proxyGw.port}/greeter/chat`);
    const messages: string[] = [];
    ws.on('message', (d) => messages.push(d.toString()));
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    ws.send('hello');
    ws.send('again');
    await waitFor(() => messages.length >= 3);
    assert.equal(JSON.parse(messages[0]!).hello, 'greeter');
    assert.deepEqual(messages.slice(1), ['echo:hello', 'echo:again']);
    ws.close();

    const unknown = await http('GET', `${proxyGw.url}/nosuch/path`);
    assert.equal(unknown.status, 404);
    assert.equal(unknown.text, '{"id":"go.mesh.api","code":404,"detail":"service go.mesh.api.nosuch: not found","status":"Not Found"}');
    assert.equal((await http('GET', `${proxyGw.url}/a.b`)).status, 404);

    const gone = await startPlainApp('gone');
    await registerPlain(registry, 'go.mesh.api.gone', gone.port);
    await gone.close();
    const down = await http('GET', `${proxyGw.url}/gone/x`);
    assert.ok(down.status === 502 || down.status === 503, `${down.status} ${down.text}`);
    assert.equal(down.json().id, 'go.mesh.api');
  });

  it('event handler: /<topic>/<event> publishes an Event to <namespace>.<topic>', async () => {
    const got: Array<{ topic: string; message: Message }> = [];
    const subs = await Promise.all(
      ['go.mesh.api.user', 'go.mesh.api.foo', 'go.mesh.api.v1.foo'].map((topic) =>
        runtime.broker.subscribe(topic, (message, t) => {
          got.push({ topic: t, message });
        }),
      ),
    );
    const events = () => got.map((g) => ({ topic: g.topic, ...JSON.parse(Buffer.from(g.message.body).toString('utf8')) }));
    try {
      const posted = await http('POST', `${eventGw.url}/user/login`, { headers: { ...JSON_HEADERS, 'x-trace': 't1' }, body: '{"user":"john"}' });
      assert.equal(posted.status, 200, posted.text);
      await waitFor(() => got.length === 1);
      const [login] = events();
      assert.equal(login.topic, 'go.mesh.api.user');
      assert.equal(login.name, 'login');
      assert.equal(login.data, '{"user":"john"}');
      assert.deepEqual(login.header['X-Trace'], { key: 'X-Trace', values: ['t1'] });
      assert.equal(typeof login.id, 'string');
      assert.equal(typeof login.timestamp, 'number');

      await http('GET', `${eventGw.url}/user/logout?a=1&b=2&b=3`);
      await http('POST', `${eventGw.url}/foo/bar/baz`, { body: 'raw' });
      await http('POST', `${eventGw.url}/v1/foo/bar`, { body: 'v' });
      await waitFor(() => got.length === 4);
      const byName = Object.fromEntries(events().map((e) => [e.name, e]));
      assert.equal(byName.logout.topic, 'go.mesh.api.user');
      assert.deepEqual(JSON.parse(byName.logout.data), { a: '1', b: ['2', '3'] });
      assert.equal(byName['bar.baz'].topic, 'go.mesh.api.foo');
      assert.equal(byName['bar.baz'].data, 'raw');
      assert.equal(byName.bar.topic, 'go.mesh.api.v1.foo');

      const none = await http('POST', `${eventGw.url}/user`, { body: 'x' });
      assert.equal(none.status, 404);
      assert.equal(none.json().id, 'go.mesh.api');
    } finally {
      await Promise.all(subs.map((s) => s.unsubscribe()));
    }
  });

  it('--handler=event: a CloudEvent (structured or binary mode) is published as that CloudEvent; an invalid one is a 400', async () => {
    const got: Message[] = [];
    const sub = await runtime.broker.subscribe('go.mesh.api.orders', (m) => void got.push(m));
    try {
      const structured = '{"specversion":"1.0","id":"ce-1","source":"/shop","type":"com.example.order.created","time":"2024-05-01T12:00:00Z","datacontenttype":"application/json","data":{"n":1}}';
      const s1 = await http('POST', `${eventGw.url}/orders/created`, { headers: { 'content-type': 'application/cloudevents+json; charset=utf-8' }, body: structured });
      assert.equal(s1.status, 200, s1.text);
      assert.equal(s1.text, '{"id":"ce-1","topic":"go.mesh.api.orders","name":"created"}');
      const b1 = await http('POST', `${eventGw.url}/orders/paid`, {
        headers: { 'ce-specversion': '1.0', 'ce-id': 'ce-2', 'ce-source': '/shop', 'ce-type': 'com.example.order.paid', 'ce-traceparent': '00-abc', 'content-type': 'text/plain' },
        body: 'paid!',
      });
      assert.equal(b1.status, 200, b1.text);
      assert.equal(b1.text, '{"id":"ce-2","topic":"go.mesh.api.orders","name":"paid"}');
      await waitFor(() => got.length === 2);
      const s = got.find((m) => m.header['mesh-id'] === 'ce-1')!;
      assert.equal(Buffer.from(s.body).toString(), structured, 'structured: the event JSON as sent');
      assert.equal(s.header['content-type'], 'application/cloudevents+json; charset=utf-8');
      assert.equal(s.header['mesh-event'], 'created');
      const b = got.find((m) => m.header['mesh-id'] === 'ce-2')!;
      assert.equal(Buffer.from(b.body).toString(), 'paid!', 'binary: the data as sent');
      assert.deepEqual(
        Object.fromEntries(Object.entries(b.header).filter(([k]) => k.startsWith('ce-'))),
        { 'ce-specversion': '1.0', 'ce-id': 'ce-2', 'ce-source': '/shop', 'ce-type': 'com.example.order.paid', 'ce-traceparent': '00-abc' },
      );
      assert.equal(b.header['content-type'], 'text/plain');

      const bad: Array<[Record<string, string>, string, string]> = [
        [{ 'content-type': 'application/cloudevents+json' }, '{"specversion":"1.0","id":"x","type":"t"}', 'cloudevents: source is required (a non-empty string)'],
        [{ 'content-type': 'application/cloudevents+json' }, '{"specversion":"0.3","id":"x","source":"s","type":"t"}', 'cloudevents: specversion must be \\"1.0\\"'],
        [{ 'content-type': 'application/cloudevents+json' }, '[1]', 'cloudevents: the body must be a JSON object'],
        [{ 'content-type': 'application/cloudevents+json' }, '{oops', 'cloudevents: the body is not valid JSON'],
        [{ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': 's' }, 'd', 'cloudevents: ce-type is required (a non-empty string)'],
        [{ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': 's', 'ce-type': 't', 'ce-time': 'yesterday' }, 'd', 'cloudevents: ce-time must be an RFC 3339 timestamp'],
      ];
      for (const [headers, body, detail] of bad) {
        const r = await http('POST', `${eventGw.url}/orders/bad`, { headers, body });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.text, `{"id":"go.mesh.api","code":400,"detail":"${detail}","status":"Bad Request"}`);
      }
    } finally {
      await sub.unsubscribe();
    }
  });
});
