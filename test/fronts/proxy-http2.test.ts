/**
 * `mesh proxy` over HTTP/2: a listener with `http2: true` serves h2c by prior knowledge and
 * HTTP/1.1 on one port, and one request set gets the same answers both ways (status, content type,
 * error JSON bytes, what the backend saw); a listener without it stays HTTP/1.1; turning `http2`
 * on a running listener needs a restart (the reload is refused, the old config stays).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClientHttp2Session } from 'node:http2';
import { startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { overHttp1, overHttp2, pick, session, view, type Case } from '../fixtures/h2-client.js';
import { http, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';

const CASES: Case[] = [
  { name: 'a route to the cluster', method: 'POST', path: '/api/users?x=1', headers: { 'content-type': 'text/plain' }, body: 'hi', compare: (a) => ({ status: a.status, seen: pick(JSON.parse(a.body.toString()), ['method', 'url', 'body']) }) },
  { name: 'a path no route takes', method: 'GET', path: '/nope' },
  { name: 'a path refused by its normal form', method: 'GET', path: '/api/a%2fb' },
  { name: 'the health path', method: 'GET', path: '/_mesh/health' },
];

describe('mesh proxy over HTTP/2 (a listener\'s http2: true)', () => {
  const dir = tempDir('mesh-proxy-h2-');
  const config = join(dir.path, 'proxy.yaml');
  let app: PlainApp;
  let proc: RunningProcess;
  let h2Url: string;
  let h1Url: string;
  let admin: string;
  let h2: ClientHttp2Session;
  const yaml = (http2: boolean) => `listeners:
  - name: h2
    address: 127.0.0.1:0
    http2: ${http2}
    routes:
      - match: { prefix: /api/ }
        cluster: backend
        prefix_rewrite: /
  - name: plain
    address: 127.0.0.1:0
    routes:
      - match: { prefix: / }
        cluster: backend
clusters:
  - name: backend
    hosts: [127.0.0.1:${app.port}]
`;

  before(async () => {
    app = await startPlainApp('web');
    writeFileSync(config, yaml(true));
    proc = startProcess(['proxy', '-c', config, '--admin_address=127.0.0.1:0', '--log_level=warning']);
    await proc.waitForOutput(/mesh proxy ready/, 15000);
    h2Url = /mesh proxy listener h2 on (\S+)/.exec(proc.output())![1]!;
    h1Url = /mesh proxy listener plain on (\S+)/.exec(proc.output())![1]!;
    admin = /mesh proxy admin on (\S+)/.exec(proc.output())![1]!;
    h2 = await session(h2Url);
  });

  after(async () => {
    h2?.close();
    await proc?.stop();
    await app?.close();
    dir.cleanup();
  });

  for (const c of CASES) {
    it(`${c.name}: the same answer over HTTP/1.1 and h2c`, async () => {
      assert.deepEqual(view(c, await overHttp2(h2, c)), view(c, await overHttp1(h2Url, c)));
    });
  }

  it('a listener without http2 does not speak HTTP/2', async () => {
    await assert.rejects(session(h1Url).then((s) => overHttp2(s, CASES[3]!).finally(() => s.close())));
    assert.match((await http('GET', `${admin}/stats?filter=downstream_cx_http2_total`)).text, /http\.h2\.downstream_cx_http2_total: [1-9]/);
  });

  it('turning http2 on or off needs a restart: the reload is refused', async () => {
    const failed = async () => Number(/proxy\.config\.update_failure: (\d+)/.exec((await http('GET', `${admin}/stats?filter=update_failure`)).text)?.[1] ?? 0);
    const before = await failed();
    writeFileSync(config, yaml(false));
    proc.child.kill('SIGHUP');
    await waitFor(async () => (await failed()) > before, 10000);
    assert.deepEqual(view(CASES[3]!, await overHttp2(h2, CASES[3]!)), view(CASES[3]!, await overHttp1(h2Url, CASES[3]!)));
  });
});
