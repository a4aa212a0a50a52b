/**
 * One home for each concept, checked on the source: an import graph of src/ (relative imports,
 * `import type` and `export ... from` included) and a look for second copies of shared helpers.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { findCycle } from '../helpers.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const src = join(root, 'src');

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p));
    else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

/** Module (path relative to src/, e.g. `tls/index.ts`) → its source and the src modules it imports. */
const modules = new Map<string, { text: string; imports: Set<string> }>();
for (const file of walk(src)) {
  const text = readFileSync(file, 'utf8');
  const imports = new Set<string>();
  const spec = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)['"](\.[^'"]+)['"]/gm;
  for (let m = spec.exec(text); m; m = spec.exec(text)) {
    imports.add(relative(src, resolve(dirname(file), m[1]!)).replace(/\.js$/, '.ts'));
  }
  modules.set(relative(src, file), { text, imports });
}
const under = (dir: string) => (m: string) => m.startsWith(dir + '/');

/** A cycle among the modules that `keep` selects, as a path, or undefined. */
function cycleAmong(keep: (m: string) => boolean): string[] | undefined {
  const edges = [...modules].flatMap(([from, { imports }]) => (keep(from) ? [...imports].filter((to) => keep(to) && modules.has(to)).map((to) => ({ from, to })) : []));
  return findCycle(edges);
}

describe('module homes', () => {
  it('the graph is read (sanity)', () => {
    assert.ok(modules.get('process/runtime.ts')?.imports.has('tls/acme/provider.ts'));
    assert.ok(modules.get('tls/acme/manager.ts')?.imports.has('tls/certificate.ts'));
  });

  it('TLS: ACME is part of it (src/tls/acme), no import cycle inside src/tls, no src/acme', () => {
    assert.equal(cycleAmong(under('tls')), undefined);
    assert.deepEqual([...modules.keys()].filter(under('acme')), []);
    // The ACME modules use the TLS core (certificate, files, provider), never its entry point.
    for (const m of [...modules.keys()].filter(under('tls/acme'))) assert.ok(!modules.get(m)!.imports.has('tls/index.ts'), m);
  });

  it('TLS owns the certificate types and PEM parsing; it imports nothing from admin', () => {
    for (const [m, { text, imports }] of modules) {
      if (under('tls')(m)) assert.deepEqual([...imports].filter(under('admin')), [], m);
      if (m === 'tls/certificate.ts') continue;
      assert.doesNotMatch(text, /\binterface\s+(CertificateInfo|SubjectAltName)\b|\btype\s+(CertificateInfo|SubjectAltName)\s*=/, m);
      assert.doesNotMatch(text, /\bfunction\s+(certificateInfoFromPem|parseSubjectAltNames)\b/, m);
      // Certificates are parsed in the TLS layer only.
      if (!under('tls')(m)) assert.doesNotMatch(text, /new X509Certificate\(/, m);
    }
  });

  it('registry: no backend imports a sibling backend; shared records live in records.ts', () => {
    // A backend is one file (memory) or one folder (local/, etcd/: a module per part).
    const backends: Record<string, (m: string) => boolean> = {
      memory: (m) => m === 'engines/registry/memory.ts',
      local: under('engines/registry/local'),
      etcd: under('engines/registry/etcd'),
    };
    for (const [b, owns] of Object.entries(backends)) {
      const own = [...modules.keys()].filter(owns);
      assert.ok(own.length > 0, b);
      for (const m of own) {
        const others = [...modules.get(m)!.imports].filter((i) => !owns(i) && Object.values(backends).some((o) => o(i)));
        assert.deepEqual(others, [], m);
      }
      if (b !== 'memory') assert.ok(own.some((m) => modules.get(m)!.imports.has('engines/registry/records.ts')), b);
    }
    for (const [m, { text }] of modules) {
      if (m === 'engines/registry/records.ts') continue;
      assert.doesNotMatch(text, /\bfunction\s+(cloneService|diffVersions|canonicalJson|sameVersion|byVersion|byNodeId|byName)\b|\bclass\s+EventQueue\b/, m);
    }
  });

  it('watched files: only base/config/watch-dirs.ts opens an fs.watch; only src/tls/workload/watch.ts and base/config/settled.ts watch a file or read one once settled', () => {
    for (const [m, { text }] of modules) {
      if (m !== 'base/config/watch-dirs.ts') assert.doesNotMatch(text, /import\s*\{[^}]*\bwatch\b[^}]*\}\s*from\s*'node:fs'|\bfs\.watch\(|\bwatchFile\(/, m);
      if (m === 'tls/workload/watch.ts' || m === 'base/config/settled.ts' || m === 'base/config/watch-dirs.ts') continue;
      assert.doesNotMatch(text, /\bfunction\s+(readSettled|fileSignature|watchFiles|watchDirs)\b/, m);
    }
    // Every reload of a watched file reads through readSettled (a configuration file by the config reader's readConfigFileSettled).
    for (const m of ['edge/routes/live.ts', 'fronts/proxy/server.ts', 'edge/auth/edge.ts', 'edge/auth/authz.ts', 'tls/file-store.ts', 'tls/workload/files-source.ts', 'base/config/reader.ts']) {
      assert.match(modules.get(m)!.text, /\bread(ConfigFile)?Settled\(/, m);
    }
  });

  it('header names and regex escaping each have one function', () => {
    for (const [m, { text }] of modules) {
      if (m !== 'core/transport/headers.ts') assert.doesNotMatch(text, /\bfunction\s+canonical\w*(Header|Name)\w*\s*\(\s*name\b/, m);
      if (m !== 'base/util/regex.ts') assert.ok(!text.includes('[.*+?^${}()|[\\]\\\\]'), m);
    }
  });

  it('configuration YAML is parsed in one place, with its nesting bound (base/util/config-yaml.ts)', () => {
    for (const [m, { text }] of modules) {
      if (m === 'base/util/config-yaml.ts') continue;
      const fromYaml = [...text.matchAll(/import\s*(?:type\s*)?\{([^}]*)\}\s*from\s*'yaml'/g)].map((x) => x[1]!);
      for (const names of fromYaml) assert.doesNotMatch(names, /\b(parse|parseDocument|parseAllDocuments|Parser|Lexer|Composer)\b/, m);
      assert.doesNotMatch(text, /import\s+\w+\s+from\s*'yaml'|import\s*\*\s*as\s+\w+\s+from\s*'yaml'/, m);
    }
  });
});
