/**
 * ACME without a CA: the allow-list and flag checks, the manager (single flight, refusal without an
 * order, cache reuse, renewal, back-off after a failure) with a fake issuer that makes certificates
 * with openssl, the cache's file modes, and the HTTP-01 challenge listener. The real thing against
 * pebble is in acme-pebble.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import type { SecureContext } from 'node:tls';
import pino from 'pino';
import { StatsStore } from '../../src/base/stats/store.js';
import { AcmeCache, defaultAcmeCacheDir, directoryKey } from '../../src/tls/acme/cache.js';
import { AcmeManager, renewalTime } from '../../src/tls/acme/manager.js';
import { parseAcmeHosts } from '../../src/tls/acme/hosts.js';
import { ChallengeServer } from '../../src/tls/acme/challenge-server.js';
import { checkTlsFlags } from '../../src/cli/tls-flags.js';
import { parseArgs, FlagError } from '../../src/cli/flags.js';
import { http, runCli, tempDir, waitFor } from '../helpers.js';
import { SchemaOptionError } from '../../src/base/util/option-error.js';

const DAY_MS = 86_400_000;

function selfSigned(host: string, days = 3): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-acme-fake-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(days),
      '-subj', `/CN=${host}`, '-addext', `subjectAltName=DNS:${host}`, '-keyout', join(dir, 'k.pem'), '-out', join(dir, 'c.pem'),
    ], { stdio: 'ignore' });
    return { cert: readFileSync(join(dir, 'c.pem'), 'utf8'), key: readFileSync(join(dir, 'k.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** An issuer whose orders finish when the test says so. */
class FakeIssuer {
  calls: string[] = [];
  private pending: Array<{ host: string; resolve: () => void; reject: (e: Error) => void }> = [];
  auto = true;
  fail?: Error;

  issue(host: string): Promise<{ cert: string; key: string }> {
    this.calls.push(host);
    if (this.fail) return Promise.reject(this.fail);
    if (this.auto) return Promise.resolve(selfSigned(host));
    return new Promise((resolve, reject) => {
      this.pending.push({ host, resolve: () => resolve(selfSigned(host)), reject });
    });
  }

  finishAll(): void {
    for (const p of this.pending.splice(0)) p.resolve();
  }
}

function logCapture() {
  const lines: string[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => lines.push(s) });
  return { log, lines, text: () => lines.join('') };
}

function manager(opts: { hosts: string[]; issuer: FakeIssuer; cacheRoot: string; now?: () => number }) {
  const logs = logCapture();
  const stats = new StatsStore();
  const cache = new AcmeCache(opts.cacheRoot, 'https://ca.example/dir');
  const m = new AcmeManager({ hosts: opts.hosts, issuer: opts.issuer, cache, log: logs.log, stats, now: opts.now, checkIntervalMs: 3_600_000, retryMs: 60_000 });
  return { m, logs, stats, cache };
}

function sni(m: AcmeManager, name: string): Promise<SecureContext> {
  return new Promise((resolve, reject) => m.sniCallback(name, (err, ctx) => (err ? reject(err) : resolve(ctx!))));
}

const flags = (argv: string[]) => parseArgs(argv, {}).config;

