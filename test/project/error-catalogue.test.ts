/**
 * The error catalogue (src/base/errors.ts): every error id the project writes itself is a constant of
 * ERROR_IDS, not a string literal at the writer; the ids are distinct; the recurring front-end
 * errors are built in one place with their exact bytes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { bodyTooLarge, ERROR_IDS, originNotAllowed, rateLimited, rootMethodNotAllowed } from '../../src/base/errors.js';
import { ROOT } from '../helpers.js';

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

describe('error catalogue', () => {
  it('the ids are distinct', () => {
    const ids = Object.values(ERROR_IDS);
    assert.equal(new Set(ids).size, ids.length);
  });

  it('no writer in src/ spells an id of the catalogue as a literal', () => {
    const found: string[] = [];
    // `go.mesh.api` is also the gateway's default namespace, so it is only looked for where an id goes.
    const literal = new RegExp(`'(${Object.values(ERROR_IDS).filter((id) => id !== ERROR_IDS.gateway).map((id) => id.replace(/\./g, '\\.')).join('|')})'`);
    const asId = /new MeshError\(\s*'go\.mesh\.[a-z]+'|(?:ERROR_ID|_ID) = 'go\.mesh\.[a-z]+'|toMeshError\([^)]*'go\.mesh\.[a-z]+'\)/;
    for (const file of sources(join(ROOT, 'src'))) {
      const rel = relative(ROOT, file);
      if (rel === join('src', 'base', 'errors.ts')) continue;
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (literal.test(line) || asId.test(line)) found.push(`${rel}:${i + 1}: ${line.trim()}`);
        });
    }
    assert.deepEqual(found, []);
  });

  it('the recurring front-end errors, as written on the wire', () => {
    assert.equal(bodyTooLarge('go.mesh.api', 10).toBody(), '{"id":"go.mesh.api","code":413,"detail":"request body larger than 10 bytes","status":"Payload Too Large"}');
    const rl = rateLimited('go.mesh.sidecar', '10/s', 1);
    assert.equal(rl.toBody(), '{"id":"go.mesh.sidecar","code":429,"detail":"rate limit of 10/s exceeded: retry after 1s","status":"Too Many Requests"}');
    assert.equal(rl.responseFlag, 'RL');
    assert.equal(rateLimited('go.mesh.api', '1/m', 60, 2).detail, 'rate limit of 1/m exceeded (rule 2): retry after 60s');
    assert.equal(originNotAllowed('go.mesh.sidecar', 'http://evil.example').code, 403);
    assert.equal(rootMethodNotAllowed('go.mesh.api', 'POST').detail, 'method POST not allowed on /: use GET');
  });
});
