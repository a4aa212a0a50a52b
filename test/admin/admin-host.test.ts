/**
 * The admin interface's Host check (DNS rebinding) and its rule for mutating requests from a
 * browser, against a real AdminServer on loopback with raw requests (exact answers).
 */
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { rawHttp } from '../helpers.js';
import { startAdmin, get, type Running } from '../admin-fixtures.js';
import { AdminServer, HOST_REFUSED_STAT } from '../../src/admin/server.js';
import { canonicalHost, HostCheck, parseAllowedHosts } from '../../src/base/http/host-check.js';
import { parseArgs, FlagError } from '../../src/cli/flags.js';

const TEXT = 'text/plain; charset=UTF-8';

/** GET with an explicit Host header (undici sends it as given). */
async function withHost(base: string, path: string, host: string, headers: Record<string, string> = {}) {
  const res = await request(base + path, { headers: { host, ...headers } });
  return { status: res.statusCode, body: await res.body.text(), type: res.headers['content-type'] };
}

describe('admin Host check', () => {
  let r: Running;
  before(async () => {
    r = await startAdmin();
  });
  after(() => r.close());

  test('a foreign Host gets 403 with the exact text, nothing runs, and the refusal is counted', async () => {
    const host = `evil.example:${r.port}`;
    for (const path of ['/healthcheck/fail', '/quitquitquit', '/stats', '/nope']) {
      const res = await withHost(r.base, path, host);
      assert.equal(res.status, 403, path);
      assert.equal(res.type, TEXT);
      assert.equal(res.body, `Host "evil.example:${r.port}" is not allowed; see --admin_allowed_hosts\n`);
    }
    // POST too, and a Host without port
    const post = await request(`${r.base}/healthcheck/fail`, { method: 'POST', headers: { host: 'evil.example' } });
    assert.equal(post.statusCode, 403);
    assert.equal(await post.body.text(), 'Host "evil.example" is not allowed; see --admin_allowed_hosts\n');
    assert.equal(r.ctx.server.state, 'live');
    assert.equal(r.quitCalls, 0);
    assert.equal(r.ctx.stats.counter(HOST_REFUSED_STAT).value, 5);
    const stats = await get(r.base, '/stats?filter=host_refused');
    assert.equal(stats.body, 'http.admin.downstream_rq_host_refused: 5\n');
  });

  test('the Host check comes before the token: a rebinding page learns nothing from a 401', async () => {
    const t = await startAdmin({ token: 's3cret' });
    try {
      const res = await withHost(t.base, '/ready', 'evil.example');
      assert.equal(res.status, 403);
      assert.equal(res.body, 'Host "evil.example" is not allowed; see --admin_allowed_hosts\n');
    } finally {
      await t.close();
    }
  });

  test('loopback addresses, localhost and the bound IP are answered', async () => {
    for (const host of [
      `127.0.0.1:${r.port}`,
      '127.0.0.1',
      `127.9.8.7:${r.port}`,
      `localhost:${r.port}`,
      'LOCALHOST.',
      `[::1]:${r.port}`,
      '[::ffff:127.0.0.1]',
      `2130706433:${r.port}`,
    ]) {
      const res = await withHost(r.base, '/ready', host);
      assert.equal(res.status, 200, host);
      assert.equal(res.body, 'LIVE\n');
    }
  });

  test('refused: other IPs, *.localhost, look-alikes and malformed Hosts', async () => {
    for (const host of [
      `10.1.2.3:${r.port}`,
      `app.localhost:${r.port}`,
      `localhost.evil.example:${r.port}`,
      `127.0.0.1.evil.example:${r.port}`,
      `[::2]:${r.port}`,
      `evil.example:${r.port}:1`,
      `user@127.0.0.1:${r.port}`,
    ]) {
      const res = await withHost(r.base, '/ready', host);
      assert.equal(res.status, 403, host);
      assert.equal(res.body, `Host "${host}" is not allowed; see --admin_allowed_hosts\n`);
    }
  });

  test('HTTP/1.1 without Host: 403; HTTP/1.0 without Host (a tool): served', async () => {
    const missing = await rawHttp(r.port, 'GET /ready HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(missing.status, 403);
    assert.equal(missing.headers['content-type'], TEXT);
    assert.equal(missing.body, 'Host header missing; see --admin_allowed_hosts\n');
    const empty = await rawHttp(r.port, 'GET /ready HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n');
    assert.equal(empty.status, 403);
    assert.equal(empty.body, 'Host header missing; see --admin_allowed_hosts\n');
    const old = await rawHttp(r.port, 'GET /ready HTTP/1.0\r\n\r\n');
    assert.match(old.head, /^HTTP\/1\.1 200 OK\r\n/);
    assert.equal(old.body, 'LIVE\n');
    const foreign = await rawHttp(r.port, 'GET /ready HTTP/1.0\r\nHost: evil.example\r\n\r\n');
    assert.equal(foreign.status, 403);
  });

  test('--admin_allowed_hosts: exact names, *.domain, and * (check off)', async () => {
    const a = await startAdmin({ allowedHosts: parseAllowedHosts(['mesh.internal', '*.corp.example']) });
    try {
      assert.equal((await withHost(a.base, '/ready', `mesh.internal:${a.port}`)).status, 200);
      assert.equal((await withHost(a.base, '/ready', 'MESH.internal')).status, 200);
      assert.equal((await withHost(a.base, '/ready', `box.corp.example:${a.port}`)).status, 200);
      assert.equal((await withHost(a.base, '/ready', `corp.example:${a.port}`)).status, 403);
      assert.equal((await withHost(a.base, '/ready', `other.internal:${a.port}`)).status, 403);
      assert.equal((await withHost(a.base, '/ready', `127.0.0.1:${a.port}`)).status, 200);
    } finally {
      await a.close();
    }
    const all = await startAdmin({ allowedHosts: ['*'] });
    try {
      assert.equal((await withHost(all.base, '/ready', 'evil.example')).status, 200);
      const raw = await rawHttp(all.port, 'GET /ready HTTP/1.1\r\nConnection: close\r\n\r\n');
      assert.equal(raw.status, 200);
    } finally {
      await all.close();
    }
  });

  test('bound to a wildcard address, any IP literal is answered but names are not', async () => {
    const a = await startAdmin();
    const wide = new AdminServer(a.ctx);
    await a.close();
    const { port } = await wide.listen('0.0.0.0:0');
    try {
      const base = `http://127.0.0.1:${port}`;
      assert.equal((await withHost(base, '/ready', `10.1.2.3:${port}`)).status, 200);
      assert.equal((await withHost(base, '/ready', `[fd00::5]:${port}`)).status, 200);
      assert.equal((await withHost(base, '/ready', `evil.example:${port}`)).status, 403);
    } finally {
      await wide.close();
    }
  });

  test('bad --admin_allowed_hosts values are flag errors', () => {
    assert.deepEqual(parseArgs(['--admin_allowed_hosts=Mesh.Internal,*.corp.example,10.0.0.1,[::1]']).config.admin_allowed_hosts, [
      'mesh.internal',
      '*.corp.example',
      '10.0.0.1',
      '::1',
    ]);
    assert.deepEqual(parseArgs([]).config.admin_allowed_hosts, []);
    for (const bad of ['mesh.internal:9901', 'http://mesh.internal', '*.10.0.0.1', 'a b', 'a/b', '**']) {
      assert.throws(
        () => parseArgs([`--admin_allowed_hosts=${bad}`]),
        (err: unknown) => err instanceof FlagError && err.message.startsWith(`invalid value "${bad}" for flag --admin_allowed_hosts: `),
        bad,
      );
    }
  });

  test('canonicalHost and HostCheck edge cases', () => {
    assert.equal(canonicalHost('127.1'), '127.0.0.1');
    assert.equal(canonicalHost('0x7f.0.0.1'), '127.0.0.1');
    assert.equal(canonicalHost('[::FFFF:127.0.0.1]'), '127.0.0.1'); // IPv4-mapped: the IPv4 address it reaches
    assert.equal(canonicalHost('Example.COM.'), 'example.com');
    assert.equal(canonicalHost('a/b'), undefined);
    assert.equal(canonicalHost(''), undefined);
    const check = new HostCheck([], () => '127.0.0.1');
    assert.equal(check.check(undefined, '1.1'), 'missing');
    assert.equal(check.check(undefined, '1.0'), 'allowed');
    assert.equal(check.check('[::1', '1.1'), 'refused');
    assert.equal(check.check('127.0.0.1:99999999', '1.1'), 'refused');
  });

  test('HostCheck remembers verdicts only once the listener is known, and a bounded number of them', () => {
    let bound: string | undefined;
    const check = new HostCheck(['mesh.test'], () => bound);
    // Before listening, an IP literal cannot be matched against the listener: refused, not remembered.
    assert.equal(check.check('10.1.2.3:8080', '1.1'), 'refused');
    bound = '0.0.0.0';
    assert.equal(check.check('10.1.2.3:8080', '1.1'), 'allowed');
    assert.equal(check.check('10.1.2.3:8080', '1.1'), 'allowed');
    // Remembered verdicts stay right, the header's version still decides a missing Host.
    for (let i = 0; i < 3; i++) {
      assert.equal(check.check('evil.example:8080', '1.1'), 'refused');
      assert.equal(check.check('MESH.test', '1.1'), 'allowed');
      assert.equal(check.check(undefined, '1.0'), 'allowed');
      assert.equal(check.check(undefined, '1.1'), 'missing');
      assert.equal(check.check('', '1.0'), 'missing');
    }
    // A client choosing a new Host on every request cannot grow the memory past its bound.
    for (let i = 0; i < 1000; i++) assert.equal(check.check(`h${i}.evil.example`, '1.1'), 'refused');
    const remembered = (check as unknown as { verdicts: Map<string, string> }).verdicts;
    assert.ok(remembered.size <= 256, `remembered ${remembered.size}`);
    assert.equal(check.check('mesh.test:1', '1.1'), 'allowed');
  });
});

describe('admin: mutating requests from a browser', () => {
  let r: Running;
  before(async () => {
    r = await startAdmin();
  });
  after(() => r.close());

  const SIMPLE = (path: string) => `Forbidden: ${path} changes state; a browser request must carry the header "X-Mesh-Admin: 1".\n`;

  test('a simple request carrying a browser marker is refused, whatever the marker; nothing runs', async () => {
    const own = `http://127.0.0.1:${r.port}`;
    r.ctx.stats.counter('kept').inc(3);
    for (const headers of [
      { Origin: own },
      { 'Sec-Fetch-Site': 'same-origin' },
      { 'Sec-Fetch-Mode': 'no-cors' },
      { 'Sec-Fetch-Dest': 'image' },
      { 'Sec-Fetch-User': '?1' },
      { Referer: `${own}/` },
      { Cookie: 'a=b' },
      { Origin: own, 'Content-Type': 'text/plain;charset=UTF-8' },
      { Origin: own, 'Content-Type': 'application/x-www-form-urlencoded' },
      { Origin: own, 'Content-Type': 'multipart/form-data; boundary=x' },
      // a typed URL sends Sec-Fetch-Site: none, but never with an Origin
      { 'Sec-Fetch-Site': 'none', Origin: own },
    ] as Array<Record<string, string>>) {
      for (const method of ['GET', 'POST']) {
        const res = await get(r.base, '/reset_counters', { method, headers });
        assert.equal(res.status, 403, `${method} ${JSON.stringify(headers)}`);
        assert.equal(res.headers['content-type'], TEXT);
        assert.equal(res.body, SIMPLE('/reset_counters'));
      }
    }
    assert.equal(r.ctx.stats.counter('kept').value, 3);
    const fail = await get(r.base, '/healthcheck/fail', { headers: { Cookie: 'session=1' } });
    assert.equal(fail.body, SIMPLE('/healthcheck/fail'));
    assert.equal(r.ctx.server.state, 'live');
    const quit = await get(r.base, '/quitquitquit', { method: 'POST', headers: { 'Sec-Fetch-Site': 'same-origin' } });
    assert.equal(quit.body, SIMPLE('/quitquitquit'));
    assert.equal(r.quitCalls, 0);
  });

  test('a cross-site request keeps its own refusal, even when non-simple', async () => {
    const res = await get(r.base, '/reset_counters', { headers: { 'Sec-Fetch-Site': 'cross-site', 'X-Mesh-Admin': '1' } });
    assert.equal(res.status, 403);
    assert.equal(res.body, 'Forbidden: /reset_counters changes state and refuses cross-site requests.\n');
  });

  test('served: no browser marker (tools), X-Mesh-Admin, a non-simple Content-Type, a typed URL, and reads', async () => {
    const own = `http://127.0.0.1:${r.port}`;
    for (const headers of [
      {},
      { 'User-Agent': 'curl/8.0', Accept: '*/*' },
      { Origin: own, 'X-Mesh-Admin': '1' },
      { 'Sec-Fetch-Site': 'same-origin', 'Sec-Fetch-Mode': 'cors', 'X-Mesh-Admin': '1' },
      { Origin: own, 'Content-Type': 'application/json' },
      { Cookie: 'a=b', Authorization: 'Bearer x' },
      { 'Sec-Fetch-Site': 'none', 'Sec-Fetch-Mode': 'navigate', 'Sec-Fetch-User': '?1', 'Sec-Fetch-Dest': 'document' },
    ] as Array<Record<string, string>>) {
      const res = await get(r.base, '/reset_counters', { method: 'POST', headers });
      assert.equal(res.status, 200, JSON.stringify(headers));
      assert.equal(res.body, 'OK\n');
    }
    for (const path of ['/stats', '/logging', '/ready', '/server_info']) {
      assert.equal((await get(r.base, path, { headers: { Origin: own, Cookie: 'a=b' } })).status, 200, path);
    }
  });

  test('with --admin_token, the token is enough (a page cannot send Authorization without a preflight)', async () => {
    const t = await startAdmin({ token: 's3cret' });
    try {
      const headers = { Authorization: 'Bearer s3cret', Origin: `http://127.0.0.1:${t.port}`, 'Content-Type': 'text/plain' };
      const res = await get(t.base, '/reset_counters', { method: 'POST', headers });
      assert.equal(res.status, 200);
      assert.equal(res.body, 'OK\n');
    } finally {
      await t.close();
    }
  });
});
