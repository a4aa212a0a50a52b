/**
 * The sidecar's app registration and health checker (SPEC 3.3, DESIGN 6) against a real sidecar
 * process: deregistered by the next check when the app answers non-200 or not at all (the
 * checker applies an outcome before it sends the next check), registered again on the first healthy answer, withdrawn while draining, deregistered on
 * SIGTERM, expired by its TTL when the sidecar is killed; start-up errors name the flag.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createRegistry } from '../../src/engines/registry/create.js';
import { LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import { AppFlagError, appOptionsFromFlags, type AppFlags } from '../../src/fronts/sidecar/health-checker.js';
import { http, startPlainApp, startSidecar, type PlainApp, type SidecarProcess } from '../fixtures/sidecar-common.js';

const INTERVAL = 300;
const TIMEOUT = 200;

type Mode = 'ok' | 'fail' | 'hang';

/** The stored expiry (epoch ms) of a service's node in a local registry directory, read as another program would. */
function expiryOf(dir: string, service: string): number | undefined {
  const db = new Database(join(dir, LOCAL_DB_FILE), { readonly: true });
  try {
    const row = db.prepare(`SELECT expires_at FROM nodes WHERE service = ?`).get(service) as { expires_at: number | null } | undefined;
    return row?.expires_at ?? undefined;
  } finally {
    db.close();
  }
}

async function healthApp(): Promise<PlainApp & { setMode: (m: Mode) => void; checks: () => number }> {
  let mode: Mode = 'ok';
  let checks = 0;
  const app = await startPlainApp((req, res) => {
    if (req.url !== '/health') {
      res.writeHead(404).end();
      return;
    }
    checks++;
    if (mode === 'hang') return; // never answers
    res.writeHead(mode === 'ok' ? 200 : 503, { 'content-type': 'text/plain' }).end(mode);
  });
  return Object.assign(app, { setMode: (m: Mode) => (mode = m), checks: () => checks });
}

