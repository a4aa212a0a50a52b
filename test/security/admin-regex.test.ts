/**
 * The admin's `/stats?filter=` regex runs on the linear-time engine (RE2, src/base/util/regex.ts): a
 * pattern that makes a backtracking engine run for ever answers at once, and the process keeps
 * serving its data plane and its admin meanwhile. A pattern the engine refuses (too long, too
 * large once expanded, backreferences, lookaround) is a 400 that says why. Against a real
 * `mesh api` process (a frozen process must not freeze the test runner).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { tempDir } from '../helpers.js';
import { http, startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

const TEXT = 'text/plain; charset=UTF-8';

describe('admin /stats?filter= is matched in linear time', () => {
  const dir = tempDir('mesh-admin-regex-');
  let gw: GatewayProcess;

  before(async () => {
    gw = await startGatewayProcess(dir.path);
  });
  after(async () => {
    await gw?.stop();
    dir.cleanup();
  });

  it('the catastrophic filter (.*.*)*^ answers, and the data plane and the admin answer while it is sent', async () => {
    // Sent together: with a backtracking engine the filter never finishes and the process, data
    // plane included, answers nothing more (each of these would fail with "no answer").
    const [filtered, json, plane, ready] = await Promise.all([
      http('GET', `${gw.admin}/stats?filter=(.*.*)*%5E`),
      http('GET', `${gw.admin}/stats?format=json&filter=(.*.*.*)*%5E`),
      http('GET', `${gw.url}/no/such/service`),
      http('GET', `${gw.admin}/ready`),
    ]);
    assert.equal(filtered.status, 200);
    assert.equal(filtered.headers['content-type'], TEXT);
    // The pattern matches the empty string at the start of every name: every stat is listed.
    assert.match(filtered.text, /^server\.live: 1$/m);
    assert.equal(json.status, 200);
    assert.ok(json.json<{ stats: Array<{ name: string }> }>().stats.some((s) => s.name === 'server.live'));
    assert.ok(plane.status >= 400 && plane.status < 600, `the data plane answered ${plane.status}`);
    assert.equal(ready.text, 'LIVE\n');
    // and the process is still responsive afterwards
    assert.equal((await http('GET', `${gw.admin}/stats?filter=%5Eserver%5C.live%24`)).text, 'server.live: 1\n');
  });

  it('a filter is searched anywhere in the name (RE2 syntax), as Envoy does', async () => {
    assert.equal((await http('GET', `${gw.admin}/stats?filter=erver%5C.liv`)).text, 'server.live: 1\n');
    assert.equal((await http('GET', `${gw.admin}/stats?filter=%5Eerver%5C.live`)).text, '');
    assert.equal((await http('GET', `${gw.admin}/stats?format=json&filter=%5Eserver%5C.l%5Cw%2Be%24`)).text, '{"stats":[{"name":"server.live","value":1}]}');
  });

  it('a refused pattern is a 400 that says why, in every format', async () => {
    const cases: Array<[string, string]> = [
      ['(a)\\1', 'Invalid filter: invalid regex "(a)\\\\1": invalid escape sequence: `\\1` (RE2 syntax: no backreferences, lookahead or lookbehind)\n'],
      ['server(?=\\.)', 'Invalid filter: invalid regex "server(?=\\\\.)": invalid or unsupported Perl syntax: `(?=` (RE2 syntax: no backreferences, lookahead or lookbehind)\n'],
      ['(?<!x)live', 'Invalid filter: invalid regex "(?<!x)live": invalid named capture: `(?<!x)live` (RE2 syntax: no backreferences, lookahead or lookbehind)\n'],
      ['[a-z]{1,500}', 'Invalid filter: regex "[a-z]{1,500}" is too complex: about 1003 instructions once repetitions are expanded (at most 400)\n'],
      ['a'.repeat(1025), `Invalid filter: regex "${'a'.repeat(80)}..." is longer than 1024 characters\n`],
      ['(', 'Invalid filter: invalid regex "(": missing closing ): `(`\n'],
    ];
    for (const [pattern, body] of cases) {
      for (const path of ['/stats', '/stats?format=json', '/stats/prometheus']) {
        const sep = path.includes('?') ? '&' : '?';
        const r = await http('GET', `${gw.admin}${path}${sep}filter=${encodeURIComponent(pattern)}`);
        assert.equal(r.status, 400, `${path} ${pattern}`);
        assert.equal(r.headers['content-type'], TEXT);
        assert.equal(r.text, body);
      }
    }
  });
});
