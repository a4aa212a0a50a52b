/**
 * The OpenTelemetry variables of traces (docs/observability.md, "Tracing"), on real `mesh api`
 * processes exporting to a real OTLP receiver (test/fixtures/otlp-receiver.ts, HTTP and gRPC):
 * OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and the headers reach
 * the receiver without any --tracing flag; the samplers; OTLP over gRPC; a malformed variable
 * exits 2 naming it; an explicit flag wins over a variable.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { http, PRINTED, ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import type { ReceivedSpan } from '../fixtures/otlp-receiver.js';

const RECEIVER = join(ROOT, 'test/fixtures/otlp-receiver.ts');

const procs: RunningProcess[] = [];
after(() => Promise.all(procs.map((p) => p.stop())));

async function startReceiver(grpc = false): Promise<{ base: string; grpcPort?: number }> {
  const proc = startProcess(['--import', 'tsx', RECEIVER, ...(grpc ? ['--grpc'] : [])], {}, '');
  procs.push(proc);
  const port = await proc.waitForPort(/otlp receiver listening on port (\d+)/, 15000);
  const grpcPort = grpc ? await proc.waitForPort(/otlp grpc receiver listening on port (\d+)/, 15000) : undefined;
  return { base: `http://127.0.0.1:${port}`, grpcPort };
}

const spansOf = async (base: string) => (await http('GET', `${base}/spans`)).json() as ReceivedSpan[];
const requestsOf = async (base: string) => ((await http('GET', `${base}/requests`)).json() as { requests: number }).requests;

/** Starts `mesh api` with these flags and OTEL_* variables (and no MESH_* tracing variable). */
async function gateway(env: Record<string, string>, flags: string[] = []): Promise<{ proc: RunningProcess; url: string }> {
  const clean: Record<string, string> = { MESH_TRACING: '', MESH_TRACING_ADDRESS: '', MESH_TRACING_SAMPLE_RATE: '', ...env };
  const proc = startProcess(['api', '--registry=memory', '--address=127.0.0.1:0', '--admin_address=off', '--log_level=warning', '--drain_delay=0s', ...flags], clean);
  procs.push(proc);
  return { proc, url: `http://127.0.0.1:${await proc.waitForPort(PRINTED.api, 15000)}` };
}

/** Sends n requests, 10 at a time; each without a traceparent starts a trace at the gateway. */
async function load(url: string, n: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < n) {
        next++;
        await http('GET', `${url}/otel/probe`);
      }
    }),
  );
}

