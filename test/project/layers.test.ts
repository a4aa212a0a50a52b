/**
 * The layers of docs/architecture.md hold: every import of src/ (static, dynamic, `import type`,
 * `export ... from`, `import('...').T`) goes to its own layer or one below, unless the doc's
 * exceptions name it; examples/ import only the package entry and each other; nothing in src/
 * imports examples/. The layer table and the exceptions are read from the doc itself, so the doc
 * and the check cannot drift apart.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import ts from 'typescript';
import { findCycle, ROOT } from '../helpers.js';

interface Layer {
  rank: number;
  paths: string[];
}
interface Exception {
  from: string;
  to: string;
}
interface Edge {
  from: string;
  to: string;
}

/** The rows of the first table after `heading` (up to the next heading), as cells. */
function tableRows(markdown: string, heading: string, after = 0): string[][] {
  const start = markdown.indexOf(heading, after);
  assert.ok(start >= 0, `docs/architecture.md has no "${heading}"`);
  const rows: string[][] = [];
  let inTable = false;
  for (const line of markdown.slice(start + heading.length).split('\n')) {
    if (line.startsWith('#')) break;
    if (line.startsWith('|')) {
      inTable = true;
      const cells = line.slice(1, line.endsWith('|') ? -1 : undefined).split('|').map((c) => c.trim());
      if (cells.every((c) => /^:?-+:?$/.test(c))) continue;
      rows.push(cells);
    } else if (inTable) {
      break;
    }
  }
  return rows.slice(1); // the header row
}

const code = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

export function parseArchitecture(markdown: string): { layers: Layer[]; exceptions: Exception[] } {
  const section = markdown.indexOf('## Layers');
  assert.ok(section >= 0, 'docs/architecture.md has no "## Layers" section');
  const layers = tableRows(markdown, '## Layers').map(([rank, paths]) => {
    assert.match(rank ?? '', /^\d+$/, `a layer row starts with its number, not ${rank}`);
    return { rank: Number(rank), paths: code(paths ?? '') };
  });
  const exceptions = tableRows(markdown, 'Allowed exceptions', section).map(([from, to]) => {
    const [f] = code(from ?? '');
    const [t] = code(to ?? '');
    assert.ok(f && t, `an exception row names one file in each of its first two cells: ${from} | ${to}`);
    return { from: f, to: t };
  });
  return { layers, exceptions };
}

/** The layer of a file: the one whose path holds it most closely (a directory ends in `/`). */
export function layerOf(layers: Layer[], file: string): Layer | undefined {
  let best: { layer: Layer; length: number } | undefined;
  for (const layer of layers) {
    for (const p of layer.paths) {
      const holds = p.endsWith('/') ? file.startsWith(p) : file === p;
      if (holds && (!best || p.length > best.length)) best = { layer, length: p.length };
    }
  }
  return best?.layer;
}

/** What breaks the rules: an import from a layer above, a file in no layer, src/ importing examples/, examples/ importing src/ other than the entry. */
export function violations(layers: Layer[], exceptions: Exception[], edges: Edge[]): string[] {
  const out: string[] = [];
  const allowed = (e: Edge) => exceptions.some((x) => x.from === e.from && x.to === e.to);
  for (const e of edges) {
    if (allowed(e)) continue;
    const fromExample = e.from.startsWith('examples/');
    const toExample = e.to.startsWith('examples/');
    if (fromExample) {
      if (!toExample && e.to !== 'src/index.ts') out.push(`${e.from} imports ${e.to}: examples import only the package entry (src/index.ts) and each other`);
      continue;
    }
    if (toExample) {
      out.push(`${e.from} imports ${e.to}: nothing in src/ imports examples/`);
      continue;
    }
    const from = layerOf(layers, e.from);
    const to = layerOf(layers, e.to);
    if (!from) out.push(`${e.from} is in no layer of docs/architecture.md`);
    else if (!to) out.push(`${e.to} (imported by ${e.from}) is in no layer of docs/architecture.md`);
    else if (to.rank > from.rank) out.push(`${e.from} (layer ${from.rank}) imports ${e.to} (layer ${to.rank}), a layer above it`);
  }
  return [...new Set(out)];
}

/** Every module a file imports, as repository paths (relative specifiers only; `.js` resolves to `.ts`). */
export function importsOf(file: string, text: string): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
  const specifiers: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      specifiers.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [arg] = node.arguments;
      if (arg && ts.isStringLiteralLike(arg)) specifiers.push(arg.text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      specifiers.push(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return specifiers
    .filter((s) => s.startsWith('.'))
    .map((s) => join(dirname(file), s).split(sep).join('/').replace(/\.js$/, '.ts'));
}

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const p = `${dir}/${name}`;
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...tsFiles(p));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

const doc = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
const { layers, exceptions } = parseArchitecture(doc);
const files = [...tsFiles('src'), ...tsFiles('examples')];
const edges: Edge[] = files.flatMap((from) => importsOf(from, readFileSync(join(ROOT, from), 'utf8')).map((to) => ({ from, to })));

