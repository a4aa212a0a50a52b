/**
 * A gRPC app behind its sidecar, called by another app through that app's sidecar, the hop
 * between the sidecars over mutual TLS (`mesh sidecar --enable_http2 --mtls=strict`): the caller's
 * grpc-js channel at sidecar A, A's HTTP/2 connection to B's inbound listener by ALPN h2 over
 * mutual TLS (B's certificate checked for the app's SPIFFE ID), B passing the call to the app (a
 * plain @grpc/grpc-js server) unchanged.
 * Real processes; certificates from one mesh CA made in --ca_dir.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { http, PRINTED, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const GREETER = join(ROOT, 'test/fixtures/grpc-greeter.ts');
const def = protoLoader.loadSync(join(ROOT, 'test/fixtures/grpc/greeter.proto'), { keepCase: true, longs: String, enums: String, defaults: true });
const Greeter = (grpc.loadPackageDefinition(def) as any).helloworld.Greeter;
const INBOUND = /inbound listening on \S+:(\d+) for /;

type Reply = { message: string; server: string; mesh_id: string };

describe('a gRPC app behind its sidecar, called across sidecars over mutual TLS', () => {
  const dir = tempDir('mesh-grpc-inbound-');
  const ca = tempDir('mesh-ca-');
  const procs: RunningProcess[] = [];
  const common = () => [`--registry_address=${join(dir.path, 'registry')}`, `--ca_dir=${ca.path}`, '--log_level=warning', '--enable_http2', '--mtls=strict'];
  let client: any;
  let adminB = '';

  before(async () => {
    const app = startProcess(['--import', 'tsx', GREETER, '--label=behind-b'], {}, '');
    procs.push(app);
    const appPort = await app.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    const rules = join(dir.path, 'rules.yaml');
    writeFileSync(rules, ['rules:', '  - caller: go.mesh.srv.intruder', '    action: deny', ''].join('\n'));
    const b = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--server_name=go.mesh.srv.greeter', `--server_address=127.0.0.1:${appPort}`, `--authz_rules=${rules}`, ...common()]);
    procs.push(b);
    await b.waitForPort(INBOUND, 20_000);
    adminB = `http://127.0.0.1:${await b.waitForPort(PRINTED.sidecarAdmin)}`;
    const a = startProcess(['sidecar', '--address=127.0.0.1:0', '--admin_address=off', ...common()]);
    procs.push(a);
    const portA = await a.waitForPort(PRINTED.sidecar, 20_000);
    client = new Greeter(`127.0.0.1:${portA}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    client?.close();
    for (const p of procs.reverse()) await p.stop('SIGKILL');
    dir.cleanup();
    ca.cleanup();
  });

  it('the call reaches the app through both sidecars, unchanged, the hop over mutual TLS', async () => {
    const md = new grpc.Metadata();
    md.set('mesh-service', 'go.mesh.srv.greeter');
    md.set('mesh-id', 'across-1');
    const reply = await waitFor(
      () => new Promise<Reply | undefined>((resolve) => client.SayHello({ name: 'Ann' }, md, (err: grpc.ServiceError | null, r: Reply) => resolve(err ? undefined : r))),
      15_000,
    );
    assert.equal(reply.message, 'Hello Ann');
    assert.equal(reply.server, 'behind-b');
    assert.equal(reply.mesh_id, 'across-1');
    // B's inbound listener: an HTTP/2 connection, over a mutual TLS handshake, and the call counted.
    const stats = (await http('GET', `${adminB}/stats?filter=sidecar_inbound`)).text;
    assert.match(stats, /http\.sidecar_inbound\.downstream_cx_http2_total: [1-9]/);
    assert.match(stats, /http\.sidecar_inbound\.ssl\.handshake: [1-9]/);
    const calls = (await http('GET', `${adminB}/stats?filter=${encodeURIComponent('grpc\\.helloworld')}`)).text;
    assert.match(calls, /cluster\.inbound\|go\.mesh\.srv\.greeter\.grpc\.helloworld\.Greeter\.SayHello\.success: [1-9]/);
  });

  it('passes a server stream across, and the app\'s status', async () => {
    const md = new grpc.Metadata();
    md.set('mesh-service', 'go.mesh.srv.greeter');
    const got: string[] = [];
    const count = client.Count({ name: 'Bo', n: 3 }, md);
    count.on('data', (r: Reply) => got.push(r.message));
    await once(count, 'end');
    assert.deepEqual(got, ['Hello Bo #1', 'Hello Bo #2', 'Hello Bo #3']);
    await assert.rejects(
      new Promise((resolve, reject) => client.Fail({ code: grpc.status.FAILED_PRECONDITION, details: 'not now' }, md, (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r)))),
      (e: grpc.ServiceError) => e.code === grpc.status.FAILED_PRECONDITION && e.details === 'not now',
    );
  });
});
