/**
 * A route file's rewrite and redirect targets are held to the rules request paths are held to
 * (docs/routing.md, URLRewrite): a real `mesh api --routes=FILE` whose URLRewrite or
 * RequestRedirect path is not in normal form (dot segments, `//`, encoded `/`, encoded dots)
 * refuses to start, exit 1, naming the file, the line and the field; nothing is served.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, tempDir } from '../helpers.js';

const file = (filter: string) => `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop}
spec:
  handler: proxy
  rules:
    - backendRefs: [{name: go.mesh.srv.shop}]
      filters:
        - ${filter}
`;

const CASES: Array<[string, string, string]> = [
  ['{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /a/../internal}}}', 'urlRewrite.path.replaceFullPath', 'write "/internal"'],
  ['{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: //evil.example/x}}}', 'urlRewrite.path.replaceFullPath', 'an empty segment ("//") is refused'],
  ['{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /a%2Fb}}}', 'urlRewrite.path.replacePrefixMatch', 'an encoded "/" (%2F) is refused'],
  ['{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /%2e%2e/internal}}}', 'urlRewrite.path.replaceFullPath', '".." climbs above the root'],
];

describe('mesh api --routes: a rewrite or redirect target not in normal form is refused at start', () => {
  const dir = tempDir('mesh-rewrite-target-');
  after(() => dir.cleanup());

  for (const [filter, field, why] of CASES) {
    it(`${filter} → exit 1, file line 9: ${why}`, async () => {
      const routes = join(dir.path, 'routes.yaml');
      writeFileSync(routes, file(filter));
      const res = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', `--registry_address=${dir.path}`, `--routes=${routes}`]);
      assert.equal(res.code, 1, res.stderr);
      assert.ok(res.stderr.includes(`${routes} line 9: HTTPRoute shop spec.rules[0].filters[0].${field}: must be a path in normal form: ${why}`), res.stderr);
      assert.ok(!res.stdout.includes('listening'), res.stdout);
    });
  }
});
