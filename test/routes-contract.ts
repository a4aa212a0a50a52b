/**
 * The route file contract: one set of route files (matches on path, method, header and query, a
 * weighted split by version, a timeout, a version with no node, weight 0, the fall-through, a
 * session kept on its node, a reload by a change of the file and a bad file on SIGHUP) gives the
 * same answers through every
 * front end that takes one: the gateway (`mesh api --routes`), the sidecar (`mesh sidecar
 * --routes`) and `mesh proxy -c FILE` (a listener's `route_file`).
 * Usage: routesContract('gateway', (registryDir, routesFile) => start the front end).
 *
 * The front end must send a request that no route matches to the service `<ns>.plain` for a path
 * `/plain/...` and `<ns>.cx` for `/cx/...` (the proxy handler's mapping, or a proxy route), where
 * the contract registers the app `plain` (namespaces go.mesh.api and go.mesh.srv).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'undici';
import { createRegistry } from '../src/engines/registry/create.js';
import type { Registry } from '../src/engines/registry/registry.js';
import { http, tempDir, waitFor } from './helpers.js';

export interface FrontUnderTest {
  /** http://127.0.0.1:PORT where the routes are served. */
  url: string;
  /** http://127.0.0.1:PORT of the admin interface. */
  admin: string;
  /** Sends the process SIGHUP. */
  hup(): void;
  stop(): Promise<unknown>;
}

export type StartFront = (registryDir: string, routesFile: string) => Promise<FrontUnderTest>;

const SERVICE = 'go.mesh.srv.echo';
const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';

const swap = (v1: number, v2: number) => `${HEAD}metadata: {name: swap}
spec:
  handler: proxy
  rules:
    - matches: [{path: {value: /swap}}]
      backendRefs:
        - {name: ${SERVICE}, version: v1, weight: ${v1}}
        - {name: ${SERVICE}, version: v2, weight: ${v2}}
`;

/** The contract's route file; `swap` is the part the reload cases change. */
export const routesText = (v1 = 100, v2 = 0) => `${HEAD}metadata: {name: matches}
spec:
  handler: proxy
  rules:
    - name: exact
      matches: [{path: {type: Exact, value: /c/exact}}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: regex
      matches: [{path: {type: RegularExpression, value: "/c/n[0-9]+"}}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: tester
      matches: [{path: {value: /c}, headers: [{name: X-Tester, value: ann}]}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: put
      matches: [{path: {value: /c}, method: PUT}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: query
      matches: [{path: {value: /c}, queryParams: [{name: canary, value: "1"}]}]
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: rest
      matches: [{path: {value: /c}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
---
${HEAD}metadata: {name: split}
spec:
  handler: proxy
  rules:
    - matches: [{path: {value: /split}}]
      backendRefs:
        - {name: ${SERVICE}, version: v1, weight: 75}
        - {name: ${SERVICE}, version: v2, weight: 25}
---
${HEAD}metadata: {name: limits}
spec:
  handler: proxy
  rules:
    - name: slow
      matches: [{path: {value: /slow}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
      timeouts: {request: 300ms}
    - name: nowhere
      matches: [{path: {value: /nowhere}}]
      backendRefs: [{name: ${SERVICE}, version: v3}]
    - name: zero
      matches: [{path: {value: /zero}}]
      backendRefs: [{name: ${SERVICE}, weight: 0}]
---
${HEAD}metadata: {name: effects}
spec:
  handler: proxy
  rules:
    - name: rewrite
      matches: [{path: {value: /old}}]
      filters:
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /c/new}}
        - type: RequestHeaderModifier
          requestHeaderModifier: {set: [{name: X-Env, value: canary}]}
      backendRefs: [{name: ${SERVICE}, version: v2}]
    - name: moved
      matches: [{path: {value: /moved}}]
      filters:
        - type: RequestRedirect
          requestRedirect: {statusCode: 301, path: {type: ReplacePrefixMatch, replacePrefixMatch: /c}}
    - name: broken
      matches: [{path: {value: /broken}}]
      backendRefs: [{name: ${SERVICE}, version: v1}]
      fault: {abort: {httpStatus: 503, percentage: 100}}
---
${HEAD}metadata: {name: sticky}
spec:
  handler: proxy
  rules:
    - matches: [{path: {value: /sticky}}]
      backendRefs:
        - {name: ${SERVICE}, version: v1}
        - {name: ${SERVICE}, version: v2}
      sessionPersistence: {sessionName: sticky}
---
${swap(v1, v2)}`;

interface App {
  port: number;
  close(): Promise<void>;
}

