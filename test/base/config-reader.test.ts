/**
 * The one config reader (src/base/config/reader.ts): its limits (size, depth, aliases and their
 * expansion, custom tags), its positions (a node, a field path) and its one error type, written in
 * each kind of file's form; and the readers of mesh's files (route files, proxy configs, rules,
 * API keys, run files) refusing the same things through it.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isMap } from 'yaml';
import {
  ConfigFileError,
  configErrorMessage,
  fieldName,
  MAX_CONFIG_ALIASES,
  MAX_CONFIG_DEPTH,
  MAX_CONFIG_FILE_BYTES,
  parseConfig,
  parseConfigAll,
  readConfigFile,
  readConfigFileSettled,
  type ConfigErrorStyle,
} from '../../src/base/config/reader.js';
import { parseRouteFile, RouteFileError } from '../../src/edge/routes/file.js';
import { parseProxyConfig, ProxyConfigError } from '../../src/fronts/proxy/config.js';
import { parseRules } from '../../src/edge/auth/rules.js';
import { RulesError } from '../../src/edge/auth/rule-file.js';
import { KeyStore } from '../../src/edge/auth/keys.js';
import { parseRunFile, RunFileError } from '../../src/cli/run-file.js';
import { tempDir } from '../helpers.js';

const STYLE: ConfigErrorStyle = { name: 'TestConfigError', withFile: true, position: 'line', syntaxPrefix: 'bad YAML: ' };

function caught(fn: () => unknown): ConfigFileError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigFileError, `expected a ConfigFileError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected an error');
}

/** A billion laughs: 9 levels of 10 aliases each, 10^9 strings once expanded, in a few hundred bytes. */
const LAUGHS = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]', ...'bcdefghi'.split('').map((k, i) => `${k}: &${k} [${Array(10).fill(`*${'abcdefghi'[i]}`).join(',')}]`)].join('\n') + '\n';

