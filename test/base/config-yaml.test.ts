/**
 * Configuration files nested too deeply (src/base/util/config-yaml.ts): every reader of a YAML or
 * JSON configuration file (route files, auth rules, API keys, `mesh proxy` configs, `mesh run`
 * files) refuses 10,000 levels of flow lists, flow mappings and compact lists with its file and
 * line, not with "Maximum call stack size exceeded"; 64 levels are read and 65 refused at the line
 * of the 65th, in every style (property: chains of random styles, 1 to 300 levels).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { LineCounter } from 'yaml';
import { MAX_CONFIG_DEPTH, parseConfigDocument, parseConfigDocuments } from '../../src/base/util/config-yaml.js';
import { parseRouteFile } from '../../src/edge/routes/file.js';
import { parseRules } from '../../src/edge/auth/rules.js';
import { KeyStore } from '../../src/edge/auth/keys.js';
import { parseProxyConfig } from '../../src/fronts/proxy/config.js';
import { parseRunFile } from '../../src/cli/run-file.js';

const N = 10_000;
/** 10,000 levels, each style on line 3 (after two lines of a mapping's start). */
const DEEP: Record<string, string> = {
  'flow lists': `${'['.repeat(N)}${']'.repeat(N)}`,
  'flow mappings': `${'{a: '.repeat(N)}1${'}'.repeat(N)}`,
  'compact lists': `${'- '.repeat(N)}x`,
  'JSON': `${'{"a": '.repeat(N)}1${'}'.repeat(N)}`,
};

function message(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(!(err instanceof RangeError), String(err));
    return (err as Error).message;
  }
  assert.fail('accepted');
}

describe('configuration files nested too deeply', () => {
  for (const [style, deep] of Object.entries(DEEP)) {
    it(`${style}, 10,000 levels: every reader says file and line`, () => {
      const head = `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: ${deep}\n`;
      assert.equal(message(() => parseRouteFile(head, 'routes.yaml')), `routes.yaml line 3: nested deeper than ${MAX_CONFIG_DEPTH} levels`);
      assert.equal(message(() => parseRules(`rules:\n  - path: /a\n    scopes: ${deep}\n`, false)), 'line 3: nested deeper than 64 levels');
      if (style === 'JSON') assert.equal(message(() => parseRules(`{"rules": [\n{"path": "/a",\n "scopes": ${deep}}]}`, true)), 'line 3: nested deeper than 64 levels');
      assert.equal(message(() => KeyStore.parse(`- key: 0123456789abcdef0123\n  scopes: []\n  subject: ${deep}\n`, 'keys.yaml')), 'line 3: nested deeper than 64 levels');
      assert.match(message(() => parseProxyConfig(`admin:\n  address: 127.0.0.1:0\nlisteners: ${deep}\n`, 'proxy.yaml')), /^proxy config proxy\.yaml:3:\d+: invalid YAML: nested deeper than 64 levels$/);
      assert.equal(message(() => parseRunFile(`apps:\n  - name: a\n    env: ${deep}\n`, 'run.yaml')), 'run.yaml: line 3: not valid YAML: nested deeper than 64 levels');
    });
  }

  it('64 levels are read; 65 are refused at the line of the 65th (block mappings under annotations)', () => {
    // The document is level 1, metadata 2, annotations 3: 61 more make 64.
    const file = (levels: number) =>
      `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\n  annotations:\n${Array.from({ length: levels }, (_, i) => `${'  '.repeat(i + 2)}k${i}:\n`).join('')}${'  '.repeat(levels + 2)}leaf: 1\nspec:\n  rules: [{backendRefs: [{name: a}]}]\n`;
    assert.equal(parseRouteFile(file(61), 'routes.yaml').routes.length, 1);
    // 62 keys: the mapping of `leaf` (line 6 + 62) is the 65th level.
    assert.equal(message(() => parseRouteFile(file(62), 'routes.yaml')), 'routes.yaml line 68: nested deeper than 64 levels');
  });

  it('a route file of several documents: the one too deep is named, by its line', () => {
    const ok = (name: string) => `apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: ${name}}\nspec: {rules: [{backendRefs: [{name: a}]}]}\n`;
    assert.equal(message(() => parseRouteFile(`${ok('a')}---\n${ok('b')}---\nx: ${'['.repeat(64)}${']'.repeat(64)}\n`, 'routes.yaml')), 'routes.yaml line 11: nested deeper than 64 levels');
  });

  it('property: a chain of random styles is refused exactly when deeper than 64, at the line of its 65th level', () => {
    type Style = 'map' | 'seq' | 'flow-map' | 'flow-seq' | 'compact';
    /** The text of a chain of levels; the line of each level's start. */
    function render(styles: Style[]): { text: string; lineOf: number[] } {
      const lines: string[] = [];
      const lineOf: number[] = [];
      let current = '';
      let indent = 0;
      let flow = false;
      let closers = '';
      let flowCol = 0;
      for (const style of styles) {
        if (flow || style === 'flow-map' || style === 'flow-seq') {
          // Once in flow, every deeper level is flow (block cannot go inside flow).
          if (!flow) flowCol = current.length;
          flow = true;
          lineOf.push(lines.length + 1);
          const map = style === 'flow-map' || style === 'map';
          current += map ? '{k: ' : '[';
          closers = (map ? '}' : ']') + closers;
          if (lineOf.length % 7 === 0) {
            lines.push(current);
            current = ' '.repeat(flowCol + 1);
          }
          continue;
        }
        if (style === 'compact') {
          lineOf.push(lines.length + 1);
          current += '- ';
          continue;
        }
        if (current.trim() !== '') {
          lines.push(current);
          indent = current.length;
          current = ' '.repeat(indent);
        }
        lineOf.push(lines.length + 1);
        current += style === 'map' ? 'k: ' : '- ';
        if (style === 'map') {
          lines.push(current.trimEnd());
          indent += 2;
          current = ' '.repeat(indent);
        }
      }
      current += 'x' + closers;
      lines.push(current);
      return { text: lines.join('\n') + '\n', lineOf };
    }
    const style = fc.constantFrom<Style>('map', 'seq', 'flow-map', 'flow-seq', 'compact');
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 300 }).chain((n) => fc.array(style, { minLength: n, maxLength: n })), (styles) => {
        const { text, lineOf } = render(styles);
        const doc = parseConfigDocument(text, { lineCounter: new LineCounter(), prettyErrors: false });
        const docs = parseConfigDocuments(text, { lineCounter: new LineCounter(), prettyErrors: false });
        for (const d of [doc, docs[0]!]) {
          const err = d.errors[0];
          if (styles.length <= MAX_CONFIG_DEPTH) {
            assert.equal(err, undefined, text);
            continue;
          }
          assert.equal(err?.message, 'nested deeper than 64 levels', text);
          const line = err.linePos?.[0]?.line;
          // Parsed (not refused on the estimate): the exact line; refused on the text: within the levels past 60.
          if (styles.length <= 100) assert.equal(line, lineOf[MAX_CONFIG_DEPTH], text);
          else assert.ok(line !== undefined && line >= lineOf[60]! && line <= lineOf[70]!, `${line}\n${text}`);
        }
      }),
      { numRuns: 300 },
    );
  });
});
