/**
 * Errors from the catalogue only (src/base/errors.ts): no error is built inline with
 * `new MeshError(` in src/ but in the catalogue itself and in code written against the public
 * API (src/index.ts exports MeshError to services; the demo greeter is such a service). Every
 * other writer calls a factory of the catalogue (badRequest, notFound, ..., or a named one), and
 * the id it passes is a member of ERROR_IDS (or, for a framework server, the service's own name),
 * never a string literal.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import * as errors from '../../src/base/errors.js';
import { ROOT } from '../helpers.js';

/** Where `new MeshError(` may stay, with why. */
const ALLOWED: Record<string, string> = {
  'src/base/errors.ts': 'the catalogue',
  'src/demo/greeter.ts': 'a service written against the public API (src/index.ts exports MeshError)',
};

/** The catalogue's exports that are not factories taking the id first. */
const NOT_FACTORIES = new Set(['MeshError', 'ERROR_IDS', 'CLIENT_CLOSED_REQUEST', 'flagged', 'statusTextOf', 'parseErrorBody', 'asFrontEndError', 'toMeshError']);

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Every src/**\/*.ts as [path relative to the root with /, text]. */
const FILES = sources(join(ROOT, 'src')).map((file) => [relative(ROOT, file).split(sep).join('/'), readFileSync(file, 'utf8')] as const);

/** The line (1-based) of an offset. */
const lineAt = (text: string, offset: number) => text.slice(0, offset).split('\n').length;

/** Each match of `re` (global) in every source file outside `skip`, as file:line and the match. */
function findAll(re: RegExp, skip: (file: string) => boolean = () => false): { where: string; m: RegExpExecArray }[] {
  const out: { where: string; m: RegExpExecArray }[] = [];
  for (const [file, text] of FILES) {
    if (skip(file)) continue;
    // Comments blanked (block comments and whole-line // comments), lines kept.
    const code = text.replace(/\/\*[\s\S]*?\*\/|^\s*\/\/[^\n]*/gm, (c) => c.replace(/[^\n]/g, ' '));
    for (const m of code.matchAll(re)) out.push({ where: `${file}:${lineAt(code, m.index)}`, m: m as RegExpExecArray });
  }
  return out;
}

const KEYS = new Set(Object.keys(errors.ERROR_IDS));
const FACTORIES = Object.entries(errors)
  .filter(([name, value]) => typeof value === 'function' && !NOT_FACTORIES.has(name))
  .map(([name]) => name);

