/**
 * A route file of many RegularExpression path matches against a small one (opt-in row
 * `route-regex`): the time and heap to parse and compile a file of 10,000 regex rules and of 10,
 * and the CPU of one match (hit: the file's last rule; miss: no rule, under the last rule's own
 * prefix) in microseconds, with the ratio of the large table to the small one, measured in
 * alternating rounds of the same run.
 * In one process, no HTTP: the matcher alone (src/edge/routes/table.ts on RouteMatcher, src/edge/routes/match.ts).
 * Run: node --import tsx bench/route-regex.ts [rules] (prints one JSON object).
 */
import { pathToFileURL } from 'node:url';
import { parseRouteFile } from '../src/edge/routes/file.js';
import { CompiledRoutes, type RouteRequest } from '../src/edge/routes/table.js';

const HEAD = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const PER_ROUTE = 16;

/** `rules` regex rules, 16 per route: `/svc<r>-<k>/items/[0-9]+(/[a-z]+)?`, each to its own service. */
export function regexRouteFile(rules: number): string {
  const docs: string[] = [];
  for (let r = 0; r * PER_ROUTE < rules; r++) {
    const lines = [`${HEAD}metadata: {name: r${r}}`, 'spec:', '  rules:'];
    for (let k = 0; k < PER_ROUTE && r * PER_ROUTE + k < rules; k++) {
      lines.push(`    - matches: [{path: {type: RegularExpression, value: "/svc${r}-${k}/items/[0-9]+(/[a-z]+)?"}}]`, `      backendRefs: [{name: go.mesh.srv.s${r}-${k}}]`);
    }
    docs.push(lines.join('\n') + '\n');
  }
  return docs.join('---\n');
}

/** The last rule's path (a hit) and a path no rule matches (a miss, under a prefix many rules share). */
function paths(rules: number): { hit: string; miss: string } {
  const last = rules - 1;
  return { hit: `/svc${Math.floor(last / PER_ROUTE)}-${last % PER_ROUTE}/items/42/x`, miss: `/svc${Math.floor(last / PER_ROUTE)}-${last % PER_ROUTE}/other/42` };
}

function req(path: string): RouteRequest {
  return { method: 'GET', host: 'example.com', path, query: undefined, headers: {} };
}

function heapMiB(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed / 1048576;
}

interface Table {
  rules: number;
  parseMs: number;
  compileMs: number;
  heapMiB: number;
  hitUs: number;
  missUs: number;
}

/** A file of `rules` regex rules parsed and compiled: its times, heap, and the match of its hit and miss paths. */
function build(rules: number): { table: CompiledRoutes; m: Table; hit: RouteRequest; miss: RouteRequest } {
  const text = regexRouteFile(rules);
  const heap0 = heapMiB();
  let t = performance.now();
  const file = parseRouteFile(text, 'bench.yaml');
  const parseMs = performance.now() - t;
  t = performance.now();
  const table = new CompiledRoutes(file);
  const compileMs = performance.now() - t;
  const heap = heapMiB() - heap0;
  const { hit, miss } = paths(rules);
  const last = `go.mesh.srv.s${Math.floor((rules - 1) / PER_ROUTE)}-${(rules - 1) % PER_ROUTE}`;
  if (table.match(req(hit))?.backend?.name !== last) throw new Error(`${hit} does not reach the last rule`);
  if (table.match(req(miss)) !== undefined) throw new Error(`${miss} matches`);
  return { table, hit: req(hit), miss: req(miss), m: { rules, parseMs: round(parseMs), compileMs: round(compileMs), heapMiB: round(heap), hitUs: Infinity, missUs: Infinity } };
}

/** CPU µs of one match: the mean of 2,000. */
function cpuPerMatch(table: CompiledRoutes, r: RouteRequest): number {
  const n = 2000;
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) table.match(r);
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}

/** Both tables, their hit and miss measured in alternation (A/B in the same rounds): best of 7 rounds each. */
function measure(smallRules: number, largeRules: number): { small: Table; large: Table } {
  const small = build(smallRules);
  const large = build(largeRules);
  for (let round = 0; round < 8; round++) {
    for (const t of round % 2 === 0 ? [small, large] : [large, small]) {
      const hit = cpuPerMatch(t.table, t.hit);
      const miss = cpuPerMatch(t.table, t.miss);
      if (round === 0) continue; // warm-up
      t.m.hitUs = Math.min(t.m.hitUs, hit);
      t.m.missUs = Math.min(t.m.missUs, miss);
    }
  }
  for (const t of [small, large]) {
    t.m.hitUs = round(t.m.hitUs, 2);
    t.m.missUs = round(t.m.missUs, 2);
  }
  return { small: small.m, large: large.m };
}

function round(n: number, digits = 1): number {
  return Number(n.toFixed(digits));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { small, large } = measure(10, Number(process.argv[2] ?? 10_000));
  console.log(JSON.stringify({ small, large, ratio: { hit: round(large.hitUs / small.hitUs, 2), miss: round(large.missUs / small.missUs, 2) } }));
}
