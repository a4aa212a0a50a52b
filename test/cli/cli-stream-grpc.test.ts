/**
 * `mesh call --stream` against a plain @grpc/grpc-js server process (test/fixtures/grpc-greeter.ts)
 * registered with protocol=grpc (docs/cli.md "Streaming calls", docs/grpc.md "Streaming"):
 * server, bidi and client streams with JSON lines on stdout; a gRPC status mid-stream.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startProcess, runCli, tempDir, ROOT, type RunningProcess } from '../helpers.js';
import { PROTOS } from '../grpc-fixtures.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const reply = (message: string) => `{"message":"${message}","count":"0","mood":"MOOD_UNSPECIFIED","tags":[],"server":"c","mesh_id":"","x_trace":""}`;

describe('mesh call --stream reaches a gRPC node', () => {
  const home = tempDir('mesh-cli-stream-grpc-');
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  const proto = `--proto_path=${PROTOS}`;
  let greeter: RunningProcess;
  let sc: SidecarProcess | undefined;

  before(async () => {
    greeter = startProcess(['--import', 'tsx', join(ROOT, 'test/fixtures/grpc-greeter.ts'), '--label=c'], {}, '');
    const port = await greeter.waitForPort(/listening on 127\.0\.0\.1:(\d+)/);
    const record = { Name: 'go.mesh.srv.greeter', Nodes: [{ Id: 'c', Address: '127.0.0.1', Port: port, Metadata: { protocol: 'grpc' } }] };
    assert.equal((await runCli(['register', 'service', JSON.stringify(record)], env)).code, 0);
  });
  after(async () => {
    await Promise.all([greeter?.stop('SIGKILL'), sc?.stop()]);
    home.cleanup();
  });

  it('server: each message one compact JSON line, exit 0', async () => {
    const r = await runCli(['call', '--stream=server', proto, 'go.mesh.srv.greeter', 'Greeter.Count', '{"name":"S","n":3}'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, [1, 2, 3].map((i) => `${reply(`Hello S #${i}`)}\n`).join(''));
  });

  it('bidi and client: stdin lines are the requests; EOF ends the client side', async () => {
    const b = await runCli(['call', '--stream=bidi', proto, 'go.mesh.srv.greeter', 'Greeter.Chat'], env, 20000, { input: '{"name":"one"}\n{"name":"two"}\n' });
    assert.equal(b.code, 0, b.stderr);
    assert.deepEqual(
      b.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { message: string }).message),
      ['Hello one', 'Hello two'],
    );
    const c = await runCli(['call', '--stream=client', proto, 'go.mesh.srv.greeter', 'Greeter.Collect'], env, 20000, { input: '{"name":"a"}\n{"name":"b"}\n' });
    assert.equal(c.code, 0, c.stderr);
    assert.equal(c.stdout, `${reply('a+b')}\n`);
  });

  it('a gRPC status mid-stream: the messages before it on stdout, the mapped error JSON on stderr, exit 1', async () => {
    const r = await runCli(['call', '--stream=server', '--output=json', proto, 'go.mesh.srv.greeter', 'Greeter.Count', '{"name":"F","n":1,"fail_code":5,"fail_details":"gone"}'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, `${reply('Hello F #1')}\n`);
    assert.equal(r.stderr.trim(), '{"id":"helloworld.Greeter","code":404,"detail":"gone","status":"Not Found"}');
  });

  it('through a sidecar (--proxy_address, the sidecar has the protos): server and bidi', async () => {
    sc = await startSidecar(home.path, [proto]);
    const via = `--proxy_address=127.0.0.1:${sc.port}`;
    const r = await runCli([via, 'call', '--stream=server', 'go.mesh.srv.greeter', 'Greeter.Count', '{"name":"P","n":2}'], env);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `${reply('Hello P #1')}\n${reply('Hello P #2')}\n`);
    const b = await runCli([via, 'call', '--stream=bidi', 'go.mesh.srv.greeter', 'Greeter.Chat'], env, 20000, { input: '{"name":"x"}\n' });
    assert.equal(b.code, 0, b.stderr);
    assert.equal((JSON.parse(b.stdout) as { message: string }).message, 'Hello x');
  });
});
