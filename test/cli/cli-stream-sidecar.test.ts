/**
 * Streaming calls through a sidecar: `mesh --proxy_address=... call --stream=...` against a real
 * `mesh sidecar` process (with --sidecar_token) and a real framework service process, all sharing
 * one local registry; and the WebSocket route they use, `/rpc?service=S&endpoint=E`, on the sidecar
 * and on `mesh api` (its --rpc_allow and auth rules), with a ws client.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startProcess, runCli, tempDir, waitFor, ROOT, CLI, type RunningProcess } from '../helpers.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';
import { openWs } from '../fixtures/stream-clients.js';

const SERVICE = join(ROOT, 'test/fixtures/stream-service.ts');
const TOKEN = 'stream-token-0123456789abcdef';

/** Runs the CLI with `input` on its stdin (undefined: none, left open); `onStdout` sees stdout as it grows. */
function runWithStdin(args: string[], env: Record<string, string>, input: string | undefined, onStdout?: (out: string, child: ChildProcess) => void) {
  return runCli(args, env, 20000, { input, onStdout });
}

/** The status and body of a refused handshake. */
async function refused(url: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const c = openWs(url, headers);
  const err = (await c.open.then(
    () => assert.fail('the handshake was accepted'),
    (e: unknown) => e,
  )) as { status: number; body: string };
  return { status: err.status, body: err.body };
}

