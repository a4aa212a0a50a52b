/**
 * CloudEvents 1.0 at the sidecar's /broker: structured and binary publishes (validated as at the
 * gateway, 400 error JSON otherwise), `format=cloudevents` subscribers that get each message as a
 * structured CloudEvent (defaults for plain messages), today's frames for plain subscribers, ack
 * frames wrapping the event, and the gateway's event handler → sidecar round trip. Real
 * `mesh sidecar` and `mesh api` processes sharing one local registry (embedded http broker),
 * undici for HTTP and ws for WebSockets.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { PRINTED, http, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { refusedHandshake, startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';
import { messageCloudEvent } from '../../src/edge/handlers/cloudevents.js';

type Json = Record<string, any>;

interface Sub {
  ws: WebSocket;
  texts: string[];
  frames: () => Json[];
  closed: Promise<{ code: number; reason: string }>;
}

async function subscribe(base: string, query: string): Promise<Sub> {
  const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/broker?${query}`);
  const texts: string[] = [];
  ws.on('message', (data, isBinary) => {
    assert.equal(isBinary, false, 'text frames');
    texts.push(data.toString());
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return { ws, texts, frames: () => texts.map((t) => JSON.parse(t) as Json), closed };
}

const post = (url: string, headers: Record<string, string>, body: string | Buffer) => http('POST', url, { headers, body });

const STRUCTURED = '{"specversion":"1.0","id":"ord-1","source":"/shop","type":"com.example.order.created","time":"2024-05-01T12:00:00Z","datacontenttype":"application/json","subject":"o/1","count":3,"data":{"n":1}}';

describe('sidecar /broker and CloudEvents', () => {
  const home = tempDir('mesh-sc-ce-');
  let sc: SidecarProcess;
  let gw: RunningProcess;
  let gwBase: string;
  before(async () => {
    gw = startProcess(['api', `--registry_address=${home.path}`, '--handler=event', '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning']);
    [sc, gwBase] = await Promise.all([startSidecar(home.path), gw.waitForPort(PRINTED.api, 15000).then((p) => `http://127.0.0.1:${p}`)]);
  });
  after(async () => {
    await Promise.all([sc?.stop(), gw?.stop()]);
    home.cleanup();
  });

  it('structured publish: a CloudEvents subscriber gets the event unchanged; a plain one gets it as the body', async () => {
    const [ce, plain] = await Promise.all([subscribe(sc.base, 'topic=s1&format=cloudevents'), subscribe(sc.base, 'topic=s1')]);
    const r = await post(`${sc.base}/broker?topic=s1`, { 'content-type': 'application/cloudevents+json; charset=utf-8' }, STRUCTURED);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.text, '{}');
    await waitFor(() => ce.texts.length === 1 && plain.texts.length === 1, 10_000);
    assert.equal(ce.texts[0], STRUCTURED, 'the event as published, byte for byte');
    const f = plain.frames()[0]!;
    assert.deepEqual(Object.keys(f), ['Header', 'Body']);
    assert.equal(Buffer.from(f.Body, 'base64').toString(), STRUCTURED);
    assert.equal(f.Header['Content-Type'], 'application/cloudevents+json; charset=utf-8');
    assert.equal(f.Header['Mesh-Id'], 'ord-1', 'Mesh-Id is the event id');
    for (const s of [ce, plain]) s.ws.close();
  });

  it('binary publish: the CloudEvents subscriber gets id, source, type, time, extensions and JSON data; a plain one sees the Ce-* headers', async () => {
    const [ce, plain] = await Promise.all([subscribe(sc.base, 'topic=b1&format=cloudevents'), subscribe(sc.base, 'topic=b1')]);
    const headers = {
      'ce-specversion': '1.0',
      'ce-id': 'pay-7',
      'ce-source': 'urn:shop:billing',
      'ce-type': 'com.example.order.paid',
      'ce-time': '2024-05-02T08:30:00.5+02:00',
      'ce-subject': 'o/7',
      'ce-partitionkey': 'p1',
      'content-type': 'application/json',
      'mesh-id': 'ignored',
      'x-tenant': 'acme',
      tenant: 'acme',
      accept: '*/*',
    };
    const r = await post(`${sc.base}/broker?topic=b1`, headers, '{"amount":12.5,"items":[1,2]}');
    assert.equal(r.status, 200, r.text);
    await waitFor(() => ce.texts.length === 1 && plain.texts.length === 1, 10_000);
    const e = ce.frames()[0]!;
    assert.deepEqual(Object.keys(e).slice(0, 6), ['specversion', 'id', 'source', 'type', 'time', 'datacontenttype']);
    assert.equal(e.specversion, '1.0');
    assert.equal(e.id, 'pay-7');
    assert.equal(e.source, 'urn:shop:billing');
    assert.equal(e.type, 'com.example.order.paid');
    assert.equal(e.time, '2024-05-02T08:30:00.5+02:00');
    assert.equal(e.datacontenttype, 'application/json');
    assert.equal(e.subject, 'o/7');
    assert.equal(e.partitionkey, 'p1');
    assert.equal(e.tenant, 'acme', 'a plain header with a valid attribute name is an extension');
    assert.equal(e['x-tenant'], undefined, 'names with "-" are not attribute names');
    assert.equal(e.useragent, undefined);
    assert.equal(e.accept, undefined, 'request-only headers are left out');
    assert.match(e.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/, "the message's trace context (distributed tracing extension)");
    assert.deepEqual(e.data, { amount: 12.5, items: [1, 2] });
    assert.equal(e.data_base64, undefined);
    assert.ok(ce.texts[0]!.endsWith(',"data":{"amount":12.5,"items":[1,2]}}'), 'the JSON data as published');

    const f = plain.frames()[0]!;
    assert.equal(Buffer.from(f.Body, 'base64').toString(), '{"amount":12.5,"items":[1,2]}');
    assert.equal(f.Header['Ce-Specversion'], '1.0');
    assert.equal(f.Header['Ce-Id'], 'pay-7');
    assert.equal(f.Header['Ce-Source'], 'urn:shop:billing');
    assert.equal(f.Header['Ce-Type'], 'com.example.order.paid');
    assert.equal(f.Header['Ce-Partitionkey'], 'p1');
    assert.equal(f.Header['Mesh-Id'], 'pay-7', 'the event id replaces a Mesh-Id sent along');
    for (const s of [ce, plain]) s.ws.close();
  });

  it('binary publish of bytes that are not JSON: data_base64', async () => {
    const ce = await subscribe(sc.base, 'topic=b2&format=cloudevents');
    const bytes = Buffer.from([0, 1, 2, 0xff, 0x7b]);
    const r = await post(`${sc.base}/broker?topic=b2`, { 'ce-specversion': '1.0', 'ce-id': 'img-1', 'ce-source': '/cam', 'ce-type': 'photo', 'content-type': 'image/png' }, bytes);
    assert.equal(r.status, 200, r.text);
    await waitFor(() => ce.texts.length === 1, 10_000);
    const e = ce.frames()[0]!;
    assert.equal(e.datacontenttype, 'image/png');
    assert.equal(e.data_base64, bytes.toString('base64'));
    assert.equal(e.data, undefined);
    assert.match(e.time, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/, 'no ce-time: the publish time (Timestamp)');
    ce.ws.close();
  });

  it('plain publish: the CloudEvents subscriber gets the defaults', async () => {
    const ce = await subscribe(sc.base, 'topic=orders.eu&format=cloudevents');
    const r1 = await post(`${sc.base}/broker?topic=orders.eu`, { 'content-type': 'text/plain', timestamp: '1499951537', 'mesh-id': 'm-42', region: 'eu' }, 'Hello World!');
    assert.equal(r1.status, 200, r1.text);
    const r2 = await post(`${sc.base}/broker?topic=orders.eu`, { 'content-type': 'application/json', timestamp: '1499951538' }, '[1,"two"]');
    assert.equal(r2.status, 200, r2.text);
    await waitFor(() => ce.texts.length === 2, 10_000);
    const [a, b] = ce.frames();
    const { traceparent: _t, ...rest } = a!;
    assert.deepEqual(rest, {
      specversion: '1.0',
      id: 'm-42',
      source: 'mesh://orders.eu',
      type: 'mesh.message',
      time: '2017-07-13T13:12:17Z',
      datacontenttype: 'text/plain',
      region: 'eu',
      data_base64: Buffer.from('Hello World!').toString('base64'),
    });
    assert.match(b!.id, /^[0-9a-f-]{36}$/, 'no Mesh-Id: a fresh UUID');
    assert.equal(b!.time, '2017-07-13T13:12:18Z');
    assert.deepEqual(b!.data, [1, 'two']);
    ce.ws.close();
  });

  it('bad CloudEvents get 400 error JSON and are not published', async () => {
    const plain = await subscribe(sc.base, 'topic=bad');
    const cases: Array<[Record<string, string>, string, string]> = [
      [{ 'content-type': 'application/cloudevents+json' }, '{"specversion":"1.0","source":"s","type":"t"}', 'cloudevents: id is required (a non-empty string)'],
      [{ 'content-type': 'application/cloudevents+json' }, '{"specversion":"0.3","id":"x","source":"s","type":"t"}', 'cloudevents: specversion must be \\"1.0\\"'],
      [{ 'content-type': 'application/cloudevents+json' }, '{oops', 'cloudevents: the body is not valid JSON'],
      [{ 'content-type': 'application/cloudevents+json' }, '"x"', 'cloudevents: the body must be a JSON object'],
      [{ 'ce-specversion': '1.0', 'ce-source': 's', 'ce-type': 't' }, 'd', 'cloudevents: ce-id is required (a non-empty string)'],
      [{ 'ce-specversion': '0.3', 'ce-id': 'x', 'ce-source': 's', 'ce-type': 't' }, 'd', 'cloudevents: ce-specversion must be \\"1.0\\"'],
      [{ 'ce-specversion': '1.0', 'ce-id': 'x', 'ce-source': 's', 'ce-type': 't', 'ce-time': 'yesterday' }, 'd', 'cloudevents: ce-time must be an RFC 3339 timestamp'],
    ];
    for (const [headers, body, detail] of cases) {
      const r = await post(`${sc.base}/broker?topic=bad`, headers, body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.text, `{"id":"go.mesh.sidecar","code":400,"detail":"${detail}","status":"Bad Request"}`);
    }
    const ok = await post(`${sc.base}/broker?topic=bad`, { 'content-type': 'text/plain' }, 'marker');
    assert.equal(ok.status, 200);
    await waitFor(() => plain.texts.length >= 1, 10_000);
    assert.deepEqual(plain.frames().map((f) => Buffer.from(f.Body, 'base64').toString()), ['marker'], 'nothing of the bad ones was published');
    plain.ws.close();
  });

  it('refuses a bad format with 400', async () => {
    const ws = sc.base.replace(/^http/, 'ws');
    const bad = await refusedHandshake(`${ws}/broker?topic=t&format=json`);
    assert.equal(bad.status, 400);
    assert.equal(bad.body, '{"id":"go.mesh.sidecar","code":400,"detail":"format: must be cloudevents (or absent for mesh frames), got \\"json\\"","status":"Bad Request"}');
    const twice = await refusedHandshake(`${ws}/broker?topic=t&format=cloudevents&format=cloudevents`);
    assert.equal(twice.status, 400);
    assert.equal(twice.body, '{"id":"go.mesh.sidecar","code":400,"detail":"format: given more than once","status":"Bad Request"}');
  });

  it('ack=1 with format=cloudevents: {"Id","MessageId","Deliveries","Event"} frames, acked and nacked as usual', async () => {
    const sub = await subscribe(sc.base, 'topic=acked&ack=1&durable=ce1&format=cloudevents');
    const r = await post(`${sc.base}/broker?topic=acked`, { 'ce-specversion': '1.0', 'ce-id': 'a-1', 'ce-source': '/s', 'ce-type': 't', 'content-type': 'text/plain' }, 'once');
    assert.equal(r.status, 200, r.text);
    await waitFor(() => sub.texts.length === 1, 10_000);
    const first = sub.frames()[0]!;
    assert.deepEqual(Object.keys(first), ['Id', 'MessageId', 'Deliveries', 'Event']);
    assert.equal(first.MessageId, 'a-1');
    assert.equal(first.Deliveries, 1);
    assert.equal(first.Event.id, 'a-1');
    assert.equal(first.Event.source, '/s');
    assert.equal(first.Event.data_base64, Buffer.from('once').toString('base64'));
    sub.ws.send(JSON.stringify({ nack: first.Id }));
    await waitFor(() => sub.texts.length === 2, 10_000);
    const second = sub.frames()[1]!;
    assert.equal(second.Deliveries, 2);
    assert.equal(second.Event.id, 'a-1', 'the same event on redelivery');
    assert.notEqual(second.Id, first.Id);
    sub.ws.send(JSON.stringify({ ack: second.Id }));
    // Acked: a new connection of the same name gets only what comes next.
    sub.ws.close();
    await sub.closed;
    const again = await subscribe(sc.base, 'topic=acked&ack=1&durable=ce1&format=cloudevents');
    const r2 = await post(`${sc.base}/broker?topic=acked`, { 'content-type': 'application/cloudevents+json' }, '{"specversion":"1.0","id":"a-2","source":"/s","type":"t","data":"hi"}');
    assert.equal(r2.status, 200, r2.text);
    await waitFor(() => again.texts.length >= 1, 10_000);
    assert.equal(again.texts[0], `{"Id":1,"MessageId":"a-2","Deliveries":1,"Event":{"specversion":"1.0","id":"a-2","source":"/s","type":"t","data":"hi"}}`);
    again.ws.send(JSON.stringify({ ack: 1 }));
    again.ws.close();
    await again.closed;
  });

  it("the gateway's event handler → a sidecar CloudEvents subscriber: CloudEvents and plain events", async () => {
    const ce = await subscribe(sc.base, 'topic=go.mesh.api.orders&format=cloudevents');
    // The gateway (another process) learns of the subscriber through the registry.
    await waitFor(async () => {
      const r = await post(`${gwBase}/orders/probe`, { 'content-type': 'text/plain' }, 'probe');
      assert.equal(r.status, 200, r.text);
      return ce.texts.length > 0;
    }, 15_000, 200);
    const skip = ce.texts.length;
    const s = await post(`${gwBase}/orders/created`, { 'content-type': 'application/cloudevents+json' }, STRUCTURED);
    assert.equal(s.status, 200, s.text);
    const b = await post(`${gwBase}/orders/paid`, { 'ce-specversion': '1.0', 'ce-id': 'gw-2', 'ce-source': '/gw', 'ce-type': 'paid', 'content-type': 'application/json' }, '{"ok":true}');
    assert.equal(b.status, 200, b.text);
    await waitFor(() => ce.texts.length >= skip + 2, 10_000);
    const got = ce.texts.slice(skip);
    assert.equal(got.find((t) => t.includes('"ord-1"')), STRUCTURED);
    const paid = JSON.parse(got.find((t) => t.includes('"gw-2"'))!) as Json;
    assert.equal(paid.source, '/gw');
    assert.equal(paid.type, 'paid');
    assert.deepEqual(paid.data, { ok: true });
    // A plain gateway event: the Event JSON is the data, the gateway's id the event id.
    const probe = JSON.parse(ce.texts[0]!) as Json;
    assert.equal(probe.type, 'mesh.message');
    assert.equal(probe.source, 'mesh://go.mesh.api.orders');
    assert.equal(probe.datacontenttype, 'application/json');
    assert.equal(probe.data.name, 'probe');
    assert.equal(probe.data.data, 'probe');
    assert.equal(probe.id, probe.data.id);
    ce.ws.close();
  });
});

