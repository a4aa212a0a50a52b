/**
 * Property tests: the edge's header-name step (src/edge/filters/header-names.ts) over every name
 * the mesh sets or reads, in every spelling a CGI-style backend folds together (`_` for `-`, any
 * case): under each --headers_with_underscores value, no spelling with `_` is passed on (allow and
 * drop remove it, reject refuses the request), the dash spelling of an edge-set header is removed
 * too, and a name that folds to none of the mesh's passes under allow. And SPIFFE IDs as the
 * specification writes them (src/base/mtls/workload-tls.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import fc from 'fast-check';
import { StatsStore } from '../../src/base/stats/store.js';
import { HeaderNameFilter, type UnderscorePolicy } from '../../src/edge/filters/header-names.js';
import { foldHeaderName } from '../../src/base/http/header-name.js';
import { isEdgeSetHeader, isMeshHeaderName } from '../../src/core/transport/headers.js';
import { spiffeIdProblem } from '../../src/base/mtls/workload-tls.js';

/** Names the mesh sets or reads on a request. */
const MESH_NAMES = [
  'mesh-auth-subject', 'mesh-auth-scopes', 'mesh-peer-identity', 'mesh-endpoint', 'mesh-service', 'mesh-timeout', 'mesh-id', 'mesh-stream',
  'mesh-sidecar-token', 'mesh-broker-header', 'mesh-broker-secret', 'mesh-topic', 'mesh-event', 'x-mesh-admin', 'x-forwarded-for', 'x-forwarded-proto',
  'x-forwarded-host', 'content-length', 'content-type', 'transfer-encoding', 'proxy-authorization', 'grpc-timeout', 'sec-websocket-key',
  'sec-fetch-site', 'ce-type', 'ce-specversion',
];

/** A spelling of `name` with at least one `_` for a `-`, each letter in either case. */
function spelling(name: string): fc.Arbitrary<string> {
  const dashes = [...name].filter((c) => c === '-').length;
  return fc.tuple(fc.array(fc.boolean(), { minLength: name.length, maxLength: name.length }), fc.integer({ min: 0, max: dashes - 1 }), fc.array(fc.boolean(), { minLength: dashes, maxLength: dashes })).map(([upper, forced, underscores]) => {
    let dash = 0;
    let out = '';
    for (let i = 0; i < name.length; i++) {
      const c = name[i]!;
      if (c === '-') {
        out += dash === forced || underscores[dash] ? '_' : '-';
        dash++;
      } else out += upper[i] ? c.toUpperCase() : c;
    }
    return out;
  });
}

/** A request as node gives it: `headers` by lower-case name, `rawHeaders` as sent. */
function request(fields: Array<[string, string]>): IncomingMessage {
  const headers: Record<string, string> = {};
  const rawHeaders: string[] = [];
  for (const [name, value] of fields) {
    headers[name.toLowerCase()] = value;
    rawHeaders.push(name, value);
  }
  return { headers, rawHeaders } as unknown as IncomingMessage;
}

function filter(policy: UnderscorePolicy): HeaderNameFilter {
  return new HeaderNameFilter({ policy, stats: new StatsStore().scope('http.test.'), errorId: 'go.mesh.test' });
}

const meshSpelling = fc.constantFrom(...MESH_NAMES.filter((n) => n.includes('-'))).chain(spelling);