describe('mesh call --stream through a sidecar', () => {
  const home = tempDir('mesh-stream-sidecar-');
  let svc: RunningProcess;
  let sc: SidecarProcess;
  let gw: GatewayProcess;
  let proxy: string;
  let env: Record<string, string>;
  const auth = { 'mesh-sidecar-token': TOKEN };

  before(async () => {
    svc = startProcess(['--import', 'tsx', SERVICE, `--registry_address=${home.path}`, '--log_level=warning'], {}, '');
    const rules = join(home.path, 'rules.json');
    writeFileSync(rules, JSON.stringify([{ service: 'go.mesh.srv.streams', endpoint: 'Count.Fail', access: 'deny' }]));
    [sc, gw] = await Promise.all([
      startSidecar(home.path, [`--sidecar_token=${TOKEN}`]),
      startGatewayProcess(home.path, ['--rpc_allow=go.mesh.srv.streams', `--auth_rules=${rules}`]),
      svc.waitForOutput(/listening on/),
    ]);
    proxy = `--proxy_address=127.0.0.1:${sc.port}`;
    env = { MESH_SIDECAR_TOKEN: TOKEN, MESH_LOG_LEVEL: 'warning' };
    await waitFor(async () => (await runCli([proxy, 'list', 'services'], env)).stdout.includes('go.mesh.srv.streams') || undefined, 10000);
  });
  after(async () => {
    await Promise.all([svc?.stop('SIGKILL'), sc?.stop(), gw?.stop()]);
    home.cleanup();
  });

  it('server: each answer is one compact JSON line; exit 0', async () => {
    const r = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up', '{"to": 3}'], env);
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '{"n":1}\n{"n":2}\n{"n":3}\n');
    const d = await runCli([proxy, 'call', '--stream', 'server', 'go.mesh.srv.streams', 'Count.Up'], env);
    assert.equal(d.code, 0, d.stderr);
    assert.equal(d.stdout, '{"n":1}\n{"n":2}\n{"n":3}\n', 'no argument: the request is {}');
  });

  it('bidi: each non-empty stdin line is a request; EOF ends the client side', async () => {
    const r = await runWithStdin([proxy, 'call', '--stream=bidi', 'go.mesh.srv.streams', 'Echo.Chat'], env, '{"say":"hello"}\n\n  {"say": "world"}  \r\n');
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.equal(r.stdout, '{"echo":"hello"}\n{"echo":"world"}\n');
  });

  it('client: the one answer after stdin ends', async () => {
    const r = await runWithStdin([proxy, 'call', '--stream=client', 'go.mesh.srv.streams', 'Count.Sum'], env, '{"n":1}\n{"n":2}\n{"n":39}');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, '{"sum":42,"count":3}\n');
  });

  it('many answers pass in order (the socket is paused and resumed as the output drains)', async () => {
    const r = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up', '{"to": 3000}'], env);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split('\n');
    assert.equal(lines.length, 3001);
    assert.equal(lines[2999], '{"n":3000}');
    assert.ok(lines.slice(0, 3000).every((l, i) => l === `{"n":${i + 1}}`));
  });

  it('a unary endpoint is refused before the stream opens: exit 1, as on the direct path', async () => {
    const r = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Plain'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr, 'mesh: endpoint Count.Plain of go.mesh.srv.streams is not a streaming endpoint: a WebSocket at /rpc opens streaming calls only (call it with POST /rpc) (404 Not Found)\n');
    const u = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.nothing', 'Count.Up'], env);
    assert.equal(u.code, 1);
    assert.equal(u.stderr, 'mesh: service go.mesh.srv.nothing: not found (404 Not Found)\n');
  });

  it('a backend error: the answers before it on stdout, the same stderr and exit code as the direct path', async () => {
    const t = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Fail'], env);
    assert.equal(t.code, 1);
    assert.equal(t.stdout, '{"n":1}\n');
    assert.equal(t.stderr, 'mesh: counter jammed (409 Conflict)\n');
    const j = await runCli([proxy, 'call', '--stream=server', '--output=json', 'go.mesh.srv.streams', 'Count.Fail'], env);
    assert.equal(j.code, 1);
    assert.equal(j.stdout, '{"n":1}\n');
    assert.equal(j.stderr, '{"id":"go.mesh.sidecar","code":409,"detail":"counter jammed","status":"Conflict"}\n');
  });

  it('an explicit --client_request_timeout is the stream deadline (Mesh-Timeout): 504, exit 1', async () => {
    const r = await runCli([proxy, 'call', '--stream=server', '--output=json', '--client_request_timeout=300ms', 'go.mesh.srv.streams', 'Count.Hold'], env);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '{"n":1}\n');
    const err = JSON.parse(r.stderr) as { id: string; code: number };
    assert.equal(err.code, 504, r.stderr);
  });

  it('a missing or wrong sidecar token is refused with the sidecar\'s error (exit 1)', async () => {
    const none = await runCli([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up'], { MESH_LOG_LEVEL: 'warning' });
    assert.equal(none.code, 1);
    assert.equal(none.stdout, '');
    assert.equal(none.stderr, 'mesh: a sidecar token is required (Mesh-Sidecar-Token) (401 Unauthorized)\n');
    const wrong = await runCli([proxy, 'call', '--stream=server', '--output=json', 'go.mesh.srv.streams', 'Count.Up'], { MESH_SIDECAR_TOKEN: `${TOKEN}x`, MESH_LOG_LEVEL: 'warning' });
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stderr, '{"id":"go.mesh.auth","code":401,"detail":"wrong sidecar token","status":"Unauthorized"}\n');
  });

  it('no sidecar there: 502, exit 1', async () => {
    const r = await runCli(['--proxy_address=127.0.0.1:9', 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^mesh: sidecar at http:\/\/127\.0\.0\.1:9 not reachable: .* \(502 Bad Gateway\)\n$/);
  });

  it('Ctrl-C cancels the stream: the server sees the cancel, exit 130', async () => {
    const before = svc.output().split('cancelled: 499').length;
    let signalled = false;
    const r = await runWithStdin([proxy, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Hold'], env, undefined, (out, child) => {
      if (!signalled && out.includes('{"n":1}\n')) {
        signalled = true;
        child.kill('SIGINT');
      }
    });
    assert.equal(r.code, 130, r.stderr);
    assert.equal(r.stdout, '{"n":1}\n');
    await waitFor(() => svc.output().split('cancelled: 499').length > before || undefined);
  });

  describe('the WebSocket /rpc?service=S&endpoint=E', () => {
    const at = (query: string) => `ws://127.0.0.1:${sc.port}/rpc${query}`;

    it('a server stream: the first frame is the request, the end closes with 1000; method= works too', async () => {
      for (const q of ['?service=go.mesh.srv.streams&endpoint=Count.Up', '?Service=go.mesh.srv.streams&method=Count.Up']) {
        const c = openWs(at(q), auth);
        await c.open;
        c.ws.send('{"to":2}');
        assert.deepEqual(await c.done, { code: 1000, reason: '' });
        assert.deepEqual(c.messages, ['{"n":1}', '{"n":2}']);
      }
    });

    it('bidi: an empty frame ends the client side', async () => {
      const c = openWs(at('?service=go.mesh.srv.streams&endpoint=Echo.Chat'), auth);
      await c.open;
      c.ws.send('{"say":"a"}');
      c.ws.send('{"say":"b"}');
      c.ws.send('');
      assert.deepEqual(await c.done, { code: 1000, reason: '' });
      assert.deepEqual(c.messages, ['{"echo":"a"}', '{"echo":"b"}']);
    });

    it('a backend error closes with 4000 + its code and its detail as the reason', async () => {
      const c = openWs(at('?service=go.mesh.srv.streams&endpoint=Count.Fail'), auth);
      await c.open;
      c.ws.send('{}');
      assert.deepEqual(await c.done, { code: 4409, reason: 'counter jammed' });
      assert.deepEqual(c.messages, ['{"n":1}']);
    });

    it('refused before the handshake: 400 a missing or bad field, 404 unary or unknown, 401 no token, 403 a foreign Origin', async () => {
      const e = (code: number, status: string, detail: string) => ({ status: code, body: JSON.stringify({ id: 'go.mesh.sidecar', code, detail, status }) });
      assert.deepEqual(await refused(at('?endpoint=Count.Up'), auth), e(400, 'Bad Request', 'service: required'));
      assert.deepEqual(await refused(at(''), auth), e(400, 'Bad Request', 'service: required'));
      assert.deepEqual(await refused(at('?service=go.mesh.srv.streams'), auth), e(400, 'Bad Request', 'method: required (or endpoint)'));
      assert.deepEqual(await refused(at('?service=go.mesh.srv.streams&endpoint=Up'), auth), e(400, 'Bad Request', 'method: "Up" is not Endpoint.Method'));
      assert.deepEqual(
        await refused(at('?service=go.mesh.srv.streams&endpoint=Count.Plain'), auth),
        e(404, 'Not Found', 'endpoint Count.Plain of go.mesh.srv.streams is not a streaming endpoint: a WebSocket at /rpc opens streaming calls only (call it with POST /rpc)'),
      );
      assert.deepEqual(await refused(at('?service=go.mesh.srv.nothing&endpoint=A.B'), auth), e(404, 'Not Found', 'service go.mesh.srv.nothing: not found'));
      assert.deepEqual(await refused(at('?service=go.mesh.srv.streams&endpoint=Count.Up')), {
        status: 401,
        body: '{"id":"go.mesh.auth","code":401,"detail":"a sidecar token is required (Mesh-Sidecar-Token)","status":"Unauthorized"}',
      });
      assert.deepEqual(
        await refused(at('?service=go.mesh.srv.streams&endpoint=Count.Up'), { ...auth, origin: 'http://evil.example' }),
        e(403, 'Forbidden', 'origin http://evil.example not allowed (allow it with --cors)'),
      );
    });

    it('the gateway serves it too, behind --rpc_allow (403) and the auth rules for the named endpoint (403)', async () => {
      const gwAt = (query: string) => `ws://127.0.0.1:${gw.port}/rpc${query}`;
      const c = openWs(gwAt('?service=go.mesh.srv.streams&endpoint=Count.Up'));
      await c.open;
      c.ws.send('{"to":1}');
      assert.deepEqual(await c.done, { code: 1000, reason: '' });
      assert.deepEqual(c.messages, ['{"n":1}']);
      assert.deepEqual(await refused(gwAt('?service=go.mesh.srv.secret&endpoint=Count.Up')), {
        status: 403,
        body: '{"id":"go.mesh.api","code":403,"detail":"service go.mesh.srv.secret may not be called through /rpc (--rpc_allow)","status":"Forbidden"}',
      });
      assert.deepEqual(await refused(gwAt('?service=go.mesh.srv.streams&endpoint=Count.Fail')), {
        status: 403,
        body: '{"id":"go.mesh.auth","code":403,"detail":"access to go.mesh.srv.streams Count.Fail denied by rule 1","status":"Forbidden"}',
      });
      assert.deepEqual(await refused(gwAt('?endpoint=Count.Fail')), {
        status: 400,
        body: '{"id":"go.mesh.api","code":400,"detail":"service: required","status":"Bad Request"}',
      });
    });
  });
});