describe('messageCloudEvent: messages that no front end would publish', () => {
  const msg = (header: Record<string, string>, body: string) => ({ header, body: Buffer.from(body) });
  it('an invalid structured event, a binary one with a bad specversion, an empty body, a Timestamp out of range', () => {
    const bad = '{"specversion":"1.0","id":"x"}';
    assert.equal(
      messageCloudEvent(msg({ 'Content-Type': 'application/cloudevents+json', 'Mesh-Id': 'm1' }, bad), 'a b/c'),
      `{"specversion":"1.0","id":"m1","source":"mesh://a%20b%2Fc","type":"mesh.message","datacontenttype":"application/cloudevents+json","data":${bad}}`,
    );
    assert.equal(
      messageCloudEvent(msg({ 'ce-specversion': '0.3', 'ce-id': 'x', 'ce-source': 's', 'ce-type': 't', 'mesh-id': 'm2', timestamp: '99999999999999' }, ''), 't'),
      '{"specversion":"1.0","id":"m2","source":"mesh://t","type":"mesh.message"}',
    );
    assert.equal(
      messageCloudEvent({ ...msg({ 'ce-specversion': '1.0', 'ce-id': 'e1', 'ce-source': 's', 'ce-type': 't', 'ce-bad-name': 'v', 'content-type': 'application/json' }, '{"a":'), id: 'other' }, 't'),
      `{"specversion":"1.0","id":"e1","source":"s","type":"t","datacontenttype":"application/json","data_base64":"${Buffer.from('{"a":').toString('base64')}"}`,
    );
  });
});