describe('ACME flags and allow-list', () => {
  it('--enable_acme without --acme_hosts refuses to start (exit 2) on the gateway and the sidecar', async () => {
    assert.throws(() => checkTlsFlags(flags(['--enable_acme'])), (e: Error) => e instanceof FlagError && /--enable_acme needs --acme_hosts/.test(e.message));
    for (const command of ['api', 'sidecar']) {
      const r = await runCli([command, '--enable_acme', '--address=127.0.0.1:0', '--admin_address=off', '--registry=memory'], {}, 30000);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /--enable_acme needs --acme_hosts/);
      assert.doesNotMatch(r.stdout, /listening/);
    }
  });

  it('rejects wildcards, IP addresses, bad names, a plain-http directory, TLS files with ACME', () => {
    const bad: Array<[string[], RegExp]> = [
      [['--acme_hosts=*.example.com'], /wildcards/],
      [['--acme_hosts=10.0.0.1'], /IP address/],
      [['--acme_hosts=bad_name.example'], /not a valid DNS name/],
      [['--acme_hosts=a.example', '--acme_directory=http://ca.example/dir'], /--acme_directory/],
      [['--acme_hosts=a.example', '--acme_http_port=eighty'], /--acme_http_port/],
      [['--acme_hosts=a.example', '--acme_email=nobody'], /--acme_email/],
      [['--acme_hosts=a.example', '--enable_tls'], /exclusive/],
    ];
    for (const [argv, re] of bad) {
      assert.throws(() => checkTlsFlags(flags(['--enable_acme', ...argv])), (e: Error) => e instanceof FlagError && re.test(e.message), argv.join(' '));
    }
    assert.doesNotThrow(() => checkTlsFlags(flags(['--enable_acme', '--acme_hosts=A.Example.COM.,b.example', '--acme_http_port=127.0.0.1:5002'])));
    assert.deepEqual(parseAcmeHosts(['A.Example.COM.', 'b.example', 'a.example.com']), ['a.example.com', 'b.example']);
  });

  it('cache location: --acme_cache, else $MESH_HOME/acme (or --mesh_home), one directory per CA', () => {
    assert.equal(defaultAcmeCacheDir('/x/cache', '/home'), '/x/cache');
    assert.equal(defaultAcmeCacheDir(undefined, '/srv/mesh'), '/srv/mesh/acme');
    assert.equal(directoryKey('https://acme-v02.api.letsencrypt.org/directory'), 'acme-v02.api.letsencrypt.org-directory');
    assert.equal(directoryKey('https://acme-staging-v02.api.letsencrypt.org/directory'), 'acme-staging-v02.api.letsencrypt.org-directory');
    assert.equal(directoryKey('https://127.0.0.1:14000/dir'), '127.0.0.1_14000-dir');
  });
});