describe('config reader: limits', () => {
  it('size: a text or file larger than the bound is refused without parsing', () => {
    const big = `x: "${'a'.repeat(MAX_CONFIG_FILE_BYTES)}"\n`;
    const err = caught(() => parseConfig(big, { file: 'big.yaml', style: STYLE }));
    assert.equal(err.message, `big.yaml: larger than ${MAX_CONFIG_FILE_BYTES} bytes`);
    assert.equal(err.code, 'TOO_BIG');
    assert.equal(caught(() => parseConfig('x: 12345\n', { file: 'f.yaml', style: STYLE, maxBytes: 4 })).message, 'f.yaml: larger than 4 bytes');
    const dir = tempDir();
    try {
      const file = join(dir.path, 'big.yaml');
      writeFileSync(file, 'x: 12345\n');
      assert.equal(caught(() => readConfigFile(file, STYLE, 4)).message, `${file}: cannot read: larger than 4 bytes`);
      assert.equal(readConfigFile(file, STYLE), 'x: 12345\n');
    } finally {
      dir.cleanup();
    }
  });

  it(`depth: ${MAX_CONFIG_DEPTH} levels are read, one more is refused at its line`, () => {
    const nested = (n: number) => `x: ${'['.repeat(n - 1)}1${']'.repeat(n - 1)}\n`;
    assert.ok(parseConfig(nested(MAX_CONFIG_DEPTH), { file: 'f.yaml', style: STYLE }));
    assert.equal(caught(() => parseConfig(`a: 1\n${nested(MAX_CONFIG_DEPTH + 1)}`, { file: 'f.yaml', style: STYLE })).message, `f.yaml line 2: bad YAML: nested deeper than ${MAX_CONFIG_DEPTH} levels`);
    // Far too deep for the parser's stack: refused on the text itself.
    assert.match(caught(() => parseConfig(`x: ${'['.repeat(100_000)}`, { file: 'f.yaml', style: STYLE })).message, /^f\.yaml line 1: bad YAML: nested deeper than 64 levels$/);
  });

  it(`aliases: at most ${MAX_CONFIG_ALIASES}; their expansion is bounded too (a billion laughs)`, () => {
    const many = `a: &a 1\nb: [${Array(MAX_CONFIG_ALIASES + 1).fill('*a').join(', ')}]\n`;
    assert.equal(caught(() => parseConfig(many, { file: 'f.yaml', style: STYLE })).message, `f.yaml line 2: bad YAML: more than ${MAX_CONFIG_ALIASES} aliases`);
    const few = parseConfig('a: &a {x: 1}\nb: *a\n', { file: 'f.yaml', style: STYLE });
    assert.deepEqual(few.toJS(), { a: { x: 1 }, b: { x: 1 } });
    // 90 aliases (under the count) expanding to 10^9 values: refused when turned into values.
    const laughs = parseConfig(LAUGHS, { file: 'lol.yaml', style: STYLE });
    const err = caught(() => laughs.toJS());
    assert.match(err.message, /^lol\.yaml: bad YAML: Excessive alias count/);
    assert.equal(err.line, undefined);
  });

  it('tags: only plain values; a custom tag (or !!binary, !!set) is refused at its line', () => {
    assert.equal(caught(() => parseConfig('a: 1\nb: !foo x\n', { file: 'f.yaml', style: STYLE })).message, 'f.yaml line 2: bad YAML: tag !foo is not allowed (plain YAML or JSON values only)');
    assert.equal(caught(() => parseConfig('a: !!binary aGk=\n', { file: 'f.yaml', style: STYLE })).message, 'f.yaml line 1: bad YAML: tag !!binary is not allowed (plain YAML or JSON values only)');
    assert.equal(caught(() => parseConfig('a: !!set {x: null}\n', { file: 'f.yaml', style: STYLE })).line, 1);
    assert.deepEqual(parseConfig('a: !!str 1\nb: !!int "2"\nc: !!map {d: !!seq [!!null null, !!bool true, !!float 1.5]}\n', { file: 'f.yaml', style: STYLE }).toJS(), { a: '1', b: 2, c: { d: [null, true, 1.5] } });
  });

  it('JSON is YAML; a .json file is held to strict JSON', () => {
    assert.deepEqual(parseConfig('{"a": [1, {"b": null}]}', { file: 'f.json', style: STYLE, json: true }).toJS(), { a: [1, { b: null }] });
    const err = caught(() => parseConfig('{"a": 1,\n "b": 2,}\n', { file: 'f.json', style: STYLE, json: true }));
    assert.match(err.message, /^f\.json line 2: not valid JSON: /);
  });

  it('several documents: each within the limits; the first error wins', () => {
    assert.equal(parseConfigAll('a: 1\n---\nb: 2\n', { file: 'f.yaml', style: STYLE }).length, 2);
    assert.equal(caught(() => parseConfigAll('a: 1\n---\nb: !x 2\n', { file: 'f.yaml', style: STYLE })).line, 3);
  });
});

