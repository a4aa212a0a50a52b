/**
 * `mesh call --stream=server|client|bidi` against a real framework service process sharing the
 * embedded local registry: answers printed one JSON line each, requests read from stdin, the
 * server's error on stderr (exit 1), Ctrl-C cancelling the stream (the server sees it, exit 130),
 * the deadline, bad input (exit 2). Through a sidecar: test/cli/cli-stream-sidecar.test.ts.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { runCli, tempDir, waitFor, CLI, type RunningProcess } from '../helpers.js';
import { startStreamService } from '../fixtures/stream-service-process.js';


/** Runs the CLI with `input` on its stdin; `onStdout` sees stdout as it grows (for signals). */
function runWithStdin(args: string[], env: Record<string, string>, input: string | undefined, onStdout?: (out: string, child: ChildProcess) => void) {
  return runCli(args, env, 20000, { input, onStdout });
}

describe('mesh call --stream', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let svc: RunningProcess;

  before(async () => {
    svc = await startStreamService(home.path, env);
  });
  after(async () => {
    await svc.stop('SIGKILL');
    home.cleanup();
  });

  it('server: the JSON argument is the request; each answer is one compact JSON line; exit 0', async () => {
    const r = await runCli(['call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up', '{"to": 3}'], env);
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '{"n":1}\n{"n":2}\n{"n":3}\n');
    const j = await runCli(['call', 'go.mesh.srv.streams', 'Count.Up', '--stream', 'server', '--output=json'], env);
    assert.equal(j.code, 0);
    assert.equal(j.stdout, '{"n":1}\n{"n":2}\n{"n":3}\n', 'no argument: the request is {}');
  });

  it('bidi: each non-empty stdin line is a request; EOF ends the client side', async () => {
    const r = await runWithStdin(['call', '--stream=bidi', 'go.mesh.srv.streams', 'Echo.Chat'], env, '{"say":"hello"}\n\n  {"say": "world"}  \r\n');
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '{"echo":"hello"}\n{"echo":"world"}\n');
  });

  it('client: the one answer after stdin ends', async () => {
    const r = await runWithStdin(['call', '--stream=client', 'go.mesh.srv.streams', 'Count.Sum'], env, '{"n":1}\n{"n":2}\n{"n":39}');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '{"sum":42,"count":3}\n');
  });

  it('a bad stdin line exits 2 naming the line; the lines after it are not sent', async () => {
    const r = await runWithStdin(['call', '--stream=bidi', 'go.mesh.srv.streams', 'Echo.Chat'], env, '{"say":"a"}\n\n{"say":\n{"say":"c"}\n');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^mesh: call --stream: line 3 of stdin is not valid JSON: /);
    assert.ok(!r.stdout.includes('"c"'), r.stdout);
  });

  it('a stdin line over --max_body_size exits 2 naming the line (memory stays bounded)', async () => {
    const long = `{"say":"${'x'.repeat(200)}"}`;
    const r = await runWithStdin(['call', '--stream=bidi', '--max_body_size=100', 'go.mesh.srv.streams', 'Echo.Chat'], env, `{"say":"a"}\n${long}\n`);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: call --stream: line 2 of stdin is longer than 100 bytes (--max_body_size)\n');
  });

  it('a stream error: the answers before it on stdout, the error JSON on stderr, exit 1', async () => {
    const r = await runCli(['call', '--stream=server', '--output=json', 'go.mesh.srv.streams', 'Count.Fail'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '{"n":1}\n');
    assert.equal(r.stderr, '{"id":"go.mesh.srv.streams","code":409,"detail":"counter jammed","status":"Conflict"}\n');
    const t = await runCli(['call', '--stream=server', 'go.mesh.srv.streams', 'Count.Fail'], env);
    assert.equal(t.code, 1);
    assert.equal(t.stderr, 'mesh: counter jammed (409 Conflict)\n');
  });

  it('Ctrl-C cancels the stream: the server sees the cancel, exit 130', async () => {
    const before = svc.output().split('cancelled: 499').length;
    let signalled = false;
    const r = await runWithStdin(['call', '--stream=server', 'go.mesh.srv.streams', 'Count.Hold'], env, undefined, (out, child) => {
      if (!signalled && out.includes('{"n":1}\n')) {
        signalled = true;
        child.kill('SIGINT');
      }
    });
    assert.equal(r.code, 130, r.stderr);
    assert.equal(r.stdout, '{"n":1}\n');
    await waitFor(() => svc.output().split('cancelled: 499').length > before || undefined);
  });

  it('an explicit --client_request_timeout is the stream deadline (504, exit 1)', async () => {
    const r = await runCli(['call', '--stream=server', '--output=json', '--client_request_timeout=300ms', 'go.mesh.srv.streams', 'Count.Hold'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '{"n":1}\n');
    const err = JSON.parse(r.stderr) as { code: number };
    assert.equal(err.code, 504, r.stderr);
  });

  it('bad usage exits 2: a bad --stream value names the flag; a JSON argument to a bidi stream', async () => {
    let r = await runCli(['call', '--stream=both', 'go.mesh.srv.streams', 'Count.Up'], env);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'mesh: invalid value "both" for flag --stream: use one of server, client, bidi\n');
    r = await runCli(['call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up', '{"to":'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /request is not valid JSON/);
    r = await runCli(['call', '--stream=bidi', 'go.mesh.srv.streams', 'Echo.Chat', '{}'], env);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--stream=bidi: the requests are read from stdin/);
  });
});
