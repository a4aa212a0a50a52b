/**
 * OTLP export (docs/observability.md, "Tracing"): with --tracing=otlp spans go over OTLP/HTTP to
 * --tracing_address, received here by a real receiver process (test/fixtures/otlp-receiver.ts,
 * which decodes the protobuf bodies). One request through `mesh api` → an API service → a backend
 * (three processes) is one trace whose spans link parent to child; a bad --tracing_address stops
 * the start with exit 2 naming the flag. (A receiver that is down or hangs: tracing-export.test.ts.)
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Mesh } from '../../src/index.js';
import { http, PRINTED, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import type { ReceivedSpan } from '../fixtures/otlp-receiver.js';

const RECEIVER = join(ROOT, 'test/fixtures/otlp-receiver.ts');
const GREETER_API = join(ROOT, 'dist/examples/greeter-api.js');
const GREETER_SRV = join(ROOT, 'dist/examples/greeter-srv.js');
const SERVICE_PRINTED = /listening on \S+:(\d+) \(node/;

/** OTLP's SpanKind numbers. */
const KIND = { server: 2, client: 3 };

async function startReceiver(extra: string[] = []): Promise<{ proc: RunningProcess; url: string; base: string }> {
  const proc = startProcess(['--import', 'tsx', RECEIVER, ...extra], {}, '');
  const port = await proc.waitForPort(/otlp receiver listening on port (\d+)/, 15000);
  return { proc, base: `http://127.0.0.1:${port}`, url: `http://127.0.0.1:${port}/v1/traces` };
}

async function spansOf(base: string): Promise<ReceivedSpan[]> {
  return (await http('GET', `${base}/spans`)).json() as ReceivedSpan[];
}

const TRACE = '5b8efff798038103d269b633813fc60c';
const CALLER = 'eee19b7ec3c1b174';

describe('tracing: one request through gateway, API service and backend (three processes)', () => {
  const dir = tempDir();
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  const procs: RunningProcess[] = [];
  let gatewayUrl = '';

  before(async () => {
    receiver = await startReceiver();
    const common = [`--registry_address=${dir.path}`, '--tracing=otlp', `--tracing_address=${receiver.url}`, '--log_level=warning', '--drain_delay=0s'];
    const srv = startProcess([GREETER_SRV, ...common], {}, '');
    const api = startProcess([GREETER_API, ...common], {}, '');
    procs.push(srv, api);
    await Promise.all([srv.waitForPort(SERVICE_PRINTED, 15000), api.waitForPort(SERVICE_PRINTED, 15000)]);
    const gateway = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', ...common]);
    procs.push(gateway);
    gatewayUrl = `http://127.0.0.1:${await gateway.waitForPort(PRINTED.api, 15000)}`;
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await receiver?.proc.stop();
    dir.cleanup();
  });

  it('one trace id; gateway server → gateway client → API server → API client → backend server; service.name differs', async () => {
    const r = await waitFor(async () => {
      const answer = await http('GET', `${gatewayUrl}/greeter/say/hello?name=John`, { headers: { traceparent: `00-${TRACE}-${CALLER}-01` } });
      return answer.status === 200 ? answer : undefined; // the gateway's registry watch may not know the service yet
    }, 15000);
    assert.equal(r.json().message, 'Hello John');
    const trace = await waitFor(async () => {
      const spans = (await spansOf(receiver.base)).filter((s) => s.traceId === TRACE);
      return spans.length >= 5 ? spans : undefined;
    }, 20000);
    assert.equal(trace.length, 5, JSON.stringify(trace, null, 1));
    const byParent = (parent: string) => trace.filter((s) => s.parentSpanId === parent);
    const one = (spans: ReceivedSpan[], what: string): ReceivedSpan => {
      assert.equal(spans.length, 1, `${what}: ${JSON.stringify(trace, null, 1)}`);
      return spans[0]!;
    };
    const edge = one(byParent(CALLER), 'the gateway server span, child of the caller');
    assert.equal(edge.kind, KIND.server);
    assert.equal(edge.name, 'GET /greeter/say/hello', '{method} {http.route}');
    assert.equal(edge.attributes['http.route'], '/greeter/say/hello');
    assert.equal(edge.attributes['http.request.method'], 'GET');
    assert.equal(edge.attributes['url.path'], '/greeter/say/hello');
    assert.equal(edge.attributes['http.response.status_code'], 200);
    assert.equal(edge.attributes['server.address'], '127.0.0.1');
    assert.equal(edge.resource['service.name'], 'mesh-api');

    const gwClient = one(byParent(edge.spanId), 'the gateway client span');
    assert.equal(gwClient.kind, KIND.client);
    assert.equal(gwClient.name, 'go.mesh.api.greeter/Say.Hello');
    assert.deepEqual([gwClient.attributes['rpc.system'], gwClient.attributes['rpc.service'], gwClient.attributes['rpc.method']], ['mesh', 'go.mesh.api.greeter', 'Say.Hello']);
    assert.equal(gwClient.resource['service.name'], 'mesh-api');

    const apiServer = one(byParent(gwClient.spanId), 'the API service server span');
    assert.equal(apiServer.kind, KIND.server);
    assert.equal(apiServer.name, 'go.mesh.api.greeter/Say.Hello');
    assert.equal(apiServer.attributes['rpc.service'], 'go.mesh.api.greeter');
    assert.equal(apiServer.resource['service.name'], 'go.mesh.api.greeter');

    const apiClient = one(byParent(apiServer.spanId), 'the API service client span');
    assert.equal(apiClient.kind, KIND.client);
    assert.equal(apiClient.name, 'go.mesh.srv.greeter/Say.Hello');
    assert.equal(apiClient.resource['service.name'], 'go.mesh.api.greeter');

    const backend = one(byParent(apiClient.spanId), 'the backend server span');
    assert.equal(backend.kind, KIND.server);
    assert.equal(backend.name, 'go.mesh.srv.greeter/Say.Hello');
    assert.equal(backend.resource['service.name'], 'go.mesh.srv.greeter');
    assert.equal(backend.attributes['rpc.response.status_code'], 200);
    assert.equal(new Set(trace.map((s) => s.resource['service.name'])).size, 3);
    for (const s of trace) assert.equal(s.status.code, 0, `${s.name} not failed`);
  });

  it('an error answer marks the spans failed; a request without traceparent starts a trace at the gateway', async () => {
    const r = await http('GET', `${gatewayUrl}/greeter/say/hello`);
    assert.equal(r.status, 400);
    const spans = await waitFor(async () => {
      const all = (await spansOf(receiver.base)).filter((s) => s.traceId !== TRACE && s.name === 'GET /greeter/say/hello');
      if (all.length === 0) return undefined;
      const traceId = all[0]!.traceId;
      const trace = (await spansOf(receiver.base)).filter((s) => s.traceId === traceId);
      return trace.length >= 3 ? trace : undefined;
    }, 20000);
    const root = spans.find((s) => s.name === 'GET /greeter/say/hello')!;
    assert.equal(root.parentSpanId, '', 'a root span');
    assert.equal(root.attributes['http.response.status_code'], 400);
    const apiServer = spans.find((s) => s.kind === KIND.server && s.name === 'go.mesh.api.greeter/Say.Hello')!;
    assert.equal(apiServer.status.code, 2, 'error status');
    assert.equal(apiServer.attributes['rpc.response.status_code'], 400);
  });
});

