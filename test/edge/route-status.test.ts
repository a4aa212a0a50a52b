/**
 * A route file's routes with the status a Gateway API controller would write (Accepted,
 * ResolvedRefs and why not, a note per rule that answers 500): computed from the parsed file and,
 * when given, the registry's view (src/edge/routes/status.ts), and shown in admin /routes and
 * /config_dump of a gateway with --routes. In process: a real Runtime and its admin on loopback.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { routeStatus } from '../../src/edge/routes/status.js';
import { tempDir } from '../helpers.js';
import { get } from '../admin-fixtures.js';

const ROUTES = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  rules:
    - name: bucket
      matches: [{path: {type: PathPrefix, value: /bucket}}]
      backendRefs: [{name: go.mesh.srv.web}, {group: storage.example, kind: Bucket, name: photos}]
    - name: empty
      matches: [{path: {type: PathPrefix, value: /empty}}]
    - name: nowhere
      matches: [{path: {type: PathPrefix, value: /nowhere}}]
      backendRefs: [{name: go.mesh.srv.nowhere}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: fine}
spec:
  handler: proxy
  rules:
    - matches: [{path: {type: Exact, value: /old}}]
      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /new}}}]
    - backendRefs: [{name: go.mesh.srv.web, weight: 0}]
    - backendRefs: [{name: go.mesh.srv.web}]
      filters: [{type: RequestMirror, requestMirror: {backendRef: {name: go.mesh.srv.shadow}}}]
`;

const ACCEPTED = { type: 'Accepted', status: 'True', reason: 'Accepted', message: 'the route is in use' };
const INVALID_KIND = 'rules[0] (bucket) backendRefs[1]: backend "photos" is a "Bucket" of group "storage.example", not a mesh service';
const EMPTY_NOTE = { rule: 'empty', index: 1, line: 9, note: 'no backendRefs (and no RequestRedirect): its requests answer 500' };
const WEIGHT_NOTE = { rule: 'fine-1', index: 1, line: 23, note: 'every backend has weight 0: its requests answer 500' };

describe('route status', () => {
  const parsed = parseRouteFile(ROUTES, 'routes.yaml');

  it('from the file alone: InvalidKind names the rule and backend; a rule without backendRefs and one of weight 0 get a note; a redirect none', () => {
    assert.deepEqual(routeStatus(parsed), [
      {
        route: 'web',
        line: 1,
        conditions: [ACCEPTED, { type: 'ResolvedRefs', status: 'False', reason: 'InvalidKind', message: INVALID_KIND }],
        rules: [EMPTY_NOTE],
      },
      {
        route: 'fine',
        line: 15,
        conditions: [ACCEPTED, { type: 'ResolvedRefs', status: 'True', reason: 'ResolvedRefs', message: 'every backendRef is a mesh service' }],
        rules: [WEIGHT_NOTE],
      },
    ]);
  });

  it("with the registry's view: BackendNotFound for a backend and a mirror it does not know; the first problem's reason; unknown to the caller: nothing said", () => {
    const known = (s: string) => (s === 'go.mesh.srv.web' ? true : s === 'go.mesh.srv.shadow' ? undefined : false);
    const [web, fine] = routeStatus(parsed, known);
    assert.deepEqual(web!.conditions[1], {
      type: 'ResolvedRefs',
      status: 'False',
      reason: 'InvalidKind',
      message: `${INVALID_KIND}; rules[2] (nowhere) backendRefs[0]: service go.mesh.srv.nowhere is not in the registry`,
    });
    assert.deepEqual(fine!.conditions[1], { type: 'ResolvedRefs', status: 'True', reason: 'ResolvedRefs', message: 'every backendRef is a mesh service the registry knows' });
    const onlyWeb = (s: string) => s === 'go.mesh.srv.web';
    assert.deepEqual(routeStatus(parsed, onlyWeb)[1]!.conditions[1], {
      type: 'ResolvedRefs',
      status: 'False',
      reason: 'BackendNotFound',
      message: 'rules[2] (fine-2) RequestMirror: service go.mesh.srv.shadow is not in the registry',
    });
  });

  describe('admin /routes and /config_dump of a gateway with --routes', () => {
    const dir = tempDir('mesh-route-status-');
    let runtime: Runtime | undefined;
    after(async () => {
      await runtime?.shutdown();
      dir.cleanup();
    });

    it('the file table has `status` after `routes` (the bytes before it unchanged); /config_dump holds the same', async () => {
      const file = join(dir.path, 'routes.yaml');
      writeFileSync(file, ROUTES);
      const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0'];
      runtime = new Runtime(optionsFromFlags(parseArgs(flags, {}).config, { registry: new MemoryRegistry() }), { role: 'api' });
      const admin = await runtime.startAdmin('127.0.0.1:0');
      const base = `http://127.0.0.1:${admin!.port}`;
      new Gateway(runtime, { address: '127.0.0.1:0', routesFile: file });
      const name = `file:${file}`;
      const res = await get(base, `/routes?route_config_name=${encodeURIComponent(name)}`);
      assert.equal(res.status, 200);
      const loadedAt = /"loaded_at":"([^"]+)"/.exec(res.body)?.[1];
      assert.ok(loadedAt, res.body);
      const version = parseRouteFile(ROUTES, file).version;
      const table = { file, version, loaded_at: loadedAt, last_reload_error: null, routes: parseRouteFile(ROUTES, file).routes, status: routeStatus(parsed) };
      assert.equal(res.body, `[\n{\n"version_info": "${version}",\n"route_config_name": ${JSON.stringify(name)},\n"route_table_dump": ${JSON.stringify(table)}\n}\n]\n`);
      assert.ok(
        res.body.includes(
          ',"status":[{"route":"web","line":1,"conditions":[{"type":"Accepted","status":"True","reason":"Accepted","message":"the route is in use"},' +
            '{"type":"ResolvedRefs","status":"False","reason":"InvalidKind","message":"rules[0] (bucket) backendRefs[1]: backend \\"photos\\" is a \\"Bucket\\" of group \\"storage.example\\", not a mesh service"}],' +
            '"rules":[{"rule":"empty","index":1,"line":9,"note":"no backendRefs (and no RequestRedirect): its requests answer 500"}]}',
        ),
        res.body,
      );

      const dump = JSON.parse((await get(base, '/config_dump')).body) as { configs: Array<{ '@type': string; route_tables?: Array<{ route_config_name: string; table: { status: unknown } }> }> };
      const tables = dump.configs.find((c) => c['@type'] === 'mesh.routes')!.route_tables!;
      assert.deepEqual(tables.find((t) => t.route_config_name === name)!.table.status, routeStatus(parsed));
    });
  });
});
