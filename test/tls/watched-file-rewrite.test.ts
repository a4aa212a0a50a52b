/**
 * Every file mesh watches is read once it has settled (readSettled, src/tls/workload/watch.ts):
 * a file rewritten in place (truncated, then written in parts, as editors, `cat > file` and most
 * config tools do) is never taken half-written, and an empty file is never taken as an empty
 * configuration. In process, against real fronts on loopback with real clients: the test truncates
 * the file, then writes each next part from the reader's own reads (`onRead`), so the reader sees
 * the empty file and every partial one, in order, without a sleep deciding anything.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { Pool } from 'undici';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { loadProxyConfig } from '../../src/fronts/proxy/config.js';
import { Proxy } from '../../src/fronts/proxy/server.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { EdgeAuth, readAuthSetup, type AuthFlags } from '../../src/edge/auth/edge.js';
import { ServiceAuthz, readAuthzSetup } from '../../src/edge/auth/authz.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { readSettled, SettledReadError } from '../../src/tls/workload/watch.js';
import { FileCertificateStore } from '../../src/tls/file-store.js';
import { createCsr, createRoot, generateKeyPair, privateKeyPem } from '../../src/tls/workload/x509.js';
import { FileWorkloadTls } from '../../src/tls/workload/files-source.js';
import { caPaths, initCa } from '../../src/tls/workload/ca.js';
import { LocalCaSigner } from '../../src/tls/workload/signer.js';
import { connect, createServer as createTlsServer } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { tempDir, waitFor } from '../helpers.js';

/**
 * A rewrite in place driven by the reader: `start()` truncates the file; each later read of it by
 * the reader (its `onRead`) appends the next part, synchronously, before the reader looks again.
 */
function rewriter(file: string) {
  let parts: string[] = [];
  let reads = 0;
  return {
    onRead: (_read: number, paths: readonly string[]) => {
      if (!paths.includes(file)) return;
      reads++;
      const next = parts.shift();
      if (next !== undefined) appendFileSync(file, next);
    },
    /** Truncates the file; the reader's next reads see it empty, then each part added. */
    start(next: string[]) {
      parts = [...next];
      writeFileSync(file, '');
    },
    get reads() {
      return reads;
    },
    get pending() {
      return parts.length;
    },
  };
}

/** Requests in a loop on `paths` until stop(); what was not a 200 is kept. */
function load(pool: Pool, paths: string[]) {
  const failures: Array<{ path: string; status: number; body: string }> = [];
  const apps = new Map<string, string>();
  let served = 0;
  let stopped = false;
  const worker = async (i: number) => {
    for (let n = i; !stopped; n++) {
      const path = paths[n % paths.length]!;
      let status: number;
      let body: string;
      try {
        const res = await pool.request({ method: 'GET', path });
        status = res.statusCode;
        body = await res.body.text();
      } catch (err) {
        if (stopped) return;
        failures.push({ path, status: 0, body: (err as Error).message });
        continue;
      }
      served++;
      if (status !== 200) failures.push({ path, status, body });
      else apps.set(path, (JSON.parse(body) as { app: string }).app);
    }
  };
  const workers = Array.from({ length: 4 }, (_, i) => worker(i));
  return {
    failures,
    /** Waits for `cond`, or for the first failure: either way no request may have failed. */
    async until(cond: () => boolean, timeoutMs = 10_000) {
      await waitFor(() => failures.length > 0 || cond(), timeoutMs);
      assert.deepEqual(failures, []);
    },
    /** The app that answered each path last. */
    apps,
    get served() {
      return served;
    },
    async stop() {
      stopped = true;
      await Promise.all(workers);
    },
  };
}

const httpRoute = (name: string, prefix: string, cluster: string) =>
  `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: ${name}}\nspec:\n  rules:\n    - matches: [{path: {type: PathPrefix, value: ${prefix}}}]\n      backendRefs: [{name: ${cluster}}]\n`;
const routeFile = (cluster: string) => [httpRoute('a', '/a', cluster), '---\n', httpRoute('b', '/b', cluster)];