/** An HTTP app that answers `{"app":name,"method":..,"url":..}`; a path under /slow is held until the app closes. */
async function startApp(name: string): Promise<App> {
  const held: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    if (req.url?.startsWith('/slow')) return void held.push(res);
    const text = JSON.stringify({ app: name, method: req.method, url: req.url, ...(req.headers['x-env'] ? { env: req.headers['x-env'] } : {}) });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

async function register(registry: Registry, name: string, version: string, port: number): Promise<void> {
  await registry.register({ name, version, metadata: {}, endpoints: [], nodes: [{ id: `${name}-${version}-${port}`, address: '127.0.0.1', port, metadata: {} }] });
}

async function statValue(admin: string, name: string): Promise<number> {
  const res = await http('GET', `${admin}/stats?format=json&filter=${encodeURIComponent(`^${name.replace(/[.*]/g, '\\$&')}$`)}`);
  return (res.json<{ stats: Array<{ name: string; value: number }> }>().stats ?? []).find((s) => s.name === name)?.value ?? 0;
}

function writeAtomically(file: string, text: string): void {
  writeFileSync(`${file}.tmp`, text);
  renameSync(`${file}.tmp`, file);
}

interface Answer {
  status: number;
  /** The app that answered (200) or the error's code and detail (error JSON, its id left out: each front end has its own). */
  app?: string;
  url?: string;
  method?: string;
  code?: number;
  detail?: string;
}

export function routesContract(name: string, start: StartFront): void {
  describe(`route file contract: ${name}`, () => {
    const dir = tempDir('mesh-routes-contract-');
    const routesFile = join(dir.path, 'routes.yaml');
    let registry: Registry;
    let apps: App[] = [];
    let front: FrontUnderTest;
    let pool: Pool;

    const ask = async (method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> => {
      const res = await pool.request({ method: method as 'GET', path, headers });
      const body = (await res.body.json()) as Record<string, unknown>;
      if (res.statusCode === 200) return { status: 200, app: body.app as string, url: body.url as string, method: body.method as string };
      return { status: res.statusCode, code: body.code as number, detail: body.detail as string };
    };

    before(async () => {
      registry = createRegistry('local', dir.path);
      apps = await Promise.all([startApp('v1'), startApp('v2'), startApp('plain')]);
      await register(registry, SERVICE, 'v1', apps[0]!.port);
      await register(registry, SERVICE, 'v2', apps[1]!.port);
      for (const fallback of ['go.mesh.srv.plain', 'go.mesh.api.plain', 'go.mesh.srv.cx', 'go.mesh.api.cx']) await register(registry, fallback, 'v1', apps[2]!.port);
      writeFileSync(routesFile, routesText());
      front = await start(dir.path, routesFile);
      pool = new Pool(front.url, { connections: 8 });
    });

    after(async () => {
      await pool?.close();
      await front?.stop();
      await Promise.all(apps.map((a) => a.close()));
      await registry?.close();
      dir.cleanup();
    });

    it('matches on path, method, header and query; a request no route matches falls through', async () => {
      const cases: Array<[string, string, Record<string, string>, Answer]> = [
        ['GET', '/c/exact', {}, { status: 200, app: 'v2', url: '/c/exact', method: 'GET' }],
        ['GET', '/c/exact/more', {}, { status: 200, app: 'v1', url: '/c/exact/more', method: 'GET' }],
        ['GET', '/c/n42', {}, { status: 200, app: 'v2', url: '/c/n42', method: 'GET' }],
        ['GET', '/c/n42x', {}, { status: 200, app: 'v1', url: '/c/n42x', method: 'GET' }],
        ['GET', '/c/x', { 'x-tester': 'ann' }, { status: 200, app: 'v2', url: '/c/x', method: 'GET' }],
        ['GET', '/c/x', { 'x-tester': 'bob' }, { status: 200, app: 'v1', url: '/c/x', method: 'GET' }],
        ['PUT', '/c/x', {}, { status: 200, app: 'v2', url: '/c/x', method: 'PUT' }],
        ['GET', '/c/x?canary=1', {}, { status: 200, app: 'v2', url: '/c/x?canary=1', method: 'GET' }],
        ['GET', '/c/x?canary=2', {}, { status: 200, app: 'v1', url: '/c/x?canary=2', method: 'GET' }],
        ['GET', '/cx/c', {}, { status: 200, app: 'plain', url: '/cx/c', method: 'GET' }],
        ['GET', '/plain/x?q=1', {}, { status: 200, app: 'plain', url: '/plain/x?q=1', method: 'GET' }],
      ];
      for (const [method, path, headers, want] of cases) {
        const got = await ask(method, path, headers);
        assert.deepEqual(got, want, `${method} ${path} ${JSON.stringify(headers)}`);
      }
    });

    it('a 75/25 split by version lands within 5 points over 1,000 requests', async () => {
      const counts: Record<string, number> = {};
      let next = 0;
      const worker = async () => {
        while (next < 1000) {
          next++;
          const got = await ask('GET', '/split');
          assert.equal(got.status, 200);
          counts[got.app!] = (counts[got.app!] ?? 0) + 1;
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      const share = (counts.v2 ?? 0) / ((counts.v1 ?? 0) + (counts.v2 ?? 0));
      assert.ok(Math.abs(share - 0.25) <= 0.05, `v2 share ${share} (${JSON.stringify(counts)})`);
    });

    it('filters and faults: a URL rewrite with a header set, a redirect, an abort, counted per route', async () => {
      const res = await pool.request({ method: 'GET', path: '/old/a?q=1' });
      assert.deepEqual(await res.body.json(), { app: 'v2', method: 'GET', url: '/c/new/a?q=1', env: 'canary' });
      const moved = await pool.request({ method: 'GET', path: '/moved/x?y=2' });
      await moved.body.dump();
      assert.equal(moved.statusCode, 301);
      assert.equal(moved.headers.location, `${front.url}/c/x?y=2`);
      const broken = await ask('GET', '/broken');
      assert.deepEqual(broken, { status: 503, code: 503, detail: 'fault injected by route broken' });
      assert.equal(await statValue(front.admin, 'vhost.*.route.broken.fault.aborts_injected'), 1);
      await waitFor(async () => (await statValue(front.admin, 'vhost.*.route.rewrite.rq_2xx')) === 1);
    });

    it('sessionPersistence: the answer sets the cookie, requests with it stay on one version\'s node, without it or with a tampered one they spread', async () => {
      const get = async (cookie?: string) => {
        const res = await pool.request({ method: 'GET', path: '/sticky', headers: cookie ? { cookie } : {} });
        const body = (await res.body.json()) as { app: string };
        const set = res.headers['set-cookie'];
        return { app: body.app, cookie: typeof set === 'string' ? set.slice(0, set.indexOf(';')) : undefined };
      };
      const first = await get();
      assert.match(first.cookie ?? '', /^sticky=[A-Za-z0-9_-]+$/);
      const spread = new Set<string>();
      for (let i = 0; i < 20; i++) {
        const pinned = await get(first.cookie);
        assert.deepEqual(pinned, { app: first.app, cookie: undefined });
        const bare = await get();
        assert.ok(bare.cookie);
        spread.add(bare.app);
      }
      assert.deepEqual([...spread].sort(), ['v1', 'v2']);
      const token = Buffer.from(first.cookie!.slice('sticky='.length), 'base64url');
      token[5] = token[5]! ^ 1;
      const tampered = await get(`sticky=${token.toString('base64url')}`);
      assert.ok(tampered.cookie && tampered.cookie !== first.cookie, 'a tampered token: a new session');
      assert.equal((await get(tampered.cookie)).app, tampered.app);
    });

    it('a route timeout answers 504; a version with no node 503; a rule whose backends weigh 0 500', async () => {
      const slow = await ask('GET', '/slow');
      assert.equal(slow.status, 504, JSON.stringify(slow));
      assert.equal(slow.code, 504);
      const nowhere = await ask('GET', '/nowhere');
      assert.deepEqual(nowhere, { status: 503, code: 503, detail: `service ${SERVICE}: no host of version v3` });
      const zero = await ask('GET', '/zero');
      assert.deepEqual(zero, { status: 500, code: 500, detail: 'route limits: every backend has weight 0' });
    });

    it('a change of the file swaps the routes; a bad file on SIGHUP keeps them, counted', async () => {
      assert.equal((await ask('GET', '/swap')).app, 'v1');
      writeAtomically(routesFile, routesText(0, 100));
      await waitFor(async () => (await ask('GET', '/swap')).app === 'v2', 10000);
      const failures = await statValue(front.admin, 'routes.update_failure');
      writeAtomically(routesFile, `${HEAD}metadata: {name: bad}\nspec:\n  rules:\n    - backendRefs: [{name: ${SERVICE}, wieght: 1}]\n`);
      front.hup();
      await waitFor(async () => (await statValue(front.admin, 'routes.update_failure')) > failures, 10000);
      assert.equal((await ask('GET', '/swap')).app, 'v2');
      assert.equal((await ask('GET', '/c/exact')).app, 'v2');
    });

    it('admin /listeners and /config_dump show the listener the routes are served on', async () => {
      const port = Number(new URL(front.url).port);
      const text = (await http('GET', `${front.admin}/listeners`)).text;
      assert.match(text, new RegExp(`^\\S+::127\\.0\\.0\\.1:${port}$`, 'm'), text);
      const dump = (await http('GET', `${front.admin}/config_dump`)).json<{ configs: Array<{ '@type': string; listeners?: Array<{ address: string }> }> }>();
      const listeners = dump.configs.find((c) => c['@type'] === 'mesh.listeners')?.listeners ?? [];
      assert.ok(listeners.some((l) => l.address === `127.0.0.1:${port}`), JSON.stringify(listeners));
    });

    it('admin /routes shows the file with its version', async () => {
      writeAtomically(routesFile, routesText(0, 100));
      await waitFor(async () => {
        const res = await http('GET', `${front.admin}/routes`);
        const tables = res.json<Array<{ route_config_name: string; version_info: string }>>();
        return tables.some((t) => t.route_config_name === `file:${routesFile}` && /^[0-9a-f]+/.test(t.version_info));
      }, 10000);
    });
  });
}