describe('fuzz: header names as CGI-style backends read them', () => {
  it('foldHeaderName makes every spelling of a mesh name that name, and isMeshHeaderName knows it', () => {
    fc.assert(
      fc.property(meshSpelling, (name) => {
        const folded = foldHeaderName(name.toLowerCase());
        assert.ok(MESH_NAMES.includes(folded), folded);
        assert.ok(isMeshHeaderName(folded), folded);
      }),
      { numRuns: 2000 },
    );
  });

  for (const policy of ['allow', 'drop'] as const) {
    it(`${policy}: no spelling with _ of a mesh name is left on the request, other headers stay`, () => {
      fc.assert(
        fc.property(fc.array(meshSpelling, { minLength: 1, maxLength: 4 }), (names) => {
          const req = request([...names.map((n): [string, string] => [n, 'forged']), ['X-Kept', 'yes']]);
          assert.equal(filter(policy).apply(req), undefined);
          for (const name of Object.keys(req.headers)) assert.ok(!isMeshHeaderName(foldHeaderName(name)) || !name.includes('_'), name);
          for (let i = 0; i < req.rawHeaders.length; i += 2) assert.ok(!req.rawHeaders[i]!.includes('_'), req.rawHeaders[i]);
          assert.equal(req.headers['x-kept'], 'yes');
        }),
        { numRuns: 2000 },
      );
    });
  }

  it('reject: any name with _ refuses the request with 400', () => {
    fc.assert(
      fc.property(meshSpelling, (name) => {
        const err = filter('reject').apply(request([[name, 'x']]));
        assert.equal(err?.code, 400);
      }),
      { numRuns: 1000 },
    );
  });

  it('the edge-set headers are removed in their dash spelling too, in any case', () => {
    fc.assert(
      fc.property(fc.constantFrom('mesh-auth-subject', 'mesh-auth-scopes', 'mesh-peer-identity', 'mesh-auth-anything'), fc.boolean(), (name, upper) => {
        const req = request([[upper ? name.toUpperCase() : name, 'forged']]);
        assert.equal(filter('allow').apply(req), undefined);
        assert.deepEqual(req.rawHeaders, []);
        assert.ok(Object.keys(req.headers).every((n) => !isEdgeSetHeader(n)));
      }),
    );
  });

  it('allow: a name with _ that folds to none of the mesh\'s passes', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^x_[a-z]{1,8}(_[a-z]{1,8})?$/), (name) => {
        fc.pre(!isMeshHeaderName(foldHeaderName(name)));
        const req = request([[name, 'v']]);
        assert.equal(filter('allow').apply(req), undefined);
        assert.equal(req.headers[name], 'v');
      }),
      { numRuns: 500 },
    );
  });
});

describe('SPIFFE IDs', () => {
  it('takes the IDs the mesh CA issues', () => {
    for (const id of ['spiffe://mesh.local/svc/go.mesh.srv.greeter', 'spiffe://mesh.local/svc/mesh.api', 'spiffe://a-b_c.example/x/y_z-1']) assert.equal(spiffeIdProblem(id), undefined, id);
    assert.equal(spiffeIdProblem('spiffe://mesh.local/svc/x', 'mesh.local'), undefined);
  });
  it('refuses every other form', () => {
    for (const id of ['SPIFFE://mesh.local/svc/x', 'spiffe://MESH.LOCAL/svc/x', 'spiffe://mesh.local/svc/a/../x', 'spiffe://mesh.local/svc/./x', 'spiffe://mesh.local/svc//x', 'spiffe://mesh.local/svc/x/', 'spiffe://mesh.local/svc/a%2Fb', 'spiffe://mesh.local:443/svc/x', 'spiffe://user@mesh.local/svc/x', 'spiffe://mesh.local/svc/x?q', 'spiffe://mesh.local/svc/x#f', 'spiffe:///svc/x', 'https://mesh.local/svc/x', `spiffe://mesh.local/${'a'.repeat(2100)}`]) {
      assert.notEqual(spiffeIdProblem(id), undefined, id);
    }
    assert.match(spiffeIdProblem('spiffe://mesh.local./svc/x', 'mesh.local')!, /of trust domain "mesh\.local\.", not mesh\.local/);
  });
  it('never throws, and an ID it takes round-trips its trust domain', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (tail) => {
        const id = `spiffe://${tail}`;
        if (spiffeIdProblem(id) === undefined) assert.match(id, /^spiffe:\/\/[a-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/);
      }),
      { numRuns: 3000 },
    );
  });
});