describe('ACME manager (fake issuer)', () => {
  it('single flight: concurrent handshakes for one name place one order and all get its certificate', async () => {
    const dir = tempDir('mesh-acme-sf-');
    try {
      const issuer = new FakeIssuer();
      issuer.auto = false;
      const { m, stats } = manager({ hosts: ['a.example', 'b.example'], issuer, cacheRoot: dir.path });
      const waits = Array.from({ length: 8 }, () => sni(m, 'A.example.'));
      await waitFor(() => issuer.calls.length > 0);
      assert.deepEqual(issuer.calls, ['a.example']);
      issuer.finishAll();
      const contexts = await Promise.all(waits);
      assert.ok(contexts.every((c) => c === contexts[0]));
      assert.equal(stats.counter('acme.order_started').value, 1);
      // Once there, later handshakes are answered from memory.
      await sni(m, 'a.example');
      assert.deepEqual(issuer.calls, ['a.example']);
      assert.deepEqual(m.certificates().map((c) => c.path), ['acme:a.example']);
    } finally {
      dir.cleanup();
    }
  });

  it('a name outside the allow-list: the handshake fails, no order, nothing cached, logged once', async () => {
    const dir = tempDir('mesh-acme-deny-');
    try {
      const issuer = new FakeIssuer();
      const { m, logs, stats, cache } = manager({ hosts: ['a.example'], issuer, cacheRoot: dir.path });
      await assert.rejects(sni(m, 'evil.example'), /not in --acme_hosts/);
      await assert.rejects(sni(m, 'evil.example'), /not in --acme_hosts/);
      await assert.rejects(m.obtain('evil.example', 'test'), /not in --acme_hosts/);
      assert.deepEqual(issuer.calls, []);
      assert.equal(existsSync(cache.certPath('evil.example')), false);
      assert.equal(stats.counter('acme.sni_refused').value, 2);
      assert.equal(logs.text().match(/refused TLS handshake for \\"evil.example\\"/g)?.length, 1, logs.text());
      // A client's name is logged cut to 256 characters.
      await assert.rejects(sni(m, `${'n'.repeat(1000)}.example`), /not in --acme_hosts/);
      assert.ok(logs.text().includes(`${'n'.repeat(256)}…(+752)`), logs.text().slice(-600));
      assert.ok(!logs.text().includes('n'.repeat(257)));
    } finally {
      dir.cleanup();
    }
  });

  it('start orders every name, caches with 0600 files; a second start loads from cache without an order', async () => {
    const dir = tempDir('mesh-acme-cache-');
    try {
      const issuer = new FakeIssuer();
      const one = manager({ hosts: ['a.example', 'b.example'], issuer, cacheRoot: dir.path });
      one.m.start();
      await Promise.all([one.m.obtain('a.example', 't'), one.m.obtain('b.example', 't')]);
      one.m.close();
      assert.deepEqual(issuer.calls.sort(), ['a.example', 'b.example']);
      for (const f of [one.cache.certPath('a.example'), one.cache.keyPath('a.example'), one.cache.keyPath('b.example')]) {
        assert.equal(statSync(f).mode & 0o777, 0o600, f);
      }
      assert.equal(statSync(one.cache.dir).mode & 0o777, 0o700);
      const served = one.m.entry('a.example')!.info.serialNumber;

      const issuer2 = new FakeIssuer();
      const two = manager({ hosts: ['a.example', 'b.example'], issuer: issuer2, cacheRoot: dir.path });
      two.m.start();
      two.m.close();
      assert.deepEqual(issuer2.calls, []);
      assert.equal(two.m.entry('a.example')!.info.serialNumber, served);
      assert.match(two.logs.text(), /certificate for a\.example loaded from cache/);
      assert.equal(two.stats.counter('acme.cache_hit').value, 2);
      // Without SNI: the first allowed name's certificate.
      assert.equal(two.m.defaultEntry()!.host, 'a.example');
    } finally {
      dir.cleanup();
    }
  });

  it('renews a third of the lifetime (at most 30 days) before expiry; the old certificate serves meanwhile', async () => {
    assert.equal(renewalTime({ validFrom: new Date(0), expiration: new Date(90 * DAY_MS) }), 60 * DAY_MS);
    assert.equal(renewalTime({ validFrom: new Date(0), expiration: new Date(365 * DAY_MS) }), 335 * DAY_MS);
    assert.equal(renewalTime({ validFrom: new Date(0), expiration: new Date(6 * DAY_MS) }), 4 * DAY_MS);

    const dir = tempDir('mesh-acme-renew-');
    try {
      let clock = Date.now();
      const issuer = new FakeIssuer();
      const { m, logs, stats } = manager({ hosts: ['a.example'], issuer, cacheRoot: dir.path, now: () => clock });
      const first = await m.obtain('a.example', 't');
      const due = renewalTime(first.info);
      clock = due - 60_000;
      m.check();
      assert.equal(issuer.calls.length, 1, 'not due yet');
      clock = due + 1;
      issuer.auto = false;
      m.check();
      m.check(); // single flight: still one renewal
      assert.equal(issuer.calls.length, 2);
      assert.equal(await sni(m, 'a.example'), first.context, 'old certificate until the new one arrives');
      issuer.finishAll();
      const renewed = await waitFor(() => {
        const e = m.entry('a.example');
        return e && e.info.serialNumber !== first.info.serialNumber ? e : undefined;
      });
      assert.notEqual(renewed.info.serialNumber, first.info.serialNumber);
      assert.equal(await sni(m, 'a.example'), renewed.context);
      assert.equal(stats.counter('acme.renewal_started').value, 1);
      assert.match(logs.text(), /renewing certificate for a\.example/);
    } finally {
      dir.cleanup();
    }
  });

  it('a failed order is not retried before its back-off, whatever the handshakes', async () => {
    const dir = tempDir('mesh-acme-fail-');
    try {
      let clock = Date.now();
      const issuer = new FakeIssuer();
      issuer.fail = new Error('CA says no');
      const { m, logs } = manager({ hosts: ['a.example'], issuer, cacheRoot: dir.path, now: () => clock });
      await assert.rejects(sni(m, 'a.example'), /CA says no/);
      await assert.rejects(sni(m, 'a.example'), /last order failed: CA says no/);
      m.check();
      assert.equal(issuer.calls.length, 1);
      assert.match(logs.text(), /order for a\.example failed: CA says no/);
      clock += 61_000;
      issuer.fail = undefined;
      await sni(m, 'a.example');
      assert.equal(issuer.calls.length, 2);
    } finally {
      dir.cleanup();
    }
  });

  it('ignores a cached certificate that does not name the host', async () => {
    const dir = tempDir('mesh-acme-wrong-');
    try {
      const cache = new AcmeCache(dir.path, 'https://ca.example/dir');
      cache.save('a.example', selfSigned('other.example'));
      const issuer = new FakeIssuer();
      const { m, logs } = manager({ hosts: ['a.example'], issuer, cacheRoot: dir.path });
      m.start();
      m.close();
      assert.match(logs.text(), /ignoring the cached certificate for a\.example/);
      await waitFor(() => new X509Certificate(m.entry('a.example')?.cert ?? '').subjectAltName?.includes('a.example'));
      assert.deepEqual(issuer.calls, ['a.example']);
      assert.ok(new X509Certificate(m.entry('a.example')!.cert).subjectAltName?.includes('a.example'));
    } finally {
      dir.cleanup();
    }
  });
});

