/**
 * Native gRPC calls tried again after a node's status (--grpc_retry_on, docs/grpc.md "Retries of native gRPC calls"),
 * through `mesh api --enable_http2` (and `mesh sidecar`, `mesh proxy` with a GRPCRoute) with the
 * default --client_retries=1: an @grpc/grpc-js client
 * calls plain @grpc/grpc-js nodes (test/fixtures/grpc-greeter.ts), one of which answers every
 * SayHello and Collect with UNAVAILABLE (`--status=14`). Retried only when safe: a status of the
 * list, before any message of the answer, the whole request held (64 KiB at most), within the
 * deadline; counted in `upstream_rq_retry` and the method's `.retry`. Also the node's
 * `traceparent`: this hop's, not the client's.
 *
 * Each case calls a mesh service of its own (named by `mesh-service`), so that the outlier
 * detection of one does not change the balancing of another; with two nodes, round robin sends
 * consecutive first tries to each in turn.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { grpcWebFrame, grpcWebFrames } from '../../src/edge/handlers/grpc-web.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const def = protoLoader.loadSync(join(ROOT, 'test/fixtures/grpc/greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const Greeter = (grpc.loadPackageDefinition(def) as any).helloworld.Greeter;

type Reply = { message: string; server: string };
type Outcome = { ok: true; reply: Reply } | { ok: false; code: number; details: string };

function metadata(service: string, more: Record<string, string> = {}): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set('mesh-service', `go.mesh.srv.${service}`);
  for (const [k, v] of Object.entries(more)) md.set(k, v);
  return md;
}

function unary(client: any, method: string, request: object, md: grpc.Metadata): Promise<Outcome> {
  return new Promise((resolve) =>
    client[method](request, md, (err: grpc.ServiceError | null, reply: Reply) => resolve(err ? { ok: false, code: err.code, details: err.details } : { ok: true, reply })),
  );
}

/** A client stream of `names`: its one answer. */
function collect(client: any, names: string[], md: grpc.Metadata): Promise<Outcome> {
  return new Promise((resolve) => {
    const call = client.Collect(md, (err: grpc.ServiceError | null, reply: Reply) => resolve(err ? { ok: false, code: err.code, details: err.details } : { ok: true, reply }));
    for (const name of names) call.write({ name });
    call.end();
  });
}

/** A server stream: the messages it got, and its status. */
function count(client: any, request: object, md: grpc.Metadata): Promise<{ messages: string[]; code: number }> {
  return new Promise((resolve) => {
    const messages: string[] = [];
    const call = client.Count(request, md);
    call.on('data', (r: Reply) => messages.push(r.message));
    call.on('error', (err: grpc.ServiceError) => resolve({ messages, code: err.code }));
    call.on('end', () => resolve({ messages, code: 0 }));
  });
}

const lines = (proc: RunningProcess, re: RegExp): string[] => proc.output().match(new RegExp(re.source, 'gm')) ?? [];