describe('errors from the catalogue only', () => {
  it('no inline new MeshError( outside the catalogue and the public-API code', () => {
    const found = findAll(/\bnew\s+MeshError\s*\(/g, (file) => file in ALLOWED).map(({ where }) => where);
    assert.deepEqual(found, [], `build these with a factory of src/base/errors.ts:\n${found.join('\n')}`);
  });

  it('the allowed places exist and are still needed', () => {
    for (const file of Object.keys(ALLOWED)) {
      const entry = FILES.find(([f]) => f === file);
      assert.ok(entry, `${file} is gone: take it off ALLOWED`);
      assert.match(entry[1], /\bnew MeshError\(/, `${file} builds no MeshError any more: take it off ALLOWED`);
    }
  });

  it('the factories are found (the test looks for the right names)', () => {
    for (const name of ['badRequest', 'unauthorized', 'forbidden', 'notFound', 'tooManyRequests', 'clientClosed', 'errorWithStatus', 'bodyTooLarge']) {
      assert.ok(FACTORIES.includes(name), name);
    }
  });

  it('a factory is never given a string literal as its id', () => {
    const call = new RegExp(`\\b(?:${FACTORIES.join('|')})\\(\\s*['"\`]`, 'g');
    const found = findAll(call, (file) => file === 'src/base/errors.ts').map(({ where, m }) => `${where}: ${m[0]}`);
    assert.deepEqual(found, [], `name the id from ERROR_IDS:\n${found.join('\n')}`);
  });

  it('every ERROR_IDS.<name> in src/ is a member of the catalogue', () => {
    const found = findAll(/\bERROR_IDS\.([A-Za-z_$][\w$]*)/g)
      .filter(({ m }) => !KEYS.has(m[1]!))
      .map(({ where, m }) => `${where}: ${m[0]}`);
    assert.deepEqual(found, []);
  });

  it('every error-id constant of a module is a member of ERROR_IDS', () => {
    const decls = findAll(/\b(?:const|let)\s+([A-Z_]*(?:ERROR_ID|CLIENT_ID|CLI_ID))\s*(?::[^=]+)?=\s*([^;\n]+)/g);
    assert.ok(decls.length >= 5, 'the constants are found');
    const found = decls
      .filter(({ m }) => {
        const value = /^ERROR_IDS\.([A-Za-z_$][\w$]*)$/.exec(m[2]!.trim());
        return !value || !KEYS.has(value[1]!);
      })
      .map(({ where, m }) => `${where}: ${m[1]} = ${m[2]!.trim()}`);
    assert.deepEqual(found, []);
  });

  it('the status factories keep the error JSON byte for byte', () => {
    const cases: [errors.MeshError, string][] = [
      [errors.unauthorized(errors.ERROR_IDS.broker, 'x'), '{"id":"go.mesh.broker","code":401,"detail":"x","status":"Unauthorized"}'],
      [errors.forbidden(errors.ERROR_IDS.authz, 'x'), '{"id":"go.mesh.authz","code":403,"detail":"x","status":"Forbidden"}'],
      [errors.headersTooLarge(errors.ERROR_IDS.gateway, 'x'), '{"id":"go.mesh.api","code":431,"detail":"x","status":"Request Header Fields Too Large"}'],
      [errors.clientClosed('go.mesh.srv.x', 'x'), '{"id":"go.mesh.srv.x","code":499,"detail":"x","status":"Client Closed Request"}'],
      [errors.errorWithStatus(errors.ERROR_IDS.client, 499, 'x'), '{"id":"go.mesh.client","code":499,"detail":"x","status":"Unknown"}'],
    ];
    for (const [err, body] of cases) assert.equal(err.toBody(), body);
  });

  it('the named recurring errors, as written on the wire', () => {
    const { ERROR_IDS } = errors;
    assert.equal(errors.noBackend(ERROR_IDS.proxy, 'r1').toBody(), '{"id":"go.mesh.proxy","code":500,"detail":"route r1: every backend has weight 0","status":"Internal Server Error"}');
    assert.equal(errors.serviceNotFound(ERROR_IDS.cli, 'a').toBody(), '{"id":"go.mesh.cli","code":404,"detail":"service a: not found","status":"Not Found"}');
    const timeout = errors.proxyTimeout(ERROR_IDS.gateway, 'a on 127.0.0.1:1', 5);
    assert.equal(timeout.toBody(), '{"id":"go.mesh.api","code":504,"detail":"proxy to a on 127.0.0.1:1: timeout after 5ms","status":"Gateway Timeout"}');
    assert.equal(timeout.responseFlag, 'UT');
    const failed = errors.proxyFailed(ERROR_IDS.sidecar, 'a on h:1', 'ECONNREFUSED', 'UF');
    assert.equal(failed.toBody(), '{"id":"go.mesh.sidecar","code":502,"detail":"proxy to a on h:1: ECONNREFUSED","status":"Bad Gateway"}');
    assert.equal(failed.responseFlag, 'UF');
    assert.equal(errors.tooManyHeaderFields('s', 100).detail, 'more than 100 header fields');
    assert.equal(errors.noCodec(ERROR_IDS.broker, undefined).detail, 'no codec for content type undefined');
    assert.equal(errors.serverStreamSend(ERROR_IDS.client).detail, 'a server stream takes its one request at open');
    assert.equal(errors.streamRequestClosed(ERROR_IDS.client).detail, 'the request side of the stream is closed');
    assert.equal(errors.streamMessageTooLarge(ERROR_IDS.client, 9, 8).toBody(), '{"id":"go.mesh.client","code":413,"detail":"stream message of 9 bytes is larger than 8 bytes","status":"Payload Too Large"}');
  });
});