describe('watched files rewritten in place', () => {
  const dir = tempDir('mesh-rewrite-');
  let one: PlainApp;
  let two: PlainApp;
  before(async () => {
    [one, two] = await Promise.all([startPlainApp('one'), startPlainApp('two')]);
  });
  after(async () => {
    await Promise.all([one?.close(), two?.close()]);
    dir.cleanup();
  });

  /** An in-process `mesh proxy -c FILE` with the watch tuned for the test; its listener's pool. */
  async function proxy(file: string, watch: ConstructorParameters<typeof Proxy>[2]) {
    const config = loadProxyConfig(file);
    const registry = new MemoryRegistry();
    const runtime = new Runtime(optionsFromFlags(parseArgs(['--log_level=off', '--drain_delay=0', '--admin_address=off'], {}).config, { registry }), { role: 'proxy', staticClusters: config.clusters, registryClusters: config.usesRegistry });
    const p = new Proxy(runtime, config, watch);
    const [bound] = await p.start();
    const pool = new Pool(`http://127.0.0.1:${bound!.address.port}`, { connections: 4 });
    let traffic: ReturnType<typeof load> | undefined;
    return {
      proxy: p,
      runtime,
      /** Requests in a loop on `paths`, stopped by close() at the latest. */
      load(paths: string[]) {
        traffic = load(pool, paths);
        return traffic;
      },
      stat: (name: string) => runtime.stats.counter(name).value,
      async close() {
        await traffic?.stop();
        await pool.close();
        await runtime.shutdown();
      },
    };
  }

  const clusters = () => `clusters:\n  - {name: one, hosts: ["127.0.0.1:${one.port}"]}\n  - {name: two, hosts: ["127.0.0.1:${two.port}"]}\n`;

  it('a route file truncated and written in parts under load: never an empty or half table, no 404; the full new table in the end', async () => {
    const routes = join(dir.path, 'routes.yaml');
    writeFileSync(routes, routeFile('one').join(''));
    const file = join(dir.path, 'proxy-route-file.yaml');
    writeFileSync(file, `listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    route_file: routes.yaml\n${clusters()}`);
    const rw = rewriter(routes);
    const px = await proxy(file, { pollMs: 60_000, settleMs: 20, onRead: rw.onRead });
    try {
      const traffic = px.load(['/a/x', '/b/x']);
      await traffic.until(() => traffic.apps.get('/a/x') === 'one' && traffic.apps.get('/b/x') === 'one');

      // The same content rewritten: read empty, then with route a only, then whole; nothing changes.
      rw.start(routeFile('one'));
      await traffic.until(() => rw.pending === 0 && rw.reads >= 4);
      const live = px.proxy.listeners[0]!.routes!;
      await live.reload();
      assert.equal(px.stat('routes.update_success'), 0);
      assert.equal(px.stat('routes.update_failure'), 0);

      // New content (both routes to cluster two), written the same way.
      const served = traffic.served;
      rw.start(routeFile('two'));
      await traffic.until(() => px.stat('routes.update_success') === 1);
      await traffic.until(() => traffic.served > served + 20 && traffic.apps.get('/a/x') === 'two' && traffic.apps.get('/b/x') === 'two');
      await traffic.stop();
      assert.deepEqual(traffic.failures, []);
      assert.equal(px.stat('routes.update_failure'), 0);
      assert.deepEqual(live.routes.map((r) => r.name), ['a', 'b']);
    } finally {
      await px.close();
    }
  });

  it('mesh api --routes: a route file truncated and written in parts under load: no 404, the full new table in the end', async () => {
    const routes = join(dir.path, 'gateway-routes.yaml');
    const file = (service: string) => routeFile(service).map((part) => part.replace('spec:\n', 'spec:\n  handler: proxy\n'));
    writeFileSync(routes, file('go.mesh.srv.one').join(''));
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.srv.one', one.port);
    await registerPlain(registry, 'go.mesh.srv.two', two.port);
    const runtime = new Runtime(optionsFromFlags(parseArgs(['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--client_retries=0'], {}).config, { registry }), { role: 'api' });
    const rw = rewriter(routes);
    const gw = new Gateway(runtime, { address: '127.0.0.1:0', routesFile: routes, routesSettle: { settleMs: 20, onRead: rw.onRead } });
    const bound = await gw.start();
    const pool = new Pool(`http://127.0.0.1:${bound.port}`, { connections: 4 });
    const traffic = load(pool, ['/a/x', '/b/x']);
    try {
      await traffic.until(() => traffic.apps.get('/a/x') === 'one' && traffic.apps.get('/b/x') === 'one');
      const served = traffic.served;
      rw.start(file('go.mesh.srv.two'));
      await traffic.until(() => runtime.stats.counter('routes.update_success').value === 1);
      await traffic.until(() => traffic.served > served + 20 && traffic.apps.get('/a/x') === 'two' && traffic.apps.get('/b/x') === 'two');
      assert.ok(rw.reads >= 4);
      assert.equal(runtime.stats.counter('routes.update_failure').value, 0);
      assert.equal(runtime.stats.gauge('routes.active').value, 2);
    } finally {
      await traffic.stop();
      await pool.close();
      await runtime.shutdown();
    }
  });

  it('an empty route file is refused on a reload: the old routes stay (counted, said in /routes), no 404', async () => {
    const routes = join(dir.path, 'routes-empty.yaml');
    writeFileSync(routes, routeFile('one').join(''));
    const file = join(dir.path, 'proxy-empty.yaml');
    writeFileSync(file, `listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    route_file: routes-empty.yaml\n${clusters()}`);
    const px = await proxy(file, { pollMs: 60_000, settleMs: 20 });
    try {
      const traffic = px.load(['/a/x', '/b/x']);
      await traffic.until(() => traffic.apps.get('/a/x') === 'one' && traffic.apps.get('/b/x') === 'one');
      writeFileSync(routes, '');
      await traffic.until(() => px.stat('routes.update_failure') >= 1);
      const live = px.proxy.listeners[0]!.routes!;
      assert.match(live.dump().last_reload_error ?? '', /routes-empty\.yaml: is empty: an empty file is refused on a reload/);
      const served = traffic.served;
      await traffic.until(() => traffic.served > served + 20);
      writeFileSync(routes, routeFile('two').join(''));
      await traffic.until(() => px.stat('routes.update_success') === 1);
      await traffic.until(() => traffic.apps.get('/a/x') === 'two' && traffic.apps.get('/b/x') === 'two');
      await traffic.stop();
      assert.deepEqual(traffic.failures, []);
      assert.equal(live.dump().last_reload_error, null);
    } finally {
      await px.close();
    }
  });

  it('the mesh proxy configuration truncated and written in parts under load: no 404, the whole new file in use; an empty one is refused', async () => {
    const file = join(dir.path, 'proxy.yaml');
    const config = (cluster: string) => [
      `${clusters()}listeners:\n  - name: ingress\n    address: 127.0.0.1:0\n    routes:\n      - {match: {prefix: /a}, cluster: ${cluster}}\n`,
      `      - {match: {prefix: /b}, cluster: ${cluster}}\n`,
    ];
    writeFileSync(file, config('one').join(''));
    const rw = rewriter(file);
    const px = await proxy(file, { pollMs: 60_000, settleMs: 20, onRead: rw.onRead });
    try {
      const traffic = px.load(['/a/x', '/b/x']);
      await traffic.until(() => traffic.apps.get('/a/x') === 'one' && traffic.apps.get('/b/x') === 'one');
      rw.start(config('two'));
      await traffic.until(() => px.stat('proxy.config.update_success') === 1);
      await traffic.until(() => traffic.apps.get('/a/x') === 'two' && traffic.apps.get('/b/x') === 'two');
      assert.equal(px.stat('proxy.config.update_failure'), 0);

      writeFileSync(file, '');
      // At least once: a second change event may read the same empty file again.
      await traffic.until(() => px.stat('proxy.config.update_failure') >= 1);
      const served = traffic.served;
      await traffic.until(() => traffic.served > served + 20);
      await traffic.stop();
      assert.deepEqual(traffic.failures, []);
      assert.deepEqual(px.proxy.listeners[0]!.config.routes.map((r) => r.cluster), ['two', 'two']);
    } finally {
      await px.close();
    }
  });

  it('API keys and auth rules rewritten in parts while SIGHUP reloads them: no key is refused; an empty file keeps the old ones', async () => {
    const keys = join(dir.path, 'keys.txt');
    const rules = join(dir.path, 'rules.yaml');
    const key = (n: number) => `key-${n}-0123456789abcdef`;
    const keyLines = (n: number) => Array.from({ length: n }, (_, i) => `${key(i + 1)} user${i + 1}\n`);
    writeFileSync(keys, keyLines(2).join(''));
    const rulesParts = ['- {service: "go.mesh.srv.a", access: authenticated}\n', '- {service: "go.mesh.srv.b", access: public}\n'];
    writeFileSync(rules, rulesParts.join(''));
    const rwKeys = rewriter(keys);
    const rwRules = rewriter(rules);
    const stats = new StatsStore();
    const lines: string[] = [];
    const log = pino({ level: 'info' }, new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }));
    const flags: AuthFlags = { auth: 'key', auth_keys: keys, auth_rules: rules, auth_issuer: [], auth_audience: [], auth_clock_skew: 0, auth_jwks_timeout: 0, auth_jwks_cooldown: 0, auth_jwks_refresh: 0 };
    const onRead = (read: number, paths: readonly string[]) => {
      rwKeys.onRead(read, paths);
      rwRules.onRead(read, paths);
    };
    const auth = new EdgeAuth(readAuthSetup(flags)!, { stats, log, settle: { settleMs: 10, onRead } });
    const who = async (k: string) => (await auth.authenticate({ headers: { authorization: `Bearer ${k}` } } as never))?.subject;
    assert.equal(await who(key(2)), 'user2');

    // Three keys now, the file truncated and written a line at a time; the rules the same.
    rwKeys.start(keyLines(3));
    rwRules.start(rulesParts);
    assert.equal(await auth.reload(), true);
    assert.equal(rwKeys.pending, 0);
    assert.equal(rwRules.pending, 0);
    assert.equal(await who(key(2)), 'user2');
    assert.equal(await who(key(3)), 'user3');
    assert.equal((auth.dump().rules as unknown[]).length, 2);
    assert.equal(stats.counter('auth.rules.update_failure').value, 0);

    // An empty key file is refused, as an empty rules file: the old keys and rules stay.
    writeFileSync(keys, '');
    assert.equal(await auth.reload(), false);
    assert.match(String(auth.dump().last_reload_error), /--auth_keys .*keys\.txt: is empty/);
    writeFileSync(keys, keyLines(3).join(''));
    writeFileSync(rules, '');
    assert.equal(await auth.reload(), false);
    assert.match(String(auth.dump().last_reload_error), /--auth_rules .*rules\.yaml: is empty/);
    assert.equal(await who(key(3)), 'user3');
    assert.equal((auth.dump().rules as unknown[]).length, 2);
    assert.equal(stats.counter('auth.rules.update_failure').value, 2);
  });

  it('authz rules rewritten in parts are read whole; an empty file keeps the old rules', async () => {
    const file = join(dir.path, 'authz.yaml');
    const parts = ['- { caller: unauthenticated, service: a, action: allow }\n', '- { caller: unauthenticated, action: deny }\n'];
    writeFileSync(file, parts.join(''));
    const rw = rewriter(file);
    const stats = new StatsStore();
    const authz = new ServiceAuthz(readAuthzSetup({ authz_rules: file, authz_default: 'allow', trust_domain: 'example.org' })!, { stats, log: pino({ level: 'silent' }), settle: { settleMs: 10, onRead: rw.onRead } });
    assert.equal(authz.decide(undefined, 'b', 'X.Y').allowed, false);
    rw.start(parts);
    assert.equal(await authz.reload(), true);
    assert.ok(rw.reads >= 3);
    assert.equal(authz.decide(undefined, 'b', 'X.Y').allowed, false); // the second rule was read too
    writeFileSync(file, '');
    assert.equal(await authz.reload(), false);
    assert.match(String(authz.dump().last_reload_error), /is empty/);
    assert.equal(authz.decide(undefined, 'b', 'X.Y').allowed, false);
    assert.equal(authz.decide(undefined, 'a', 'X.Y').allowed, true);
  });

  it('--enable_tls: a certificate rewritten before its key is not taken as a mismatched pair; an empty one keeps the served pair', async () => {
    const certFile = join(dir.path, 'tls.crt');
    const keyFile = join(dir.path, 'tls.key');
    const pair = (serial: string) => createRoot({ serial, commonName: 'localhost', organization: 'mesh test', lifetimeMs: 86_400_000 });
    const [a, b] = await Promise.all([pair('0a'), pair('0b')]);
    writeFileSync(certFile, a.certPem);
    writeFileSync(keyFile, a.keyPem);
    const stats = new StatsStore();
    // The certificate's reads write the key: it lands after the certificate was read once.
    let keyNext: string | undefined;
    const onRead = () => {
      if (keyNext === undefined) return;
      writeFileSync(keyFile, keyNext);
      keyNext = undefined;
    };
    // No second look at a bad pair within the test (retryMs): the settled read alone must get it right.
    const store = new FileCertificateStore({ certFile, keyFile, log: pino({ level: 'silent' }), stats, pollMs: 60_000, settleMs: 20, retryMs: 600_000, onRead });
    const server = createTlsServer(store.serverOptions(), (socket) => socket.end());
    store.attach(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const served = () =>
      new Promise<string>((resolve, reject) => {
        const socket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, rejectUnauthorized: false }, () => {
          resolve(socket.getPeerCertificate().serialNumber.toLowerCase());
          socket.destroy();
        });
        socket.on('error', reject);
      });
    try {
      await store.start();
      assert.equal(await served(), '0a');
      keyNext = b.keyPem;
      writeFileSync(certFile, b.certPem);
      await waitFor(() => stats.counter('tls.file_reload_success').value === 1 || stats.counter('tls.file_reload_failure').value > 0, 10_000);
      assert.equal(stats.counter('tls.file_reload_failure').value, 0);
      assert.equal(await served(), '0b');
      writeFileSync(certFile, '');
      assert.equal(await store.reload(true), false);
      assert.equal(stats.counter('tls.file_reload_failure').value, 1);
      assert.equal(await served(), '0b');
    } finally {
      await store.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('--mtls_cert_file: a workload certificate rewritten before its key is read again with the new key, never refused as a mismatched pair', async () => {
    const caDir = join(dir.path, 'pki');
    await initCa(caDir, { trustDomain: 'mesh.local' });
    const issue = async () => {
      const keys = await generateKeyPair();
      const cert = await new LocalCaSigner(caDir, 'mesh.local').sign(await createCsr(keys, 'go.mesh.srv.files'), 'go.mesh.srv.files', 3_600_000);
      return { cert, key: await privateKeyPem(keys.privateKey), serial: new X509Certificate(cert).serialNumber.toLowerCase() };
    };
    const [one, two] = [await issue(), await issue()];
    const certFile = join(dir.path, 'workload.crt');
    const keyFile = join(dir.path, 'workload.key');
    writeFileSync(certFile, one.cert);
    writeFileSync(keyFile, one.key);
    const errors: string[] = [];
    const log = pino({ level: 'error' }, new Writable({ write: (c, _e, cb) => (errors.push(String(c)), cb()) }));
    let keyNext: string | undefined;
    const onRead = () => {
      if (keyNext === undefined) return;
      writeFileSync(keyFile, keyNext);
      keyNext = undefined;
    };
    const source = await FileWorkloadTls.open({ mode: 'strict', trustDomain: 'mesh.local', service: 'go.mesh.srv.files', certFile, keyFile, caFile: caPaths(caDir).signerCert, log, pollMs: 60_000, settle: { settleMs: 20, onRead } });
    try {
      assert.equal(source.certificates()[0]!.serialNumber, one.serial);
      keyNext = two.key;
      writeFileSync(certFile, two.cert);
      await waitFor(() => source.certificates()[0]!.serialNumber === two.serial || errors.length > 0, 10_000);
      assert.deepEqual(errors, []);
      writeFileSync(keyFile, '');
      assert.equal(await source.reload(), false);
      assert.match(errors.join(''), /workload\.key: is empty/);
      assert.equal(source.certificates()[0]!.serialNumber, two.serial);
    } finally {
      await source.close();
    }
  });

  it('readSettled: a file still changing after maxReads reads is given up; a missing file says so', async () => {
    const file = join(dir.path, 'changing.txt');
    writeFileSync(file, 'x');
    let n = 0;
    await assert.rejects(
      readSettled([file], { settleMs: 1, maxReads: 3, onRead: () => appendFileSync(file, String(n++)) }),
      (err: unknown) => err instanceof SettledReadError && err.code === 'UNSETTLED' && /still changing after 3 reads/.test(err.message),
    );
    assert.equal(n, 3);
    await assert.rejects(readSettled([join(dir.path, 'none.txt')], { settleMs: 1 }), (err: unknown) => err instanceof SettledReadError && err.reason === 'cannot read: no such file');
  });
});