describe('native gRPC: retries on a status (--grpc_retry_on) through mesh api --enable_http2', () => {
  const dir = tempDir('mesh-grpc-retry-');
  let bad: RunningProcess;
  let ok: RunningProcess;
  let ok2: RunningProcess;
  let registry: Registry;
  let gw: GatewayProcess;
  let client: any;

  /** A counter of the gateway's /stats (0 before it exists). */
  const counter = async (name: string): Promise<number> => {
    const text = (await http('GET', `${gw.admin}/stats?filter=${encodeURIComponent(`^${name.replace(/[.|]/g, '\\$&')}$`)}`)).text;
    const m = new RegExp(`^${name.replace(/[.|]/g, '\\$&')}: (\\d+)$`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  };
  const retries = (service: string) => counter(`cluster.go.mesh.srv.${service}.upstream_rq_retry`);
  const methodStat = (service: string, method: string, stat: string) => counter(`cluster.go.mesh.srv.${service}.grpc.helloworld.Greeter.${method}.${stat}`);

  before(async () => {
    bad = startProcess(['--import', 'tsx', GREETER, '--label=bad', '--status=14'], {}, '');
    ok = startProcess(['--import', 'tsx', GREETER, '--label=ok'], {}, '');
    ok2 = startProcess(['--import', 'tsx', GREETER, '--label=ok2'], {}, '');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [pBad, pOk, pOk2] = await Promise.all([bad.waitForPort(re), ok.waitForPort(re), ok2.waitForPort(re)]);
    registry = createRegistry('local', join(dir.path, 'registry'));
    const node = (id: string, port: number) => ({ id, address: '127.0.0.1', port, metadata: { protocol: 'grpc' } });
    const service = (name: string, nodes: Array<[string, number]>) => registry.register({ name: `go.mesh.srv.${name}`, version: 'v1', metadata: {}, endpoints: [], nodes: nodes.map(([id, port]) => node(id, port)) });
    await service('retry', [['bad', pBad], ['ok', pOk]]);
    await service('fail', [['ok', pOk], ['ok2', pOk2]]);
    await service('stream', [['ok', pOk], ['ok2', pOk2]]);
    await service('collect', [['bad', pBad], ['ok', pOk]]);
    await service('deadline', [['bad', pBad], ['ok', pOk]]);
    await service('late', [['bad', pBad], ['ok', pOk]]);
    await service('headers', [['bad', pBad], ['ok', pOk]]);
    await service('web', [['bad', pBad], ['ok', pOk]]);
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--enable_http2']);
    client = new Greeter(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await gw?.stop();
    await Promise.all([bad, ok, ok2].map((p) => p?.stop('SIGKILL')));
    await registry?.close();
    dir.cleanup();
  });

  it('a node that answers UNAVAILABLE before any message: the call goes to another node, the client sees OK; counted', async () => {
    const before = lines(bad, /^status bad 14 SayHello$/).length;
    for (let i = 0; i < 4; i++) {
      const got = await unary(client, 'SayHello', { name: `r${i}` }, metadata('retry'));
      assert.ok(got.ok, `call ${i}: ${JSON.stringify(got)}`);
      assert.equal(got.reply.message, `Hello r${i}`);
      assert.equal(got.reply.server, 'ok');
    }
    // Round robin: two of the four first tries went to the bad node, each tried again once.
    await waitFor(() => lines(bad, /^status bad 14 SayHello$/).length - before === 2 || undefined);
    assert.equal(await retries('retry'), 2);
    assert.equal(await methodStat('retry', 'SayHello', 'retry'), 2);
    assert.equal(await methodStat('retry', 'SayHello', 'total'), 4);
    assert.equal(await methodStat('retry', 'SayHello', 'success'), 4);
    assert.equal(await methodStat('retry', 'SayHello', '14'), 0);
  });

  it('a node that answers headers, then UNAVAILABLE in trailers, no message: tried again, its headers never reach the client', async () => {
    const before = lines(bad, /^status bad 14 SayHello$/).length;
    const seen: Array<{ from: unknown; outcome: Outcome }> = [];
    for (let i = 0; i < 2; i++) {
      seen.push(
        await new Promise((resolve) => {
          let from: unknown;
          const call = client.SayHello({ name: `h${i}` }, metadata('headers', { 'x-headers-first': '1' }), (err: grpc.ServiceError | null, reply: Reply) =>
            resolve({ from, outcome: err ? { ok: false, code: err.code, details: err.details } : { ok: true, reply } }),
          );
          call.on('metadata', (md: grpc.Metadata) => (from = md.get('x-from')[0]));
        }),
      );
    }
    for (const { from, outcome } of seen) {
      assert.ok(outcome.ok && outcome.reply.server === 'ok', JSON.stringify(outcome));
      assert.equal(from, undefined);
    }
    await waitFor(() => lines(bad, /^status bad 14 SayHello$/).length - before === 1 || undefined);
    assert.equal(await retries('headers'), 1);
  });

  it('headers followed by nothing are held back a moment only: a stream that waits gets them, no message needed', async () => {
    const call = client.Count({ name: 'wait', n: 0, hold: true }, metadata('stream', { 'x-headers-first': '1' }));
    call.on('error', () => {});
    let got: grpc.Metadata | undefined;
    call.on('metadata', (md: grpc.Metadata) => (got = md));
    const md = await waitFor(() => got);
    assert.match(String(md.get('x-from')[0]), /^ok2?$/);
    call.cancel();
  });

  it('a gRPC-Web call (HTTP/1.1) is tried again the same way', async () => {
    const answers: string[] = [];
    for (let i = 0; i < 2; i++) {
      // HelloRequest { name: "W" }: field 1, length 1.
      const res = await fetch(`${gw.url}/helloworld.Greeter/SayHello`, {
        method: 'POST',
        headers: { 'content-type': 'application/grpc-web+proto', 'x-grpc-web': '1', 'mesh-service': 'go.mesh.srv.web' },
        body: grpcWebFrame(0, Buffer.from([0x0a, 0x01, 0x57])),
      });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('grpc-status'), null);
      const frames = grpcWebFrames(Buffer.from(await res.arrayBuffer()));
      assert.equal(frames.length, 2);
      // HelloReply: message "Hello W" (field 1, tag 0x0a), server "ok" (field 5, tag 0x2a).
      assert.match(frames[0]!.payload.toString('latin1'), /^\n\x07Hello W[^]*\x2a\x02ok/);
      answers.push(frames[1]!.payload.toString('latin1').trim());
    }
    assert.deepEqual(answers.map((a) => /grpc-status:0/.test(a)), [true, true]);
    assert.equal(await retries('web'), 1);
  });

  it('INVALID_ARGUMENT is not tried again; UNAVAILABLE is, up to --client_retries, then the node\'s status stands', async () => {
    const invalid = await unary(client, 'Fail', { code: grpc.status.INVALID_ARGUMENT, details: 'bad name' }, metadata('fail'));
    assert.deepEqual(invalid, { ok: false, code: grpc.status.INVALID_ARGUMENT, details: 'bad name' });
    assert.equal(await retries('fail'), 0);
    const down = await unary(client, 'Fail', { code: grpc.status.UNAVAILABLE, details: 'going away' }, metadata('fail'));
    // Both nodes answer UNAVAILABLE: one retry (--client_retries=1), then the last node's status and message.
    assert.deepEqual(down, { ok: false, code: grpc.status.UNAVAILABLE, details: 'going away' });
    assert.equal(await retries('fail'), 1);
    assert.equal(await methodStat('fail', 'Fail', 'retry'), 1);
    assert.equal(await methodStat('fail', 'Fail', '14'), 1);
    assert.equal(await methodStat('fail', 'Fail', '3'), 1);
  });

  it('a server stream that sent a message, then failed UNAVAILABLE, is not tried again; one that failed before any message is', async () => {
    const sent = await count(client, { name: 's1', n: 1, fail_code: grpc.status.UNAVAILABLE }, metadata('stream'));
    assert.deepEqual(sent, { messages: ['Hello s1 #1'], code: grpc.status.UNAVAILABLE });
    assert.equal(await retries('stream'), 0);
    await waitFor(() => lines(ok, /^count ok s1$/).length + lines(ok2, /^count ok2 s1$/).length === 1 || undefined);
    const none = await count(client, { name: 's0', n: 0, fail_code: grpc.status.UNAVAILABLE }, metadata('stream'));
    assert.deepEqual(none, { messages: [], code: grpc.status.UNAVAILABLE });
    assert.equal(await retries('stream'), 1);
    await waitFor(() => lines(ok, /^count ok s0$/).length + lines(ok2, /^count ok2 s0$/).length === 2 || undefined);
    assert.equal(lines(ok, /^count ok s1$/).length + lines(ok2, /^count ok2 s1$/).length, 1);
  });

  it('a client stream is tried again when its whole request was held (64 KiB), never when it was larger', async () => {
    const seen = () => lines(bad, /^status bad 14 Collect$/).length;
    const start = seen();
    for (let i = 0; i < 2; i++) {
      const got = await collect(client, ['a', 'b', 'c'], metadata('collect'));
      assert.ok(got.ok, JSON.stringify(got));
      assert.equal(got.reply.message, 'a+b+c');
    }
    await waitFor(() => seen() - start === 1 || undefined);
    assert.equal(await retries('collect'), 1);
    // 70 messages of 1000 bytes: more than 64 KiB, sent to the node as it came but not held.
    const big = Array.from({ length: 70 }, (_, i) => String(i % 10).repeat(1000));
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 2; i++) outcomes.push(await collect(client, big, metadata('collect')));
    const failed = outcomes.filter((o) => !o.ok);
    assert.deepEqual(failed, [{ ok: false, code: grpc.status.UNAVAILABLE, details: 'status from bad' }]);
    const passed = outcomes.find((o) => o.ok);
    assert.equal(passed?.ok && passed.reply.message, big.join('+'));
    await waitFor(() => seen() - start === 2 || undefined);
    assert.equal(await retries('collect'), 1);
  });

  it('a retry gets what is left of the deadline (Mesh-Timeout)', async () => {
    // The bad node answers after 300 ms: the retry's node gets at most 1700 of the 2000 ms.
    const lefts: Array<{ retried: boolean; left: number }> = [];
    for (let i = 0; i < 2; i++) {
      const before = await retries('deadline');
      const shown = lines(ok, /^deadline ok \d+$/).length;
      const got = await unary(client, 'SayHello', { name: 'd' }, metadata('deadline', { 'mesh-timeout': '2000', 'x-status-delay': '300', 'x-show': '1' }));
      assert.ok(got.ok, JSON.stringify(got));
      const line = await waitFor(() => lines(ok, /^deadline ok \d+$/)[shown]);
      lefts.push({ retried: (await retries('deadline')) > before, left: Number(line.split(' ')[2]) });
    }
    const retried = lefts.filter((l) => l.retried);
    assert.equal(retried.length, 1, JSON.stringify(lefts));
    assert.ok(retried[0]!.left <= 1700 && retried[0]!.left > 0, JSON.stringify(lefts));
    assert.ok(lefts.find((l) => !l.retried)!.left > 1700, JSON.stringify(lefts));
  });

  it('no retry past the deadline: a status that comes after it is never waited for', async () => {
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 2; i++) outcomes.push(await unary(client, 'SayHello', { name: 'late' }, metadata('late', { 'mesh-timeout': '150', 'x-status-delay': '400' })));
    const codes = outcomes.map((o) => (o.ok ? 0 : o.code)).sort();
    assert.deepEqual(codes, [grpc.status.OK, grpc.status.DEADLINE_EXCEEDED], JSON.stringify(outcomes));
    assert.equal(await retries('late'), 0);
  });

  it("the node's traceparent is this hop's: the client's trace, the gateway's span as the parent", async () => {
    const trace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const shown = lines(ok, /^traceparent ok \S+$/).length + lines(ok2, /^traceparent ok2 \S+$/).length;
    const got = await unary(client, 'SayHello', { name: 't' }, metadata('fail', { traceparent: `00-${trace}-00f067aa0ba902b7-01`, 'x-show': '1' }));
    assert.ok(got.ok);
    const line = await waitFor(() => [...lines(ok, /^traceparent ok \S+$/), ...lines(ok2, /^traceparent ok2 \S+$/)][shown]);
    const m = /^traceparent ok2? 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(line);
    assert.ok(m, line);
    assert.equal(m[1], trace);
    assert.notEqual(m[2], '00f067aa0ba902b7');
  });
});

