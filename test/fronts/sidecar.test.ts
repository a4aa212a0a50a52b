/**
 * `mesh sidecar` as a real process on loopback with the local registry: /registry, RPC to a plain
 * node:http app through /<service>/<method> and /rpc, the broker over HTTP and WebSocket, the CLI
 * through --proxy_address, bad input, /stats, CORS and origin checks, and a slow subscriber.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { once } from 'node:events';
import { WebSocket } from 'ws';
import { runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import {
  http,
  postJson,
  refusedHandshake,
  startPlainApp,
  startSidecar,
  subscribe,
  flushTopic,
  MARKER,
  type Subscriber,
  type ErrorJson,
  type PlainApp,
  type SidecarProcess,
} from '../fixtures/sidecar-common.js';

const ORIGIN = 'http://app.example';

describe('sidecar', () => {
  const home = tempDir('mesh-sidecar-');
  let sc: SidecarProcess;
  let app: PlainApp;
  const reg = (name: string, port: number, id = `${name}-1`) => ({ Name: name, Nodes: [{ Id: id, Address: '127.0.0.1', Port: port }] });

  before(async () => {
    [sc, app] = await Promise.all([startSidecar(home.path, ['--enable_stats', `--cors=${ORIGIN}`, '--max_body_size=4MiB']), startPlainApp()]);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    await app?.close();
    home.cleanup();
  });

  it('answers GET / with its version', async () => {
    const r = await http('GET', `${sc.base}/`);
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    const body = r.json<{ version: string; handler: string; namespace: string }>();
    assert.match(body.version, /^\d+\.\d+\.\d+/);
    assert.equal(body.handler, 'rpc');
    assert.equal(body.namespace, 'go.mesh.srv');
  });

  it('registers, looks up (SPEC 2.6 shape) and deregisters; keys match case-insensitively', async () => {
    const r = await postJson(`${sc.base}/registry`, { name: 'go.mesh.srv.shape', NODES: [{ id: 'shape-1', ADDRESS: '127.0.0.1', port: 7001 }] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.text, '{}');
    await postJson(`${sc.base}/registry`, { Name: 'go.mesh.srv.shape', Version: '2', Nodes: [{ Id: 'shape-2', Address: '127.0.0.2', Port: 7002 }] });
    const g = await http('GET', `${sc.base}/registry?service=go.mesh.srv.shape`);
    assert.equal(g.status, 200);
    assert.equal(g.headers['content-type'], 'application/json');
    const svc = g.json<{ name: string; nodes: Array<{ id: string; address: string; port: number }> }>();
    assert.equal(svc.name, 'go.mesh.srv.shape');
    assert.deepEqual(
      svc.nodes.map((n) => ({ id: n.id, address: n.address, port: n.port })).sort((a, b) => a.id.localeCompare(b.id)),
      [
        { id: 'shape-1', address: '127.0.0.1', port: 7001 },
        { id: 'shape-2', address: '127.0.0.2', port: 7002 },
      ],
      'one object with the nodes of every version',
    );
    const d = await http('DELETE', `${sc.base}/registry`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify(reg('go.mesh.srv.shape', 7001, 'shape-1')) });
    assert.equal(d.status, 200, d.text);
    const after1 = await http('GET', `${sc.base}/registry?service=go.mesh.srv.shape`);
    assert.deepEqual(after1.json<{ nodes: Array<{ id: string }> }>().nodes.map((n) => n.id), ['shape-2']);
    await http('DELETE', `${sc.base}/registry`, { headers: { 'content-type': 'application/json' }, body: JSON.stringify(reg('go.mesh.srv.shape', 7002, 'shape-2')) });
    const gone = await http('GET', `${sc.base}/registry?service=go.mesh.srv.shape`);
    assert.equal(gone.status, 404);
    assert.deepEqual(gone.json(), { id: 'go.mesh.sidecar', code: 404, detail: 'service go.mesh.srv.shape: not found', status: 'Not Found' });
  });

  it('a registration with ttl=1s disappears once its TTL ran out, not before', async () => {
    const registered = Date.now();
    const r = await postJson(`${sc.base}/registry?ttl=1s`, reg('go.mesh.srv.brief', 7010));
    assert.equal(r.status, 200, r.text);
    assert.equal((await http('GET', `${sc.base}/registry?service=go.mesh.srv.brief`)).status, 200);
    await waitFor(async () => (await http('GET', `${sc.base}/registry?service=go.mesh.srv.brief`)).status === 404, 5000, 50);
    // A lower bound only (a timer never fires early): how soon after the TTL is not a test's business.
    assert.ok(Date.now() - registered >= 1000, 'not gone before its TTL');
  });

  it('lists services sorted as [{"name":..}]; the CLI prints them through --proxy_address', async () => {
    await postJson(`${sc.base}/registry`, reg('zz.last', 7020));
    await postJson(`${sc.base}/registry`, reg('aa.first', 7021));
    const r = await http('GET', `${sc.base}/registry`);
    assert.equal(r.status, 200);
    const list = r.json<Array<{ name: string }>>();
    const names = list.map((s) => s.name);
    assert.deepEqual(names, [...names].sort());
    assert.ok(names.includes('aa.first') && names.includes('zz.last'));
    for (const entry of list) assert.deepEqual(Object.keys(entry), ['name']);

    const proxy = `--proxy_address=127.0.0.1:${sc.port}`;
    // (CLI processes are slow to start on a busy machine: only the ones that show something new)
    const [cli, get, regCli] = await Promise.all([
      runCli([proxy, 'list', 'services'], { MESH_REGISTRY_ADDRESS: '/nonexistent-not-used' }),
      runCli([proxy, 'get', 'service', 'aa.first', '--output=json']),
      runCli([proxy, 'register', 'service', JSON.stringify(reg('go.mesh.srv.viacli', 7022))]),
    ]);
    assert.equal(cli.code, 0, cli.stderr);
    // (the register runs alongside, so its name may or may not be listed yet)
    const printed = cli.stdout.split('\n').filter((n) => n !== 'go.mesh.srv.viacli');
    assert.equal(printed.join('\n'), names.map((n) => n + '\n').join(''));
    assert.ok(cli.stdout.endsWith('\n'));
    assert.equal(get.code, 0, get.stderr);
    assert.equal(JSON.parse(get.stdout).nodes[0].port, 7021);
    assert.equal(regCli.code, 0, regCli.stderr);
    const viaCli = await http('GET', `${sc.base}/registry?service=go.mesh.srv.viacli`);
    assert.equal(viaCli.status, 200, 'the CLI\'s register body is accepted');
    assert.equal(viaCli.json<{ nodes: Array<{ port: number }> }>().nodes[0]!.port, 7022);
  });

  it('calls a plain node:http app through /<service>/<method>, /rpc (object and string) and the CLI', async () => {
    const r0 = await postJson(`${sc.base}/registry`, reg('go.mesh.srv.plain', app.port));
    assert.equal(r0.status, 200, r0.text);

    const before1 = app.seen.length;
    const r = await postJson(`${sc.base}/plain/echo`, { name: 'John' }, { 'x-trace': 'abc' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.deepEqual(r.json(), { service: 'go.mesh.srv.plain', endpoint: 'Plain.Echo', method: 'POST', url: '/', got: { name: 'John' } });
    const seen = app.seen[before1]!;
    assert.equal(seen.headers['content-type'], 'application/json');
    assert.equal(seen.headers['x-trace'], 'abc', 'end-to-end headers travel as metadata');
    assert.ok(seen.headers['mesh-id'], 'a request id');

    const deep = await postJson(`${sc.base}/plain/get-user`, {});
    assert.equal(deep.json<{ endpoint: string }>().endpoint, 'Plain.GetUser');

    const asObject = await postJson(`${sc.base}/rpc`, { service: 'go.mesh.srv.plain', method: 'Plain.Echo', request: { n: 1 } });
    assert.equal(asObject.status, 200, asObject.text);
    assert.deepEqual(asObject.json<{ got: unknown }>().got, { n: 1 });
    const asString = await postJson(`${sc.base}/rpc`, { service: 'go.mesh.srv.plain', endpoint: 'Plain.Echo', request: '{"n":2}' });
    assert.equal(asString.status, 200, asString.text);
    assert.deepEqual(asString.json<{ got: unknown; endpoint: string }>(), { service: 'go.mesh.srv.plain', endpoint: 'Plain.Echo', method: 'POST', url: '/', got: { n: 2 } });
    const asForm = await http('POST', `${sc.base}/rpc`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ service: 'go.mesh.srv.plain', method: 'Plain.Echo', request: '{"n":3}' }).toString(),
    });
    assert.equal(asForm.status, 200, asForm.text);
    assert.deepEqual(asForm.json<{ got: unknown }>().got, { n: 3 });

    const cli = await runCli([`--proxy_address=127.0.0.1:${sc.port}`, 'call', 'go.mesh.srv.plain', 'Plain.Echo', '{"n":4}', '--output=json']);
    assert.equal(cli.code, 0, cli.stderr);
    assert.deepEqual(JSON.parse(cli.stdout).got, { n: 4 });

    const unknown = await postJson(`${sc.base}/nosuch/thing`, {});
    assert.equal(unknown.status, 404);
    assert.equal(unknown.json<ErrorJson>().detail, 'service go.mesh.srv.nosuch: not found');
  });

  it('broker: a plain subscriber gets all 100 messages, a queue pair shares 100 with none twice', async () => {
    const [q1, q2, all] = await Promise.all([subscribe(sc.base, 'orders', 'workers'), subscribe(sc.base, 'orders', 'workers'), subscribe(sc.base, 'orders')]);
    for (let i = 0; i < 100; i++) {
      const r = await http('POST', `${sc.base}/broker?topic=orders`, { headers: { 'content-type': 'text/plain' }, body: `m-${i}` });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.text, '{}');
    }
    await waitFor(() => all.frames.length >= 100 && q1.frames.length + q2.frames.length >= 100, 10000, 20);
    await flushTopic(sc.base, 'orders', [q1, q2, all]); // nothing more is on its way
    const real = (s: Subscriber) => s.bodies().filter((b) => b !== MARKER);
    const expected = Array.from({ length: 100 }, (_, i) => `m-${i}`).sort();
    assert.deepEqual([...real(all)].sort(), expected);
    const shared = [...real(q1), ...real(q2)];
    assert.equal(shared.length, 100, 'the queue group got each message once');
    assert.deepEqual([...shared].sort(), expected);
    assert.ok(q1.frames.length > 0 && q2.frames.length > 0, `both members got some (${q1.frames.length}/${q2.frames.length})`);
    const f = all.frames[0]!;
    assert.deepEqual(Object.keys(f), ['Header', 'Body']);
    assert.equal(f.Header['Content-Type'], 'text/plain');
    assert.match(f.Header['Timestamp']!, /^\d+$/);
    for (const s of [q1, q2, all]) s.ws.close();
    await Promise.all([q1.closed, q2.closed, all.closed]);
    // Closing releases the subscriptions in the broker (the http broker's registry entries go).
    await waitFor(async () => (await http('GET', `${sc.base}/registry?service=topic:orders`)).status === 404, 3000, 50);
  });

  it('broker: a form-encoded body arrives intact with its headers; Timestamp is kept or set', async () => {
    const sub = await subscribe(sc.base, 'forms');
    const form = 'name=J%C3%B6rg&note=two+words%21&empty=';
    const r = await http('POST', `${sc.base}/broker?topic=forms`, {
      headers: { 'content-type': 'application/x-www-form-urlencoded', timestamp: '1499951537', 'x-custom': 'yes', 'x_trace.id': '7', authorization: 'Bearer secret' },
      body: form,
    });
    assert.equal(r.status, 200, r.text);
    const before1 = Math.floor(Date.now() / 1000);
    await http('POST', `${sc.base}/broker?topic=forms`, { body: Buffer.from([0, 1, 2, 255]) });
    await waitFor(() => sub.frames.length >= 2, 5000, 20);
    const [first, second] = sub.frames;
    assert.equal(Buffer.from(first!.Body, 'base64').toString('utf8'), form);
    assert.equal(first!.Header['Content-Type'], 'application/x-www-form-urlencoded');
    assert.equal(first!.Header['Timestamp'], '1499951537');
    assert.equal(first!.Header['X-Custom'], 'yes');
    assert.equal(first!.Header['X_trace.id'], '7', "names are canonical as Go writes them (src/core/transport/headers.ts)");
    assert.equal(first!.Header['Authorization'], undefined, 'credentials are not forwarded to subscribers');
    assert.deepEqual([...Buffer.from(second!.Body, 'base64')], [0, 1, 2, 255]);
    assert.ok(Math.abs(Number(second!.Header['Timestamp']) - before1) <= 2);
    sub.ws.close();
  });

  it('broker: every subscriber gets the same bytes, in the same order; equal bodies under other headers get their own frame', async () => {
    const url = `${sc.base.replace(/^http/, 'ws')}/broker?topic=bytes`;
    const subs = await Promise.all(
      [0, 1, 2].map(async () => {
        const ws = new WebSocket(url);
        const raw: Array<{ text: string; binary: boolean }> = [];
        ws.on('message', (data: Buffer, binary: boolean) => raw.push({ text: data.toString('utf8'), binary }));
        await once(ws, 'open');
        return { ws, raw };
      }),
    );
    const send = (body: string, n: string) =>
      http('POST', `${sc.base}/broker?topic=bytes`, { headers: { 'content-type': 'text/plain', timestamp: '1000', 'x-n': n }, body });
    for (const [body, n] of [['x', '1'], ['x', '2'], ['x', '2'], ['y', '2'], ['ü✓', '2']] as const) assert.equal((await send(body, n)).status, 200);
    // a burst: frames written in one turn leave together; each is still one WebSocket message
    const burst = await Promise.all(Array.from({ length: 50 }, (_, i) => send(`b-${i}`, '3')));
    assert.ok(burst.every((r) => r.status === 200));
    await waitFor(() => subs.every((s) => s.raw.length >= 55), 5000, 20);
    // a marker last: frames come in order, so once each has it nothing more is on its way; then drop it
    assert.equal((await send('marker', '9')).status, 200);
    const isMarker = (f: { text: string }) => (JSON.parse(f.text) as { Header: Record<string, string> }).Header['X-N'] === '9';
    await waitFor(() => subs.every((s) => s.raw.some(isMarker)), 5000, 20);
    for (const s of subs) s.raw.splice(s.raw.findIndex(isMarker), 1);
    const [first, ...others] = subs.map((s) => s.raw);
    for (const o of others) assert.deepEqual(o, first, 'byte for byte, same order');
    assert.equal(first!.length, 55);
    assert.ok(first!.every((f) => !f.binary), 'text frames');
    const frames = first!.map((f) => JSON.parse(f.text) as { Header: Record<string, string>; Body: string });
    first!.forEach((f, i) => assert.equal(f.text, JSON.stringify(frames[i]), 'compact JSON, Header then Body'));
    assert.deepEqual(frames.slice(0, 5).map((f) => [Buffer.from(f.Body, 'base64').toString('utf8'), f.Header['X-N'], f.Header['Timestamp']]), [
      ['x', '1', '1000'],
      ['x', '2', '1000'],
      ['x', '2', '1000'],
      ['y', '2', '1000'],
      ['ü✓', '2', '1000'],
    ]);
    // Each publish is a hop of its own trace (a new span id in its Traceparent); otherwise equal messages give equal frames.
    const untraced = frames.map((f) => {
      assert.match(f.Header['Traceparent']!, /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
      const { Traceparent: _t, ...header } = f.Header;
      return JSON.stringify({ Header: header, Body: f.Body });
    });
    assert.notEqual(untraced[0], untraced[1]);
    assert.equal(untraced[1], untraced[2]);
    assert.deepEqual(
      frames.slice(5).map((f) => Buffer.from(f.Body, 'base64').toString('utf8')).sort(),
      Array.from({ length: 50 }, (_, i) => `b-${i}`).sort(),
    );
    for (const s of subs) s.ws.close();
  });

  it('broker: frames a subscriber sends are published to the topic, not echoed to it', async () => {
    const [talker, listener] = await Promise.all([subscribe(sc.base, 'chat'), subscribe(sc.base, 'chat')]);
    talker.ws.send('hello from ws');
    await waitFor(() => listener.frames.length >= 1, 5000, 20);
    assert.equal(listener.bodies()[0], 'hello from ws');
    assert.equal(listener.frames[0]!.Header['Content-Type'], 'text/plain');
    // a marker last: an echo of the frame would have reached talker before it
    await flushTopic(sc.base, 'chat', [talker]);
    assert.deepEqual(talker.bodies(), [MARKER]);
    talker.ws.close();
    listener.ws.close();
  });

  it('every bad input gets its 4xx and the sidecar keeps serving', async () => {
    const json = { 'content-type': 'application/json' };
    const cases: Array<{ name: string; send: () => Promise<{ status: number; text: string }>; status: number; detail: RegExp }> = [
      { name: 'missing Name', send: () => postJson(`${sc.base}/registry`, { Nodes: [{ Id: 'a', Address: 'h', Port: 1 }] }), status: 400, detail: /^Name: / },
      { name: 'no nodes', send: () => postJson(`${sc.base}/registry`, { Name: 'x' }), status: 400, detail: /^Nodes: / },
      { name: 'empty nodes', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [] }), status: 400, detail: /^Nodes: / },
      { name: 'empty Address', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: '', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Address: / },
      { name: 'empty Id', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: '', Address: 'h', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Id: / },
      { name: 'Port 0', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h', Port: 0 }] }), status: 400, detail: /^Nodes\[0\]\.Port: / },
      { name: 'Port 65536', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h', Port: 65536 }] }), status: 400, detail: /^Nodes\[0\]\.Port: / },
      { name: 'Port a string', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h', Port: '80' }] }), status: 400, detail: /^Nodes\[0\]\.Port: / },
      { name: 'Port 1.5', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h', Port: 1.5 }] }), status: 400, detail: /^Nodes\[0\]\.Port: / },
      { name: 'Address with a space', send: () => postJson(`${sc.base}/registry`, { Name: 'go.mesh.srv.greeter', Nodes: [{ Id: 'x', Address: '127.0.0.1 x', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Address: "127\.0\.0\.1 x" is not an IPv4 address/ },
      { name: 'Address a URL', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'http://127.0.0.1/', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Address: / },
      { name: 'Address with a port', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h:80', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Address: / },
      { name: 'Name with a newline', send: () => postJson(`${sc.base}/registry`, { Name: 'x\ny', Nodes: [{ Id: 'a', Address: 'h', Port: 1 }] }), status: 400, detail: /^Name: "x\\ny" is not a valid service name/ },
      { name: 'Name with NUL', send: () => postJson(`${sc.base}/registry`, { Name: 'x\u0000', Nodes: [{ Id: 'a', Address: 'h', Port: 1 }] }), status: 400, detail: /^Name: / },
      { name: 'Name ../', send: () => postJson(`${sc.base}/registry`, { Name: 'a/../b', Nodes: [{ Id: 'a', Address: 'h', Port: 1 }] }), status: 400, detail: /^Name: / },
      { name: 'Id with a space', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a b', Address: 'h', Port: 1 }] }), status: 400, detail: /^Nodes\[0\]\.Id: / },
      { name: 'Metadata with a control character', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: [{ Id: 'a', Address: 'h', Port: 1, Metadata: { k: 'a\rb' } }] }), status: 400, detail: /^Nodes\[0\]\.Metadata\.k: has a control character/ },
      { name: '1001 nodes', send: () => postJson(`${sc.base}/registry`, { Name: 'x', Nodes: Array.from({ length: 1001 }, (_, i) => ({ Id: `n${i}`, Address: 'h', Port: 1 })) }), status: 400, detail: /^Nodes: 1001 nodes in one request, more than the limit of 1000$/ },
      { name: 'bad ttl', send: () => postJson(`${sc.base}/registry?ttl=10parsecs`, reg('x', 1)), status: 400, detail: /^ttl: / },
      { name: 'zero ttl', send: () => postJson(`${sc.base}/registry?ttl=0s`, reg('x', 1)), status: 400, detail: /^ttl: / },
      { name: 'body not JSON', send: () => http('POST', `${sc.base}/registry`, { headers: json, body: '{"Name":' }), status: 400, detail: /^body: not valid JSON/ },
      { name: 'body a JSON array', send: () => http('POST', `${sc.base}/registry`, { headers: json, body: '[]' }), status: 400, detail: /^body: / },
      { name: 'empty body', send: () => http('POST', `${sc.base}/registry`, { headers: json, body: '' }), status: 400, detail: /^body: required/ },
      { name: 'form content type', send: () => http('POST', `${sc.base}/registry`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'Name=x' }), status: 415, detail: /Content-Type: application\/json/ },
      { name: 'form type with a JSON body', send: () => http('POST', `${sc.base}/registry`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: JSON.stringify(reg('x', 1)) }), status: 415, detail: /unsupported content type/ },
      { name: 'DELETE without nodes', send: () => http('DELETE', `${sc.base}/registry`, { headers: json, body: '{"Name":"x"}' }), status: 400, detail: /^Nodes: / },
      { name: 'unknown service', send: () => http('GET', `${sc.base}/registry?service=none.here`), status: 404, detail: /not found/ },
      { name: 'registry PATCH', send: () => http('PATCH', `${sc.base}/registry`), status: 405, detail: /PATCH not allowed/ },
      { name: 'publish without topic', send: () => http('POST', `${sc.base}/broker`, { body: 'x' }), status: 400, detail: /^topic: required/ },
      { name: 'publish with Timestamp abc', send: () => http('POST', `${sc.base}/broker?topic=t`, { headers: { timestamp: 'abc' }, body: 'x' }), status: 400, detail: /^Timestamp: must be an integer/ },
      { name: 'publish with Timestamp 1.5', send: () => http('POST', `${sc.base}/broker?topic=t`, { headers: { timestamp: '1.5' }, body: 'x' }), status: 400, detail: /^Timestamp: / },
      { name: 'topic with a space', send: () => http('POST', `${sc.base}/broker?topic=a%20b`, { body: 'x' }), status: 400, detail: /^topic: / },
      { name: 'GET /broker without upgrade', send: () => http('GET', `${sc.base}/broker?topic=t`), status: 426, detail: /WebSocket/ },
      { name: 'broker PUT', send: () => http('PUT', `${sc.base}/broker?topic=t`, { body: 'x' }), status: 405, detail: /not allowed/ },
      { name: 'body over --max_body_size', send: () => http('POST', `${sc.base}/broker?topic=t`, { body: Buffer.alloc(4 * 1024 * 1024 + 1) }), status: 413, detail: /larger than/ },
      { name: 'rpc not JSON', send: () => http('POST', `${sc.base}/rpc`, { headers: json, body: 'nope' }), status: 400, detail: /malformed JSON/ },
      { name: 'rpc without service', send: () => postJson(`${sc.base}/rpc`, { method: 'A.B' }), status: 400, detail: /^service: / },
      { name: 'rpc without method', send: () => postJson(`${sc.base}/rpc`, { service: 'x' }), status: 400, detail: /^method: / },
      { name: 'rpc request not JSON', send: () => postJson(`${sc.base}/rpc`, { service: 'x', method: 'A.B', request: '{' }), status: 400, detail: /^request: / },
      { name: 'rpc GET', send: () => http('GET', `${sc.base}/rpc`), status: 405, detail: /use POST/ },
      { name: 'rpc handler with a form', send: () => http('POST', `${sc.base}/plain/echo`, { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: 'a=1' }), status: 415, detail: /unsupported content type/ },
      { name: 'path with no method', send: () => http('GET', `${sc.base}/plain`), status: 404, detail: /names no service/ },
      { name: 'foreign Origin', send: () => http('POST', `${sc.base}/registry`, { headers: { ...json, origin: 'http://evil.example' }, body: JSON.stringify(reg('evil', 1)) }), status: 403, detail: /origin http:\/\/evil\.example not allowed/ },
    ];
    for (const c of cases) {
      const r = await c.send();
      assert.equal(r.status, c.status, `${c.name}: ${r.status} ${r.text}`);
      const e = JSON.parse(r.text) as ErrorJson;
      assert.deepEqual(Object.keys(e), ['id', 'code', 'detail', 'status'], c.name);
      assert.equal(e.code, c.status, c.name);
      assert.match(e.detail, c.detail, `${c.name}: ${e.detail}`);
    }
    const ws1 = await refusedHandshake(`${sc.base.replace('http', 'ws')}/broker`);
    assert.equal(ws1.status, 400);
    assert.match(ws1.body, /topic: required/);
    const ws2 = await refusedHandshake(`${sc.base.replace('http', 'ws')}/broker?topic=t`, { origin: 'http://evil.example' });
    assert.equal(ws2.status, 403);
    const ws3 = await refusedHandshake(`${sc.base.replace('http', 'ws')}/elsewhere`);
    assert.equal(ws3.status, 404);
    assert.equal((await http('GET', `${sc.base}/registry?service=x`)).status, 404, 'nothing invalid was registered');
    assert.equal((await http('GET', `${sc.base}/registry?service=go.mesh.srv.greeter`)).status, 404, 'nothing invalid was registered');
    // The exact answer to the registration that used to crash every watcher.
    const crash = await http('POST', `${sc.base}/registry`, { headers: json, body: '{"Name":"go.mesh.srv.greeter","Nodes":[{"Id":"x","Address":"127.0.0.1 x","Port":1}]}' });
    assert.equal(crash.status, 400);
    assert.equal(
      crash.text,
      '{"id":"go.mesh.sidecar","code":400,"detail":"Nodes[0].Address: \\"127.0.0.1 x\\" is not an IPv4 address, an IPv6 address or a host name (no scheme, path, port or spaces)","status":"Bad Request"}',
    );
    assert.equal((await http('GET', `${sc.base}/`)).status, 200, 'still serving');
  });

  it('CORS: an allowed origin gets the headers and preflights are answered', async () => {
    const pre = await http('OPTIONS', `${sc.base}/registry`, { headers: { origin: ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], ORIGIN);
    const r = await http('GET', `${sc.base}/registry`, { headers: { origin: ORIGIN } });
    assert.equal(r.status, 200);
    assert.equal(r.headers['access-control-allow-origin'], ORIGIN);
    const sub = await subscribe(sc.base, 'cors', undefined, { origin: ORIGIN });
    sub.ws.close();
    const same = await http('GET', `${sc.base}/registry`, { headers: { origin: sc.base } });
    assert.equal(same.status, 200, 'the sidecar\'s own origin is allowed');
  });

  it('/stats: JSON for Accept: application/json, HTML otherwise; its own requests are not counted', async () => {
    type Stats = { name: string; started: number; uptime: number; memory: { rss: number }; totals: Record<string, number>; extra: Record<string, number> };
    const a = await http('GET', `${sc.base}/stats`, { headers: { accept: 'application/json' } });
    assert.equal(a.status, 200);
    assert.equal(a.headers['content-type'], 'application/json');
    const s1 = a.json<Stats>();
    assert.equal(s1.name, 'mesh sidecar');
    assert.ok(s1.started > 1_600_000_000);
    assert.ok(s1.uptime >= 0);
    assert.ok(s1.memory.rss > 0);
    assert.ok(s1.totals['2xx']! > 0 && s1.totals['4xx']! > 0);
    assert.equal(typeof s1.extra.subscribers, 'number');
    const h = await http('GET', `${sc.base}/stats`);
    assert.match(String(h.headers['content-type']), /^text\/html/);
    assert.match(h.text, /<table id="clusters">/);
    assert.equal((await http('GET', `${sc.base}/stats/assets/dashboard.js`)).status, 200);
    const s2 = (await http('GET', `${sc.base}/stats?format=json`)).json<Stats>();
    assert.equal(s2.totals.total, s1.totals.total, 'requests to /stats and its assets are not counted');
    await http('GET', `${sc.base}/`);
    const s3 = (await http('GET', `${sc.base}/stats`, { headers: { accept: 'application/json' } })).json<Stats>();
    assert.equal(s3.totals.total, s1.totals.total + 1);
    const admin = await http('GET', `${sc.admin}/stats?filter=${encodeURIComponent('^http\\.sidecar\\.downstream_rq_(total|2xx|4xx|5xx)$')}`);
    assert.equal(
      admin.text,
      `http.sidecar.downstream_rq_2xx: ${s3.totals['2xx']}\nhttp.sidecar.downstream_rq_4xx: ${s3.totals['4xx']}\nhttp.sidecar.downstream_rq_5xx: ${s3.totals['5xx']}\nhttp.sidecar.downstream_rq_total: ${s3.totals.total}\n`,
      'the same counters as admin /stats',
    );
  });

  it('a slow WebSocket subscriber is dropped with 1013 and released, instead of growing memory', async () => {
    const slow = await subscribe(sc.base, 'firehose');
    const socket = (slow.ws as unknown as { _socket: Socket })._socket;
    socket.pause(); // never reads
    const chunk = Buffer.alloc(3 * 1024 * 1024, 'x');
    let sent = 0;
    const released = async () => (await http('GET', `${sc.base}/registry?service=topic:firehose`)).status === 404;
    while (!(await released())) {
      assert.ok(sent < 40, `still subscribed after ${sent} messages of 3 MiB`);
      const r = await http('POST', `${sc.base}/broker?topic=firehose`, { body: chunk });
      assert.equal(r.status, 200, r.text);
      sent++;
    }
    socket.resume();
    const closed = await slow.closed;
    assert.equal(closed.code, 1013);
    assert.match(closed.reason, /too slow/);
    assert.ok(slow.frames.length < sent, `got ${slow.frames.length} of ${sent} before the close`);
    // The sidecar is fine and counted the drop.
    const stats = await http('GET', `${sc.admin}/stats?filter=sidecar.broker.subscribers_dropped_slow`);
    assert.match(stats.text, /sidecar\.broker\.subscribers_dropped_slow: [1-9]/);
    assert.equal((await http('GET', `${sc.base}/`)).status, 200);
  });

  it('CLI publish/subscribe through the sidecar; SIGTERM ends subscriptions with 1001 and exits 0', async () => {
    const proxy = `--proxy_address=127.0.0.1:${sc.port}`;
    const cliSub = startProcess([proxy, 'subscribe', 'cli-topic']);
    const wsSub = await subscribe(sc.base, 'cli-topic');
    try {
      await cliSub.waitForOutput(/subscribed to cli-topic/, 20000);
      const pub = await runCli([proxy, 'publish', 'cli-topic', 'hello', 'there']);
      assert.equal(pub.code, 0, pub.stderr);
      await cliSub.waitForOutput(/hello there\n/, 10000);
      await waitFor(() => wsSub.frames.length === 1, 5000, 20);
      assert.equal(wsSub.bodies()[0], 'hello there');
      assert.equal(wsSub.frames[0]!.Header['Content-Type'], 'text/plain');

      const code = await sc.stop('SIGTERM');
      assert.equal(code, 0, sc.proc.output());
      const closed = await wsSub.closed;
      assert.equal(closed.code, 1001);
      const cliCode = await new Promise<number | null>((resolve) => {
        if (cliSub.child.exitCode !== null) resolve(cliSub.child.exitCode);
        else cliSub.child.once('exit', (c) => resolve(c));
      });
      assert.equal(cliCode, 1, cliSub.output());
      assert.match(cliSub.output(), /subscription to cli-topic ended: WebSocket closed with 1001/);
    } finally {
      await cliSub.stop('SIGKILL');
    }
  });
});