describe('tracing: settings', () => {
  it('a bad --tracing_address or --tracing_sample_rate stops the start with exit 2 naming the flag', async () => {
    for (const [flag, why] of [
      ['--tracing_address=127.0.0.1:4318', /flag --tracing_address/],
      ['--tracing_address=ftp://collector/v1/traces', /flag --tracing_address: ftp: is not supported/],
      ['--tracing_sample_rate=1.5', /flag --tracing_sample_rate: must be a number from 0 to 1/],
      ['--tracing_sample_rate=half', /flag --tracing_sample_rate/],
      ['--tracing=jaeger', /flag --tracing: use one of off, otlp/],
    ] as const) {
      for (const command of flag.startsWith('--tracing_address') ? ['api', 'sidecar', 'proxy'] : ['api']) {
        const r = await runCli([command, '--registry=memory', ...(command === 'proxy' ? [] : ['--address=127.0.0.1:0']), '--admin_address=off', '--tracing=otlp', flag]);
        assert.equal(r.code, 2, `${command} ${flag}: ${r.stderr}`);
        assert.match(r.stderr, why);
      }
    }
    const env = await runCli(['api', '--registry=memory'], { MESH_TRACING_ADDRESS: 'nope' });
    assert.equal(env.code, 2);
    assert.match(env.stderr, /MESH_TRACING_ADDRESS \(--tracing_address\)/);
  });

  it('a service process (runService) refuses a bad --tracing_address with exit 2', async () => {
    const proc = startProcess([GREETER_SRV, '--registry=memory', '--tracing_address=not a url'], {}, '');
    await waitFor(() => (proc.child.exitCode === null ? undefined : true), 15000);
    assert.equal(proc.child.exitCode, 2);
    assert.match(proc.output(), /flag --tracing_address/);
  });

  it('Mesh options: tracing, tracingAddress and tracingSampleRate are checked (OptionsError)', () => {
    assert.throws(() => new Mesh({ tracing: 'zipkin' as 'otlp' }), { name: 'OptionsError', option: 'tracing' });
    assert.throws(() => new Mesh({ tracingAddress: 'localhost:4318' }), { name: 'OptionsError', option: 'tracingAddress' });
    assert.throws(() => new Mesh({ tracingSampleRate: -0.1 }), { name: 'OptionsError', option: 'tracingSampleRate' });
    assert.throws(() => new Mesh({ tracingSampleRate: '1' as unknown as number }), { name: 'OptionsError', option: 'tracingSampleRate' });
  });
});