describe('native gRPC through mesh sidecar --enable_http2: retried on UNAVAILABLE, the node\'s traceparent this hop\'s', () => {
  const dir = tempDir('mesh-grpc-retry-sidecar-');
  let bad: RunningProcess;
  let ok: RunningProcess;
  let registry: Registry;
  let sc: SidecarProcess;
  let client: any;

  before(async () => {
    bad = startProcess(['--import', 'tsx', GREETER, '--label=bad', '--status=14'], {}, '');
    ok = startProcess(['--import', 'tsx', GREETER, '--label=ok'], {}, '');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [pBad, pOk] = await Promise.all([bad.waitForPort(re), ok.waitForPort(re)]);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.retry', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'bad', address: '127.0.0.1', port: pBad, metadata: { protocol: 'grpc' } }, { id: 'ok', address: '127.0.0.1', port: pOk, metadata: { protocol: 'grpc' } }] });
    sc = await startSidecar(join(dir.path, 'registry'), ['--enable_http2']);
    client = new Greeter(`127.0.0.1:${new URL(sc.base).port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await sc?.stop();
    await Promise.all([bad, ok].map((p) => p?.stop('SIGKILL')));
    await registry?.close();
    dir.cleanup();
  });

  it('both calls answer OK from the good node, one of them after a retry; the node gets the client\'s trace under the sidecar\'s span', async () => {
    const trace = '7bf92f3577b34da6a3ce929d0e0e4739';
    for (let i = 0; i < 2; i++) {
      const got = await unary(client, 'SayHello', { name: 'c' }, metadata('retry', { traceparent: `00-${trace}-00f067aa0ba902b7-01`, 'x-show': '1' }));
      assert.ok(got.ok && got.reply.server === 'ok', JSON.stringify(got));
    }
    const text = (await http('GET', `${sc.admin}/stats?filter=${encodeURIComponent('^cluster\\.go\\.mesh\\.srv\\.retry\\.upstream_rq_retry$')}`)).text;
    assert.match(text, /^cluster\.go\.mesh\.srv\.retry\.upstream_rq_retry: 1$/m);
    const parents = await waitFor(() => {
      const got = ok.output().match(/^traceparent ok \S+$/gm);
      return got && got.length === 2 ? got : undefined;
    });
    for (const line of parents) {
      const m = /^traceparent ok 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(line);
      assert.ok(m && m[1] === trace && m[2] !== '00f067aa0ba902b7', line);
    }
  });
});

describe('native gRPC through mesh proxy (a GRPCRoute, http2: true): retried on UNAVAILABLE, the node\'s traceparent this hop\'s', () => {
  const dir = tempDir('mesh-grpc-retry-proxy-');
  let bad: RunningProcess;
  let ok: RunningProcess;
  let registry: Registry;
  let proxy: RunningProcess;
  let admin = '';
  let client: any;

  before(async () => {
    bad = startProcess(['--import', 'tsx', GREETER, '--label=bad', '--status=14'], {}, '');
    ok = startProcess(['--import', 'tsx', GREETER, '--label=ok'], {}, '');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [pBad, pOk] = await Promise.all([bad.waitForPort(re), ok.waitForPort(re)]);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.retry', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'bad', address: '127.0.0.1', port: pBad, metadata: { protocol: 'grpc' } }, { id: 'ok', address: '127.0.0.1', port: pOk, metadata: { protocol: 'grpc' } }] });
    const file = join(dir.path, 'routes.yaml');
    writeFileSync(file, 'apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: greeter}\nspec:\n  rules:\n    - matches: [{method: {service: helloworld.Greeter}}]\n      backendRefs: [{name: go.mesh.srv.retry}]\n');
    const config = join(dir.path, 'proxy.yaml');
    writeFileSync(config, `listeners:\n  - {name: ingress, address: 127.0.0.1:0, http2: true, route_file: ${file}}\n`);
    proxy = startProcess(['proxy', '-c', config, `--registry_address=${join(dir.path, 'registry')}`, '--admin_address=127.0.0.1:0', '--log_level=warning']);
    await proxy.waitForOutput(/mesh proxy ready/, 15000);
    const url = new URL(/mesh proxy listener ingress on (\S+)/.exec(proxy.output())![1]!);
    admin = /mesh proxy admin on (\S+)/.exec(proxy.output())![1]!;
    client = new Greeter(`127.0.0.1:${url.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await proxy?.stop();
    await Promise.all([bad, ok].map((p) => p?.stop('SIGKILL')));
    await registry?.close();
    dir.cleanup();
  });

  it('both calls answer OK from the good node, one of them after a retry; the node gets the client\'s trace under the proxy\'s span', async () => {
    const trace = '8bf92f3577b34da6a3ce929d0e0e4730';
    for (let i = 0; i < 2; i++) {
      const md = new grpc.Metadata();
      md.set('traceparent', `00-${trace}-00f067aa0ba902b7-01`);
      md.set('x-show', '1');
      const got = await unary(client, 'SayHello', { name: 'p' }, md);
      assert.ok(got.ok && got.reply.server === 'ok', JSON.stringify(got));
    }
    const text = (await http('GET', `${admin}/stats?filter=${encodeURIComponent('^cluster\\.go\\.mesh\\.srv\\.retry\\.upstream_rq_retry$')}`)).text;
    assert.match(text, /^cluster\.go\.mesh\.srv\.retry\.upstream_rq_retry: 1$/m);
    const parents = await waitFor(() => {
      const got = ok.output().match(/^traceparent ok \S+$/gm);
      return got && got.length === 2 ? got : undefined;
    });
    for (const line of parents) {
      const m = /^traceparent ok 00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(line);
      assert.ok(m && m[1] === trace && m[2] !== '00f067aa0ba902b7', line);
    }
  });
});

describe('native gRPC: --grpc_retry_on=none', () => {
  const dir = tempDir('mesh-grpc-retry-none-');
  let bad: RunningProcess;
  let ok: RunningProcess;
  let registry: Registry;
  let gw: GatewayProcess;
  let client: any;

  before(async () => {
    bad = startProcess(['--import', 'tsx', GREETER, '--label=bad', '--status=14'], {}, '');
    ok = startProcess(['--import', 'tsx', GREETER, '--label=ok'], {}, '');
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const [pBad, pOk] = await Promise.all([bad.waitForPort(re), ok.waitForPort(re)]);
    registry = createRegistry('local', join(dir.path, 'registry'));
    await registry.register({ name: 'go.mesh.srv.retry', version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: 'bad', address: '127.0.0.1', port: pBad, metadata: { protocol: 'grpc' } }, { id: 'ok', address: '127.0.0.1', port: pOk, metadata: { protocol: 'grpc' } }] });
    gw = await startGatewayProcess(join(dir.path, 'registry'), ['--enable_http2', '--grpc_retry_on=none']);
    client = new Greeter(`127.0.0.1:${gw.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    await gw?.stop();
    await Promise.all([bad, ok].map((p) => p?.stop('SIGKILL')));
    await registry?.close();
    dir.cleanup();
  });

  it('the node\'s UNAVAILABLE reaches the client', async () => {
    const outcomes: Outcome[] = [];
    for (let i = 0; i < 2; i++) outcomes.push(await unary(client, 'SayHello', { name: 'n' }, metadata('retry')));
    assert.deepEqual(outcomes.filter((o) => !o.ok), [{ ok: false, code: grpc.status.UNAVAILABLE, details: 'status from bad' }]);
  });
});

describe('--grpc_retry_on: a bad value', () => {
  it('mesh api refuses it: exit 2, the flag and the names it takes', async () => {
    const p = startProcess(['api', '--address=127.0.0.1:0', '--grpc_retry_on=unavailable,aborted']);
    const code = p.child.exitCode ?? (await once(p.child, 'exit'))[0];
    assert.equal(code, 2);
    assert.match(p.output(), /invalid value "unavailable,aborted" for flag --grpc_retry_on: "aborted" is not a retryable gRPC status: use cancelled, deadline-exceeded, resource-exhausted, internal, unavailable \(comma list\), or none/);
  });
});
