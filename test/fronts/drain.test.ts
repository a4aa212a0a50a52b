/**
 * The drain on shutdown (docs/architecture.md, "Shutdown and drain"), with real processes on
 * loopback: a gateway under keep-alive load loses nothing and tells every client to close; a
 * request that outlives --drain_timeout is cut off and the exit code says so; a framework service
 * deregisters before it stops serving and finishes its in-flight calls.
 */
import { describe, test, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Client, errors } from 'undici';
import { PRINTED, ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { createRegistry } from '../../src/engines/registry/create.js';

const WHO = join(ROOT, 'test/fixtures/who-service.ts');

function startWho(dir: string, extra: string[] = []): RunningProcess {
  return startProcess(['--import', 'tsx', WHO, `--registry_address=${dir}`, '--log_level=warning', ...extra], {}, '');
}

async function startGateway(dir: string, extra: string[]): Promise<{ proc: RunningProcess; url: string; admin: string }> {
  const proc = startProcess([
    'api',
    '--address=127.0.0.1:0',
    '--admin_address=127.0.0.1:0',
    `--registry_address=${dir}`,
    '--handler=rpc',
    '--namespace=go.mesh.srv',
    '--log_level=warning',
    ...extra,
  ]);
  const port = await proc.waitForPort(PRINTED.api, 15000);
  const admin = await proc.waitForPort(PRINTED.apiAdmin);
  return { proc, url: `http://127.0.0.1:${port}`, admin: `http://127.0.0.1:${admin}` };
}

const slowCall = (ms: number) => JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Slow', request: { ms } });

async function stat(admin: string, name: string): Promise<number> {
  const res = await fetch(`${admin}/stats?filter=${encodeURIComponent(`^${name}$`)}`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(await res.text());
  return m ? Number(m[1]) : -1;
}

/** A socket the server closed before any answer, as a keep-alive client meets it on an idle connection. */
function closedIdle(err: unknown): boolean {
  return err instanceof errors.SocketError || (err as NodeJS.ErrnoException)?.code === 'ECONNRESET';
}

describe('drain on SIGTERM', () => {
  const dir = tempDir();
  const procs: RunningProcess[] = [];
  after(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    dir.cleanup();
  });

  test('a gateway under keep-alive load: nothing fails, every answer after the drain began says connection: close, exit 0 after drain_delay + the longest request', async () => {
    const who = startWho(dir.path);
    procs.push(who);
    await who.waitForOutput(/go\.mesh\.srv\.who listening/);
    const gw = await startGateway(dir.path, ['--drain_delay=1s', '--drain_timeout=10s']);
    procs.push(gw.proc);
    await waitFor(async () => (await fetch(`${gw.url}/who/am`)).status === 200, 10000);

    let drainSeen = false;
    let stopped = false;
    const failures: string[] = [];
    const keepAliveAfterDrain: string[] = [];
    let answered = 0;
    let closeAnswers = 0;
    // Several keep-alive clients, each sending one request after another until told to close.
    const clients = [0, 1, 2, 3].map(() => new Client(gw.url, { keepAliveTimeout: 30_000 }));
    const loops = clients.map(async (client, i) => {
      while (!stopped) {
        const sentAfterDrain = drainSeen;
        let attempt = 0;
        for (;;) {
          try {
            const res = await client.request({ method: 'GET', path: `/who/am?c=${i}` });
            await res.body.text();
            if (res.statusCode !== 200) failures.push(`status ${res.statusCode}`);
            answered++;
            const connection = String(res.headers.connection ?? '');
            if (connection === 'close') {
              closeAnswers++;
              return; // the server said close: this client is done with it
            }
            if (sentAfterDrain) keepAliveAfterDrain.push(connection);
            break;
          } catch (err) {
            // Retry on a connection the server closed while idle (what undici's callers do for idempotent requests).
            if (closedIdle(err) && ++attempt < 3) continue;
            failures.push(`${(err as Error).message}`);
            return;
          }
        }
      }
    });
    // One long request in flight when the signal comes.
    const longClient = new Client(gw.url);
    await waitFor(() => answered > 50, 10000);
    const long = longClient.request({ method: 'POST', path: '/rpc', headers: { 'content-type': 'application/json' }, body: slowCall(1500) });
    await waitFor(async () => (await stat(gw.admin, 'http.gateway.downstream_rq_active')) >= 1);

    const exited = gw.proc.stop('SIGTERM');
    // The health path turns 503 once the drain began (Connection: close is in effect from then).
    const poller = new Client(gw.url);
    await waitFor(async () => {
      const res = await poller.request({ method: 'GET', path: '/_mesh/health' });
      await res.body.text();
      return res.statusCode === 503;
    }, 5000, 10);
    drainSeen = true;
    const longRes = await long;
    const longBody = await longRes.body.text();
    assert.equal(longRes.statusCode, 200, longBody);
    assert.equal(longRes.headers.connection, 'close');
    await waitFor(() => loops.length > 0).then(() => Promise.all(loops));
    stopped = true;
    const code = await exited;
    await Promise.all([...clients, longClient, poller].map((c) => c.close().catch(() => undefined)));

    assert.deepEqual(failures, []);
    assert.deepEqual(keepAliveAfterDrain, [], 'requests sent after the drain began are answered with connection: close');
    assert.equal(code, 0, gw.proc.output());
    // Every request finished inside the drain: nothing was cut off at the 10 s limit.
    assert.doesNotMatch(gw.proc.output(), /drain timed out/);
    assert.ok(answered > 50);
    assert.ok(closeAnswers >= 1);
  });

  test('a request that outlives --drain_timeout is cut off: logged, exit 1', async () => {
    const who = startWho(dir.path);
    procs.push(who);
    await who.waitForOutput(/go\.mesh\.srv\.who listening/);
    const gw = await startGateway(dir.path, ['--drain_delay=0', '--drain_timeout=300ms', '--client_request_timeout=20s']);
    procs.push(gw.proc);
    await waitFor(async () => (await fetch(`${gw.url}/who/am`)).status === 200, 10000);
    const client = new Client(gw.url);
    const slow = client.request({ method: 'POST', path: '/rpc', headers: { 'content-type': 'application/json' }, body: slowCall(8000) }).then(
      () => 'answered',
      (err: Error) => err.message,
    );
    await waitFor(async () => (await stat(gw.admin, 'http.gateway.downstream_rq_active')) >= 1);
    const code = await gw.proc.stop('SIGTERM');
    assert.equal(code, 1, gw.proc.output());
    assert.match(gw.proc.output(), /drain timed out: 1 request\(s\) on 1 connection\(s\) cut off/);
    assert.notEqual(await slow, 'answered');
    await client.close().catch(() => undefined);
  });

  test('a framework service deregisters first, keeps serving during drain_delay, finishes in-flight calls, exits 0', async () => {
    const home = tempDir();
    const who = startWho(home.path, ['--drain_delay=1s', '--drain_timeout=10s']);
    procs.push(who);
    const line = await who.waitForOutput(/go\.mesh\.srv\.who listening on 127\.0\.0\.1:\d+/);
    const port = Number(/:(\d+)$/.exec(line)![1]);
    const registry = createRegistry('local', home.path);
    try {
      await waitFor(async () => (await registry.getService('go.mesh.srv.who')).some((s) => s.nodes.length > 0));
      const client = new Client(`http://127.0.0.1:${port}`);
      const call = (endpoint: string, body: string) =>
        client.request({ method: 'POST', path: '/', headers: { 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.who', 'mesh-endpoint': endpoint }, body });
      const inFlight = call('Who.Slow', '{"ms":1500}');
      await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`)).status === 200);
      const exited = who.stop('SIGTERM');
      // Deregistered while the call is still in flight.
      await waitFor(async () => (await registry.getService('go.mesh.srv.who')).every((s) => s.nodes.length === 0), 3000, 10);
      const health = await fetch(`http://127.0.0.1:${port}/health`);
      assert.equal(health.status, 503);
      assert.equal(health.headers.get('connection'), 'close');
      const res = await inFlight;
      assert.equal(res.statusCode, 200);
      assert.deepEqual(await res.body.json(), { done: true });
      assert.equal(res.headers.connection, 'close');
      assert.equal(await exited, 0, who.output());
      await client.close().catch(() => undefined);
    } finally {
      await registry.close();
      home.cleanup();
    }
  });
});