describe('config reader: positions and the one error type', () => {
  const doc = parseConfig('listeners:\n  - name: a\n    routes:\n      - prefix: /\n        cluster: c\n', { file: 'p.yaml', style: STYLE });

  it('the line and column of a node and of a field path (or its nearest ancestor)', () => {
    assert.deepEqual(doc.positionAt(['listeners', 0, 'routes', 0, 'cluster']), { line: 5, col: 18 });
    assert.equal(doc.lineAt(['listeners', 0, 'routes', 0, 'cluster'], true), 5);
    assert.deepEqual(doc.positionAt(['listeners', 0, 'routes', 0, 'cluster'], true), { line: 5, col: 9 });
    assert.equal(doc.lineAt(['listeners', 0, 'missing', 3]), 2);
    assert.equal(doc.lineAt([]), 1);
    const root = doc.contents;
    assert.ok(isMap(root));
    assert.equal(doc.lineOf(root.get('listeners', true)), 2);
    assert.equal(fieldName(['listeners', 0, 'routes', 1, 'cluster']), 'listeners[0].routes[1].cluster');
  });

  it('one error type: file, line, column, field path and problem, written by the style', () => {
    const err = doc.error(doc.contents, 'must be good', 'listeners[0]');
    assert.ok(err instanceof ConfigFileError);
    assert.deepEqual([err.name, err.file, err.line, err.col, err.field, err.problem], ['TestConfigError', 'p.yaml', 1, 1, 'listeners[0]', 'must be good']);
    assert.equal(err.message, 'p.yaml line 1: listeners[0]: must be good');
    const parts = { file: 'f.yaml', line: 3, col: 7, field: 'a.b', problem: 'wrong' };
    assert.equal(configErrorMessage({ name: 'E', withFile: true, position: 'colon-line' }, parts), 'f.yaml: line 3: a.b: wrong');
    assert.equal(configErrorMessage({ name: 'E', prefix: 'proxy config ', withFile: true, position: 'line-col' }, parts), 'proxy config f.yaml:3:7: a.b: wrong');
    assert.equal(configErrorMessage({ name: 'E', withFile: false, position: 'line' }, parts), 'line 3: a.b: wrong');
    assert.equal(configErrorMessage({ name: 'E', withFile: false, position: 'line' }, { file: 'f', problem: 'no keys' }), 'no keys');
  });

  it('reading: a file that is absent or a directory, in words or by its errno code; a settled read refuses an empty file', async () => {
    const dir = tempDir();
    try {
      const absent = join(dir.path, 'absent.yaml');
      assert.equal(caught(() => readConfigFile(absent, STYLE)).message, `${absent}: cannot read: no such file`);
      assert.equal(caught(() => readConfigFile(absent, { ...STYLE, readReason: 'code' })).message, `${absent}: cannot read: ENOENT`);
      mkdirSync(join(dir.path, 'sub'));
      assert.equal(caught(() => readConfigFile(join(dir.path, 'sub'), STYLE)).code, 'EISDIR');
      const empty = join(dir.path, 'empty.yaml');
      writeFileSync(empty, '');
      assert.equal(readConfigFile(empty, STYLE), '');
      await assert.rejects(readConfigFileSettled(empty, STYLE, { settleMs: 1 }), (err: unknown) => err instanceof ConfigFileError && err.code === 'EMPTY' && err.message.startsWith(`${empty}: is empty: `));
      const good = join(dir.path, 'good.yaml');
      writeFileSync(good, 'a: 1\n');
      assert.equal(await readConfigFileSettled(good, STYLE, { settleMs: 1 }), 'a: 1\n');
    } finally {
      dir.cleanup();
    }
  });
});

describe("config reader: mesh's files refuse the same things, each in its own form", () => {
  const tag = 'b: !foo x';
  it('route files', () => {
    const err = caught(() => parseRouteFile(`apiVersion: gateway.networking.k8s.io/v1\n${tag}\n`, 'routes.yaml'));
    assert.ok(err instanceof RouteFileError);
    assert.equal(err.message, 'routes.yaml line 2: tag !foo is not allowed (plain YAML or JSON values only)');
  });
  it('mesh proxy configs (a billion laughs included)', () => {
    const err = caught(() => parseProxyConfig(`a: 1\n${tag}\n`, 'proxy.yaml'));
    assert.ok(err instanceof ProxyConfigError);
    assert.equal(err.message, 'proxy config proxy.yaml:2:9: invalid YAML: tag !foo is not allowed (plain YAML or JSON values only)');
    assert.match(caught(() => parseProxyConfig(LAUGHS, 'proxy.yaml')).message, /^proxy config proxy\.yaml: invalid YAML: Excessive alias count/);
  });
  it('auth rules and API keys', () => {
    const err = caught(() => parseRules(`- path: /\n  access: !foo public\n`, false));
    assert.ok(err instanceof RulesError);
    assert.equal(err.message, 'line 2: tag !foo is not allowed (plain YAML or JSON values only)');
    assert.match(caught(() => parseRules('- {path: /, access: public}\n- path: *nope\n', false)).message, /^line 2: Unresolved alias/);
    assert.equal(caught(() => KeyStore.parse('- key: [\n', 'keys.yaml')).line, 2);
    assert.equal(caught(() => KeyStore.parse(`a: &a {subject: x}\nb: [${Array(101).fill('*a').join(',')}]\n`, 'keys.yaml')).message, `line 2: more than ${MAX_CONFIG_ALIASES} aliases`);
  });
  it('mesh run files', () => {
    const err = caught(() => parseRunFile(`apps:\n  - name: a\n    ${tag}\n`, 'run.yaml'));
    assert.ok(err instanceof RunFileError);
    assert.equal(err.message, 'run.yaml: line 3: not valid YAML: tag !foo is not allowed (plain YAML or JSON values only)');
  });
});