describe('tracing: the OTEL_* variables', () => {
  it('the sample of docs/observability.md: OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_EXPORTER_OTLP_HEADERS reach the receiver; tracing turns on by itself', async () => {
    const receiver = await startReceiver();
    const env = docSampleEnv();
    assert.deepEqual(Object.keys(env).sort(), ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_RESOURCE_ATTRIBUTES', 'OTEL_SERVICE_NAME']);
    // The sample's collector is the receiver; and a service.name in the attributes, which OTEL_SERVICE_NAME beats.
    const { url } = await gateway({ ...env, OTEL_EXPORTER_OTLP_ENDPOINT: `${receiver.base}/`, OTEL_RESOURCE_ATTRIBUTES: `service.name=ignored,${env.OTEL_RESOURCE_ATTRIBUTES}` });
    await http('GET', `${url}/otel/probe`);
    const spans = await waitForSpans(receiver.base, 1);
    assert.equal(spans[0]!.resource['service.name'], 'shop-gateway', 'OTEL_SERVICE_NAME wins over the service.name of OTEL_RESOURCE_ATTRIBUTES');
    assert.equal(spans[0]!.resource['deployment.environment.name'], 'staging');
    assert.equal(spans[0]!.resource['team'], 'checkout crew', 'percent-decoded');
    const headers = (await http('GET', `${receiver.base}/headers`)).json() as Record<string, string>;
    assert.equal(headers.authorization, 'Bearer s3cret');
  });

  it('OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC (TraceService/Export) with the headers as metadata', async () => {
    const receiver = await startReceiver(true);
    const { url } = await gateway({
      OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${receiver.grpcPort}`,
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-tenant=grpc-tenant',
      OTEL_SERVICE_NAME: 'grpc-gateway',
    });
    await http('GET', `${url}/otel/probe`);
    const spans = await waitForSpans(receiver.base, 1);
    assert.equal(spans[0]!.resource['service.name'], 'grpc-gateway');
    const server = await waitFor(async () => (await spansOf(receiver.base)).find((s) => s.kind === 2), 20000);
    assert.equal(server.name, 'GET', 'no such service (404): no route, the span is named after the method (HTTP semantic conventions)');
    assert.equal(server.attributes['http.route'], undefined);
    assert.equal(server.attributes['url.path'], '/otel/probe');
    const metadata = (await http('GET', `${receiver.base}/headers`)).json() as Record<string, string>;
    assert.equal(metadata['x-tenant'], 'grpc-tenant');
  });

  it('a framework service process (runService) reads them too: its server span carries OTEL_SERVICE_NAME; a malformed one exits 2', async () => {
    const receiver = await startReceiver();
    const dir = tempDir();
    try {
      const registry = `--registry_address=${dir.path}`;
      const srv = startProcess([join(ROOT, 'dist/examples/greeter-srv.js'), registry, '--log_level=warning', '--drain_delay=0s'], // always_on: the span is recorded whatever the caller's traceparent says (mesh call, tracing off, may send flags 00).
        { MESH_TRACING: '', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_SERVICE_NAME: 'greeter-backend', OTEL_TRACES_SAMPLER: 'always_on' }, '');
      procs.push(srv);
      await srv.waitForPort(/listening on \S+:(\d+) \(node/, 15000);
      const r = await runCli(['call', 'go.mesh.srv.greeter', 'Say.Hello', '{"name":"otel"}', registry]);
      assert.equal(r.code, 0, r.stderr);
      const server = await waitFor(async () => (await spansOf(receiver.base)).find((s) => s.kind === 2), 20000);
      assert.equal(server.name, 'go.mesh.srv.greeter/Say.Hello');
      assert.equal(server.resource['service.name'], 'greeter-backend');
      const refused = startProcess([join(ROOT, 'dist/examples/greeter-srv.js'), registry], { MESH_TRACING: '', OTEL_TRACES_EXPORTER: 'zipkin' }, '');
      procs.push(refused);
      await waitFor(() => (refused.child.exitCode !== null ? true : undefined), 15000);
      assert.equal(refused.child.exitCode, 2, refused.output());
      assert.match(refused.output(), /invalid value "zipkin" for OTEL_TRACES_EXPORTER: use otlp or none/);
    } finally {
      dir.cleanup();
    }
  });

  it('OTEL_TRACES_SAMPLER=always_off sends nothing (checked after the drain, which exports what is queued)', async () => {
    const receiver = await startReceiver();
    const { proc, url } = await gateway({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_TRACES_SAMPLER: 'always_off' });
    await load(url, 50);
    assert.equal(await proc.stop(), 0);
    assert.equal(await requestsOf(receiver.base), 0);
  });

  it('OTEL_TRACES_SAMPLER=traceidratio with OTEL_TRACES_SAMPLER_ARG=0.5 records about half of 400 traces', async () => {
    const receiver = await startReceiver();
    const { proc, url } = await gateway({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' });
    await load(url, 400);
    assert.equal(await proc.stop(), 0); // the drain exports what is queued
    const traces = new Set((await spansOf(receiver.base)).map((s) => s.traceId)).size;
    // Binomial(400, 0.5): mean 200, sd 10; 140..260 is six standard deviations either side.
    assert.ok(traces >= 140 && traces <= 260, `${traces} of 400 traces recorded`);
  });

  it('a flag wins over a variable: --tracing_address over OTEL_EXPORTER_OTLP_ENDPOINT, --tracing_sample_rate over the sampler', async () => {
    const flagged = await startReceiver();
    const unflagged = await startReceiver();
    const { proc, url } = await gateway({ OTEL_EXPORTER_OTLP_ENDPOINT: unflagged.base, OTEL_TRACES_SAMPLER: 'always_off' }, [`--tracing_address=${flagged.base}/v1/traces`, '--tracing_sample_rate=1']);
    await http('GET', `${url}/otel/probe`);
    await waitForSpans(flagged.base, 1);
    assert.equal(await proc.stop(), 0);
    assert.equal(await requestsOf(unflagged.base), 0);
  });

  it('--tracing=off wins over the variables (which are then not even read)', async () => {
    const receiver = await startReceiver();
    const { proc, url } = await gateway({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_TRACES_SAMPLER: 'sometimes' }, ['--tracing=off']);
    await http('GET', `${url}/otel/probe`);
    assert.equal(await proc.stop(), 0);
    assert.equal(await requestsOf(receiver.base), 0);
  });

  for (const [name, value, reason] of [
    ['OTEL_EXPORTER_OTLP_ENDPOINT', 'localhost:4318', /not a URL|is not supported/],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'ftp://collector:21', /ftp: is not supported/],
    ['OTEL_EXPORTER_OTLP_PROTOCOL', 'http/json', /http\/json is not supported: use http\/protobuf or grpc/],
    ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'udp', /use http\/protobuf or grpc/],
    ['OTEL_EXPORTER_OTLP_HEADERS', 'authorization', /"authorization" is not key=value/],
    ['OTEL_RESOURCE_ATTRIBUTES', 'team=%zz', /not valid percent-encoding/],
    ['OTEL_TRACES_SAMPLER', 'sometimes', /use one of always_on, always_off, traceidratio/],
    ['OTEL_TRACES_SAMPLER_ARG', '1.5', /from 0 to 1/],
    ['OTEL_TRACES_EXPORTER', 'jaeger', /use otlp or none/],
    ['OTEL_SDK_DISABLED', 'yes', /use true or false/],
  ] as const) {
    it(`a malformed ${name} stops the start with exit 2 naming it`, async () => {
      const env: Record<string, string> = { MESH_TRACING: '', [name]: value };
      if (name === 'OTEL_TRACES_SAMPLER_ARG') env.OTEL_TRACES_SAMPLER = 'traceidratio';
      const r = await runCli(['api', '--registry=memory', '--address=127.0.0.1:0', '--admin_address=off'], env);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`invalid value "${value.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}" for ${name}: `));
      assert.match(r.stderr, reason);
    });
  }
});

async function waitForSpans(base: string, n: number): Promise<ReceivedSpan[]> {
  return waitFor(async () => {
    const spans = await spansOf(base);
    return spans.length >= n ? spans : undefined;
  }, 20000);
}

/** The variables of the `sh` sample of docs/observability.md that starts `mesh api` with OTEL_*. */
function docSampleEnv(): Record<string, string> {
  const doc = readFileSync(join(ROOT, 'docs/observability.md'), 'utf8');
  const block = /```sh\n(OTEL_[\s\S]*?)\nmesh api\n```/.exec(doc);
  assert.ok(block, 'the OTEL_* sample is in docs/observability.md');
  const env: Record<string, string> = {};
  for (const line of block[1]!.split('\n')) {
    const m = /^(OTEL_[A-Z_]+)=('?)(.*?)\2 \\$/.exec(line);
    assert.ok(m, `a NAME=value line: ${line}`);
    env[m[1]!] = m[3]!;
  }
  return env;
}