describe('HTTP-01 challenge listener', () => {
  it('answers known tokens, 404 for others, redirects allowed hosts to HTTPS', async () => {
    const challenges = new Map([['tok123', 'tok123.thumbprint']]);
    const logs = logCapture();
    const server = new ChallengeServer({ address: '127.0.0.1:0', challenges, allowed: (h) => h === 'a.example', httpsPort: () => 8443, log: logs.log });
    const bound = await server.listen();
    const get = async (path: string, host: string) => {
      const res = await http('GET', `http://127.0.0.1:${bound.port}${path}`, { headers: { host } });
      return { status: res.status, text: res.text, location: res.headers.location };
    };
    try {
      const ok = await get('/.well-known/acme-challenge/tok123', 'a.example');
      assert.deepEqual([ok.status, ok.text], [200, 'tok123.thumbprint']);
      assert.equal((await get('/.well-known/acme-challenge/nope', 'a.example')).status, 404);
      const redirect = await get('/path?q=1', 'a.example:80');
      assert.deepEqual([redirect.status, redirect.location], [308, 'https://a.example:8443/path?q=1']);
      assert.equal((await get('/path', 'evil.example')).status, 404);
    } finally {
      await server.close();
    }
  });

  it('a port it cannot bind is a start-up error naming the flag', async () => {
    const logs = logCapture();
    const first = new ChallengeServer({ address: '127.0.0.1:0', challenges: new Map(), allowed: () => false, httpsPort: () => undefined, log: logs.log });
    const bound = await first.listen();
    try {
      const second = new ChallengeServer({ address: `127.0.0.1:${bound.port}`, challenges: new Map(), allowed: () => false, httpsPort: () => undefined, log: logs.log });
      // A SchemaOptionError: the library names the option acmeHttpPort, the CLI --acme_http_port.
      await assert.rejects(second.listen(), (e: unknown) => e instanceof SchemaOptionError && e.key === 'acme_http_port' && /^cannot listen on 127\.0\.0\.1:\d+ for ACME HTTP-01 challenges \(acmeHttpPort\): EADDRINUSE$/.test(e.message) && /\(--acme_http_port\): EADDRINUSE$/.test(e.format('flag')));
    } finally {
      await first.close();
    }
  });
});