describe('sidecar health checker', () => {
  const home = tempDir('mesh-sidecar-hc-');
  const NAME = 'go.mesh.srv.checked';
  let app: Awaited<ReturnType<typeof healthApp>>;
  let sc: SidecarProcess;

  const lookup = async () => {
    const r = await http('GET', `${sc.base}/registry?service=${NAME}`);
    return r.status === 200 ? r.json<{ nodes: Array<{ id: string; address: string; port: number }> }>() : undefined;
  };
  /** Waits until registered (or not). */
  const until = async (registered: boolean, limitMs: number) => {
    await waitFor(async () => Boolean(await lookup()) === registered, limitMs, 20);
  };

  before(async () => {
    app = await healthApp();
    sc = await startSidecar(home.path, [
      `--server_name=${NAME}`,
      `--server_address=127.0.0.1:${app.port}`,
      `--healthcheck_url=http://127.0.0.1:${app.port}/health`,
      `--healthcheck_interval=${INTERVAL}ms`,
      `--healthcheck_timeout=${TIMEOUT}ms`,
    ]);
  });
  after(async () => {
    await sc?.stop('SIGKILL');
    await app?.close();
    home.cleanup();
  });

  it('registers the healthy app at start as {Name, Nodes:[{Id: <name>-<uuid>, Address, Port}]}', async () => {
    await until(true, 3000);
    const svc = (await lookup())!;
    assert.equal(svc.nodes.length, 1);
    assert.match(svc.nodes[0]!.id, new RegExp(`^${NAME.replace(/\./g, '\\.')}-[0-9a-f-]{36}$`));
    assert.equal(svc.nodes[0]!.address, '127.0.0.1');
    assert.equal(svc.nodes[0]!.port, app.port);
  });

  // The checker applies a check's outcome before it sends the next one (one interval later): so
  // when the check after the first one in a new mode arrives, that mode's outcome is in the registry.
  const nextChecks = async (n: number) => {
    const checks = app.checks();
    await waitFor(() => app.checks() >= checks + n, 5000, 20);
  };

  it('deregisters on a non-200 answer by the next check, and registers again on recovery', async () => {
    await until(true, 3000);
    app.setMode('fail');
    await nextChecks(2);
    assert.equal(await lookup(), undefined, 'deregistered after the first failing check');
    app.setMode('ok');
    await nextChecks(2);
    assert.ok(await lookup(), 'registered again after the first healthy check');
  });

  it('deregisters an app that does not answer within the timeout', async () => {
    await until(true, 3000);
    app.setMode('hang');
    await nextChecks(2);
    assert.equal(await lookup(), undefined, 'deregistered once the first check timed out');
    app.setMode('ok');
    await until(true, 3000);
  });

  it('draining (admin /healthcheck/fail) withdraws the app until /healthcheck/ok', async () => {
    await until(true, 3000);
    const fail = await http('GET', `${sc.admin}/healthcheck/fail`);
    assert.equal(fail.status, 200, fail.text);
    assert.equal(await lookup(), undefined, 'withdrawn by the time the admin answers');
    assert.equal((await http('GET', `${sc.base}/_mesh/health`)).status, 503);
    // Two more healthy checks: the first one's outcome is applied before the second is sent.
    const checks = app.checks();
    await waitFor(() => app.checks() >= checks + 2, 5000, 20);
    assert.equal(await lookup(), undefined, 'healthy checks do not register it while draining');
    const ok = await http('GET', `${sc.admin}/healthcheck/ok`);
    assert.equal(ok.status, 200, ok.text);
    await until(true, 1000);
    assert.equal((await http('GET', `${sc.base}/_mesh/health`)).status, 200);
  });

  it('SIGTERM deregisters the app and exits 0', async () => {
    await until(true, 3000);
    const code = await sc.stop('SIGTERM');
    assert.equal(code, 0, sc.proc.output());
    const registry = createRegistry('local', home.path);
    try {
      assert.deepEqual(await registry.getService(NAME), [], 'deregistered before the exit');
    } finally {
      await registry.close();
    }
  });
});

describe('sidecar app registration without a health URL; TTL after a crash', () => {
  const home = tempDir('mesh-sidecar-app-');
  after(() => home.cleanup());

  it('registers at start with a TTL, so a killed sidecar leaves no zombie', async () => {
    const registry = createRegistry('local', home.path);
    const removed: string[] = [];
    const watcher = registry.watch((e) => void (e.action === 'delete' && removed.push(e.service.name)), { service: 'plain.app' });
    await watcher.ready;
    const sc = await startSidecar(home.path, ['--server_name=plain.app', '--server_address=127.0.0.1:6553', '--register_ttl=1s', '--register_interval=300ms']);
    try {
      await waitFor(async () => (await http('GET', `${sc.base}/registry?service=plain.app`)).status === 200, 3000, 20);
      // The event: a refresh written after the first registration's TTL ran out (its expiry lies a
      // TTL beyond the first one), with no delete from the registry in between.
      const first = expiryOf(home.path, 'plain.app');
      assert.ok(first !== undefined, 'registered with an expiry');
      await waitFor(() => (expiryOf(home.path, 'plain.app') ?? 0) >= first + 1000, 10_000, 20);
      assert.equal((await http('GET', `${sc.base}/registry?service=plain.app`)).status, 200, 'refreshed before its TTL ran out');
      assert.deepEqual(removed, [], 'never expired in between');
    } finally {
      watcher.stop();
      await sc.stop('SIGKILL');
    }
    const killed = Date.now();
    try {
      assert.equal((await registry.getService('plain.app')).length, 1, 'a SIGKILL does not deregister');
      // What it leaves expires one TTL after its last refresh, at most.
      assert.ok(expiryOf(home.path, 'plain.app')! <= killed + 1000, 'the record expires within its TTL of the kill');
      await waitFor(async () => (await registry.getService('plain.app')).length === 0, 3000, 50);
    } finally {
      await registry.close();
    }
  });
});

