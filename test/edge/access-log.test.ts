/**
 * Access logs (`--access_log`, `--access_log_format`) of `mesh api` as real processes on loopback
 * in front of a plain node:http backend: the exact bytes of a custom format (upstream host and
 * cluster, response flags, byte counts, `%%`), Envoy's default format on stdout, JSON lines, off,
 * SIGUSR1 reopening a renamed file, SIGTERM flushing the last lines, start-up errors and help;
 * and the writer on its own: a file that cannot be written, and the buffer cap.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { AccessLogWriter } from '../../src/base/http/access-log.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { runCli, tempDir, unwrapHelp, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

const FORMAT =
  '%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL% %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% "%REQ(USER-AGENT)%" %REQ(MESH-ID)% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %RESP(CONTENT-TYPE)% 100%%';

const read = (path: string) => (existsSync(path) ? readFileSync(path, 'utf8') : '');

async function statValue(admin: string, name: string): Promise<number | undefined> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  const found = (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name);
  return found?.value;
}

describe('access log: mesh api as a real process', () => {
  const dir = tempDir('mesh-access-log-');
  let registry: Registry;
  let plain: PlainApp;
  let downPort: number;
  const gateways: GatewayProcess[] = [];

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', () => r()));
    downPort = (holder.address() as { port: number }).port;
    await new Promise<void>((r) => holder.close(() => r()));
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    await registerPlain(registry, 'go.mesh.api.down', downPort);
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  async function start(args: string[]): Promise<GatewayProcess> {
    const gw = await startGatewayProcess(dir.path, ['--handler=rpc', '--drain_delay=0', ...args]);
    gateways.push(gw);
    return gw;
  }

  it('a custom format: the exact bytes of each line, reopened on SIGUSR1, flushed on SIGTERM', async () => {
    const file = join(dir.path, 'access.log');
    const gw = await start([`--access_log=${file}`, `--access_log_format=${FORMAT}`]);
    const ok = await http('POST', `${gw.url}/plain/echo`, { headers: { 'content-type': 'application/json', 'user-agent': 'test-agent/1', 'mesh-id': 'req-1' }, body: '{"a":1}' });
    assert.equal(ok.status, 200, ok.text);
    const down = await http('POST', `${gw.url}/down/call`, { headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(down.status, 502, down.text);
    const unknown = await http('GET', `${gw.url}/nothing/here`, { headers: { 'x-envoy-original-path': '/original' } });
    assert.equal(unknown.status, 404, unknown.text);
    const expected =
      `POST /plain/echo HTTP/1.1 200 - 7 ${Buffer.byteLength(ok.text)} "test-agent/1" req-1 127.0.0.1:${plain.port} go.mesh.api.plain application/json 100%\n` +
      `POST /down/call HTTP/1.1 502 UF 2 ${Buffer.byteLength(down.text)} "-" - 127.0.0.1:${downPort} go.mesh.api.down application/json 100%\n` +
      `GET /original HTTP/1.1 404 NC 0 ${Buffer.byteLength(unknown.text)} "-" - - - application/json 100%\n`;
    await waitFor(() => read(file).length >= expected.length, 10000);
    assert.equal(read(file), expected);

    // logrotate: rename, SIGUSR1, and the next line goes to a new file at the path.
    renameSync(file, `${file}.1`);
    gw.proc.child.kill('SIGUSR1');
    await waitFor(async () => (await statValue(gw.admin, 'access_log.reopened')) === 1, 10000);
    const after = await http('GET', `${gw.url}/plain/echo?x=1`, { headers: { 'user-agent': 'after' } });
    assert.equal(after.status, 200, after.text);
    const line = `GET /plain/echo?x=1 HTTP/1.1 200 - 0 ${Buffer.byteLength(after.text)} "after" - 127.0.0.1:${plain.port} go.mesh.api.plain application/json 100%\n`;
    await waitFor(() => read(file) === line, 10000);
    assert.equal(read(`${file}.1`), expected);
    assert.equal(await statValue(gw.admin, 'access_log.written'), 4);
    assert.equal(await statValue(gw.admin, 'access_log.dropped'), 0);

    // The last request's line is in the file once the process has exited on SIGTERM.
    const last = await http('GET', `${gw.url}/plain/echo?last=1`, { headers: { 'user-agent': 'last' } });
    assert.equal(last.status, 200);
    assert.equal(await gw.stop('SIGTERM'), 0);
    assert.equal(
      read(file),
      line + `GET /plain/echo?last=1 HTTP/1.1 200 - 0 ${Buffer.byteLength(last.text)} "last" - 127.0.0.1:${plain.port} go.mesh.api.plain application/json 100%\n`,
    );
  });

  it("Envoy's default format on stdout", async () => {
    const gw = await start(['--access_log=stdout']);
    const ok = await http('POST', `${gw.url}/plain/echo`, { headers: { 'content-type': 'application/json', 'user-agent': 'ua', 'mesh-id': 'id-7', 'x-forwarded-for': '10.0.0.1' }, body: '{}' });
    assert.equal(ok.status, 200);
    const re = new RegExp(
      `^\\[(\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z)\\] "POST /plain/echo HTTP/1\\.1" 200 - 2 ${Buffer.byteLength(ok.text)} (\\d+) - "10\\.0\\.0\\.1" "ua" "id-7" "127\\.0\\.0\\.1:${gw.port}" "127\\.0\\.0\\.1:${plain.port}" go\\.mesh\\.api\\.plain$`,
      'm',
    );
    const m = await waitFor(() => re.exec(gw.proc.output()), 10000);
    assert.ok(Math.abs(Date.parse(m[1]!) - Date.now()) < 60_000, m[1]);
  });

  it('--access_log_format=json: one JSON object per line, null for a missing value', async () => {
    const file = join(dir.path, 'access.json');
    const gw = await start([`--access_log=${file}`, '--access_log_format=json']);
    const ok = await http('GET', `${gw.url}/plain/echo`, { headers: { 'user-agent': 'j', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' } });
    assert.equal(ok.status, 200);
    await waitFor(() => read(file).endsWith('\n'), 10000);
    const lines = read(file).split('\n').filter((l) => l !== '');
    assert.equal(lines.length, 1);
    const entry = JSON.parse(lines[0]!) as Record<string, unknown>;
    assert.deepEqual(Object.keys(entry), [
      'start_time', 'method', 'path', 'protocol', 'response_code', 'response_flags', 'bytes_received', 'bytes_sent', 'duration',
      'x_forwarded_for', 'user_agent', 'request_id', 'authority', 'upstream_host', 'upstream_cluster', 'downstream_remote_address', 'trace_id',
    ]);
    assert.deepEqual(
      { ...entry, start_time: undefined, duration: undefined, downstream_remote_address: undefined, trace_id: undefined },
      {
        start_time: undefined, method: 'GET', path: '/plain/echo', protocol: 'HTTP/1.1', response_code: 200, response_flags: '-', bytes_received: 0,
        bytes_sent: Buffer.byteLength(ok.text), duration: undefined, x_forwarded_for: null, user_agent: 'j', request_id: null,
        authority: `127.0.0.1:${gw.port}`, upstream_host: `127.0.0.1:${plain.port}`, upstream_cluster: 'go.mesh.api.plain', downstream_remote_address: undefined,
        trace_id: undefined,
      },
    );
    assert.equal(typeof entry.duration, 'number');
    assert.equal(entry.trace_id, '0af7651916cd43dd8448eb211c80319c', 'the caller\'s trace id');
    assert.match(String(entry.downstream_remote_address), /^127\.0\.0\.1:\d+$/);
  });

  it('a request refused by the rate limit is flagged RL', async () => {
    const file = join(dir.path, 'access-rl.log');
    const gw = await start([`--access_log=${file}`, '--access_log_format=%RESPONSE_CODE% %RESPONSE_FLAGS% %UPSTREAM_CLUSTER%', '--rate_limit=1/h', '--rate_limit_burst=1']);
    assert.equal((await http('GET', `${gw.url}/plain/echo`)).status, 200);
    assert.equal((await http('GET', `${gw.url}/plain/echo`)).status, 429);
    await waitFor(() => read(file).split('\n').length === 3, 10000);
    assert.equal(read(file), '200 - go.mesh.api.plain\n429 RL -\n');
  });

  it('off by default for mesh api: no line, no access_log stats', async () => {
    const gw = await start([]);
    const ok = await http('GET', `${gw.url}/plain/echo?quiet=1`);
    assert.equal(ok.status, 200);
    assert.equal(await statValue(gw.admin, 'access_log.written'), undefined);
    assert.equal(await gw.stop('SIGTERM'), 0);
    assert.ok(!gw.proc.output().includes('quiet=1'), gw.proc.output());
  });

  it('a bad format or an empty destination exits 2 naming the flag; a file that cannot be opened stops the start', async () => {
    const bad = await runCli(['api', `--registry_address=${dir.path}`, '--access_log=stdout', '--access_log_format=%START_TIME% %NOPE(x)%']);
    assert.deepEqual([bad.code, bad.stdout, bad.stderr], [2, '', 'mesh: invalid value "%START_TIME% %NOPE(x)%" for flag --access_log_format: unknown operator %NOPE(x)%\n']);
    const lone = await runCli(['proxy', '-c', 'x.yaml', '--access_log_format=50% off']);
    assert.deepEqual([lone.code, lone.stderr], [2, 'mesh: invalid value "50% off" for flag --access_log_format: unterminated operator at "% off" (a literal % is written %%)\n']);
    const env = await runCli(['sidecar'], { MESH_ACCESS_LOG_FORMAT: '%REQ()%' });
    assert.deepEqual([env.code, env.stderr], [2, 'mesh: invalid value "%REQ()%" for MESH_ACCESS_LOG_FORMAT (--access_log_format): unknown operator %REQ()%\n']);
    const empty = await runCli(['api', '--access_log=']);
    assert.deepEqual([empty.code, empty.stderr], [2, 'mesh: invalid value "" for flag --access_log: use off, stdout or a file path\n']);
    const missing = join(dir.path, 'no-such-dir', 'access.log');
    const unopenable = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, `--access_log=${missing}`]);
    assert.equal(unopenable.code, 1, unopenable.stderr);
    assert.match(unopenable.stderr, new RegExp(`access log ${missing.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: cannot open: ENOENT`));
  });

  it('mesh api --help lists both flags, off by default; mesh dev --help: stdout', async () => {
    const [help, dev] = await Promise.all([runCli(['api', '--help']), runCli(['dev', '--help'])]);
    assert.equal(help.code, 0);
    help.stdout = unwrapHelp(help.stdout);
    dev.stdout = unwrapHelp(dev.stdout);
    assert.match(help.stdout, /--access_log string +front ends: access log, one line a request: off, stdout or a file path \(reopened on SIGUSR1\) \(default off\)\n/);
    assert.match(help.stdout, /--access_log_format string +access log format: text with %OPERATOR%s, or json/);
    assert.match(dev.stdout, /--access_log string .*\(default stdout\)\n/);
  });
});

describe('access log writer', () => {
  function writer(destination: string, extra: { maxBuffered?: number } = {}) {
    const stats = new StatsStore();
    const errors: unknown[] = [];
    const log = { error: (fields: unknown) => errors.push(fields), info: () => undefined } as never;
    const s = { written: stats.counter('access_log.written'), dropped: stats.counter('access_log.dropped'), writeErrors: stats.counter('access_log.write_errors'), reopened: stats.counter('access_log.reopened') };
    return { w: new AccessLogWriter({ destination, stats: s, log, ...extra }), s, errors };
  }

  it('a file that can no longer be opened: lines dropped and counted, one error logged, writing again once it can', async () => {
    const dir = tempDir('mesh-access-writer-');
    try {
      const sub = join(dir.path, 'logs');
      mkdirSync(sub);
      const path = join(sub, 'a.log');
      const { w, s, errors } = writer(path);
      w.write('one\n');
      await w.flush();
      assert.equal(read(path), 'one\n');
      rmSync(sub, { recursive: true });
      await w.reopen(); // the directory is gone: fails, logged once
      w.write('two\n');
      await w.flush();
      w.write('three\n');
      await w.flush();
      assert.deepEqual([s.written.value, s.dropped.value, errors.length], [1, 2, 1]);
      mkdirSync(sub);
      w.write('four\n');
      await w.flush();
      assert.equal(read(path), 'four\n');
      assert.deepEqual([s.written.value, s.dropped.value, errors.length], [2, 2, 1]);
      await w.close();
      w.write('after close\n');
      assert.equal(s.dropped.value, 3);
    } finally {
      dir.cleanup();
    }
  });

  it('bounded: over the cap, lines are dropped and counted, the rest written', async () => {
    const dir = tempDir('mesh-access-writer-');
    try {
      const path = join(dir.path, 'b.log');
      const { w, s } = writer(path, { maxBuffered: 20 });
      for (let i = 0; i < 5; i++) w.write(`line ${i}\n`); // 7 characters each: two fit
      await w.close();
      assert.equal(read(path), 'line 0\nline 1\n');
      assert.deepEqual([s.written.value, s.dropped.value], [2, 3]);
    } finally {
      dir.cleanup();
    }
  });
});