describe('layers (docs/architecture.md)', () => {
  it('the table is well formed: distinct ranks, every path exists, every src file in one layer', () => {
    assert.ok(layers.length >= 5, `found ${layers.length} layers`);
    assert.equal(new Set(layers.map((l) => l.rank)).size, layers.length, 'each rank once');
    for (const l of layers) for (const p of l.paths) assert.ok(existsSync(join(ROOT, p)), `${p} (layer ${l.rank}) does not exist`);
    const paths = layers.flatMap((l) => l.paths);
    assert.equal(new Set(paths).size, paths.length, 'each path once');
    const homeless = tsFiles('src').filter((f) => !layerOf(layers, f));
    assert.deepEqual(homeless, [], 'files in no layer');
  });

  it('every import of src/ and examples/ follows the layers', () => {
    for (const e of edges) assert.ok(existsSync(join(ROOT, e.to)), `${e.from} imports ${e.to}, which does not exist`);
    assert.deepEqual(violations(layers, exceptions, edges), []);
  });

  it('each exception is an import that exists and would otherwise break the rules', () => {
    assert.ok(exceptions.length <= 3, 'exceptions stay few');
    for (const x of exceptions) {
      assert.ok(
        edges.some((e) => e.from === x.from && e.to === x.to),
        `the exception ${x.from} -> ${x.to} is not an import any more: remove it from docs/architecture.md`,
      );
      assert.notDeepEqual(violations(layers, [], [x]), [], `${x.from} -> ${x.to} follows the layers: it needs no exception`);
    }
  });

  it('the check itself finds an import from above, src/ importing examples/, and examples/ importing src/ internals', () => {
    const found = violations(layers, exceptions, [
      { from: 'src/base/util/text.ts', to: 'src/cli/flags.ts' },
      { from: 'src/core/upstream/cluster.ts', to: 'src/process/runtime.ts' },
      { from: 'src/process/runtime.ts', to: 'src/core/upstream/cluster.ts' },
      { from: 'src/fronts/gateway/server.ts', to: 'src/fronts/gateway/router.ts' },
      { from: 'src/cli/dev.ts', to: 'examples/greeter.ts' },
      { from: 'examples/greeter-srv.ts', to: 'src/framework/mesh.ts' },
      { from: 'examples/greeter-srv.ts', to: 'src/index.ts' },
      { from: 'src/framework/mesh.ts', to: 'src/cli/serve.ts' },
    ]);
    assert.deepEqual(found, [
      `src/base/util/text.ts (layer ${layerOf(layers, 'src/base/util/text.ts')!.rank}) imports src/cli/flags.ts (layer ${layerOf(layers, 'src/cli/flags.ts')!.rank}), a layer above it`,
      `src/core/upstream/cluster.ts (layer ${layerOf(layers, 'src/core/upstream/cluster.ts')!.rank}) imports src/process/runtime.ts (layer ${layerOf(layers, 'src/process/runtime.ts')!.rank}), a layer above it`,
      'src/cli/dev.ts imports examples/greeter.ts: nothing in src/ imports examples/',
      'examples/greeter-srv.ts imports src/framework/mesh.ts: examples import only the package entry (src/index.ts) and each other',
      `src/framework/mesh.ts (layer ${layerOf(layers, 'src/framework/mesh.ts')!.rank}) imports src/cli/serve.ts (layer ${layerOf(layers, 'src/cli/serve.ts')!.rank}), a layer above it`,
    ]);
  });

  it('the imports of src/ have no circle, type-only ones included', () => {
    const cycle = findCycle(edges.filter((e) => e.from.startsWith('src/') && e.to.startsWith('src/')));
    assert.equal(cycle, undefined, `an import circle: ${cycle?.join(' -> ')}`);
  });

  it('the circle check finds a circle and names its files', () => {
    assert.deepEqual(
      findCycle([
        { from: 'src/a.ts', to: 'src/b.ts' },
        { from: 'src/b.ts', to: 'src/c.ts' },
        { from: 'src/c.ts', to: 'src/d.ts' },
        { from: 'src/d.ts', to: 'src/b.ts' },
      ]),
      ['src/b.ts', 'src/c.ts', 'src/d.ts', 'src/b.ts'],
    );
    assert.equal(findCycle([{ from: 'src/a.ts', to: 'src/b.ts' }, { from: 'src/a.ts', to: 'src/c.ts' }, { from: 'src/c.ts', to: 'src/b.ts' }]), undefined);
  });

  it('reads every kind of import, type-only and dynamic ones included', () => {
    const text = [
      "import { a } from './a.js';",
      "import type { B } from '../b/b.js';",
      "export { c } from './c.js';",
      "export type { D } from './d.js';",
      "import 'node:fs';",
      "import pino from 'pino';",
      "const e = await import('./e.js');",
      "type F = import('../f.js').F;",
      "import './side-effect.js';",
    ].join('\n');
    assert.deepEqual(importsOf('src/x/y.ts', text), ['src/x/a.ts', 'src/b/b.ts', 'src/x/c.ts', 'src/x/d.ts', 'src/x/e.ts', 'src/f.ts', 'src/x/side-effect.ts']);
  });

});