describe('sidecar start-up errors', () => {
  const home = tempDir('mesh-sidecar-err-');
  after(() => home.cleanup());

  it('a real process names the missing or bad flag and exits 2', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--server_name=a'], /--server_name needs --server_address/],
      [['--server_address=127.0.0.1:9000'], /--server_address needs --server_name/],
      [['--server_name=a', '--server_address=nohost'], /--server_address.*host:port/],
    ];
    const results = await Promise.all(
      cases.map(async ([flags]) => {
        const r = await runCli(['sidecar', `--registry_address=${home.path}`, '--admin_address=off', '--address=127.0.0.1:0', ...flags], {}, 30000);
        return { code: r.code, out: r.stdout + r.stderr };
      }),
    );
    results.forEach((r, i) => {
      assert.equal(r.code, 2, `${cases[i]![0].join(' ')}: exit ${r.code}\n${r.out}`);
      assert.match(r.out, cases[i]![1], cases[i]![0].join(' '));
    });
  });

  it('every inconsistent or bad app flag is an error naming the flag', () => {
    const base = { healthcheck_interval: 10_000, healthcheck_timeout: 2_000, register_ttl: 30_000, register_interval: 10_000 };
    const cases: Array<[Partial<AppFlags>, boolean, RegExp]> = [
      [{ server_name: 'a' }, false, /--server_name needs --server_address/],
      [{ server_address: '127.0.0.1:9000' }, false, /--server_address needs --server_name/],
      [{ healthcheck_url: 'http://127.0.0.1:1/h' }, false, /--healthcheck_url needs --server_name and --server_address/],
      [{ server_name: 'a', server_address: 'nohost' }, false, /--server_address.*host:port/],
      [{ server_name: 'a', server_address: ':80' }, false, /--server_address/],
      [{ server_name: 'a', server_address: '0.0.0.0:80' }, false, /--server_address.*wildcard/],
      [{ server_name: 'a', server_address: '127.0.0.1:70000' }, false, /--server_address.*1 to 65535/],
      [{ server_name: 'a', server_address: '127.0.0.1:80', healthcheck_url: 'ftp://x/' }, false, /--healthcheck_url/],
      [{ server_name: 'a', server_address: '127.0.0.1:80', healthcheck_url: 'not a url' }, false, /--healthcheck_url/],
      [{ server_name: 'a', server_address: '127.0.0.1:80', healthcheck_url: 'http://x/', healthcheck_interval: 0 }, false, /--healthcheck_interval/],
      [{ server_name: 'a', server_address: '127.0.0.1:80', healthcheck_url: 'http://x/', healthcheck_interval: 1000, register_ttl: 1000 }, true, /--register_ttl/],
      [{ server_name: 'a', server_address: '127.0.0.1:80', register_ttl: 1000, register_interval: 1000 }, false, /--register_interval/],
    ];
    for (const [flags, ttlGiven, re] of cases) {
      assert.throws(() => appOptionsFromFlags({ ...base, ...flags }, ttlGiven), (err: Error) => err instanceof AppFlagError && re.test(err.format('flag')), JSON.stringify(flags));
    }
    assert.equal(appOptionsFromFlags(base, false), undefined);
    const checked = appOptionsFromFlags({ ...base, server_name: 'a', server_address: '[::1]:80', healthcheck_url: 'http://[::1]:80/h', healthcheck_interval: 300, healthcheck_timeout: 200 }, false)!;
    assert.equal(checked.ttlMs, 3 * 300 + 200, 'TTL: 3 x interval + timeout unless --register_ttl is given');
    assert.equal(checked.refreshMs, 300);
    const plain = appOptionsFromFlags({ ...base, server_name: 'a', server_address: 'app.internal:8080' }, false)!;
    assert.equal(plain.ttlMs, 30_000);
    assert.equal(plain.refreshMs, 10_000);
  });
});
