/**
 * Summarises a V8 .cpuprofile (node --cpu-prof): self time per function and per file, with
 * positions in dist/ mapped back to src/ through the build's source maps.
 */
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { fileURLToPath } from 'node:url';
import { relative } from 'node:path';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

export interface ProfileEntry {
  name: string;
  where: string;
  selfMs: number;
  share: number;
}

export interface ProfileSummary {
  totalMs: number;
  idleMs: number;
  gcMs: number;
  functions: ProfileEntry[];
  files: ProfileEntry[];
  /** Inclusive time of the mesh code (src/) functions, top ones. */
  inclusive: ProfileEntry[];
}

const maps = new Map<string, SourceMap | null>();

function sourceMapFor(file: string): SourceMap | null {
  if (!maps.has(file)) {
    let sm: SourceMap | null = null;
    const mapFile = `${file}.map`;
    if (existsSync(mapFile)) {
      try {
        sm = new SourceMap(JSON.parse(readFileSync(mapFile, 'utf8')));
      } catch {
        sm = null;
      }
    }
    maps.set(file, sm);
  }
  return maps.get(file)!;
}

/** "src/edge/handlers/rpc.ts:42" for mesh code, "node:internal/… " or a package name otherwise. */
export function locate(frame: CallFrame, root: string): string {
  const url = frame.url;
  if (!url) return '(native)';
  if (url.startsWith('node:')) return `${url}:${frame.lineNumber + 1}`;
  let file = url;
  if (url.startsWith('file://')) file = fileURLToPath(url);
  const nm = file.lastIndexOf('/node_modules/');
  if (nm !== -1) {
    const rest = file.slice(nm + 14).split('/');
    const pkg = rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
    return `${pkg} (${rest.slice(pkg.includes('/') ? 2 : 1).join('/')}:${frame.lineNumber + 1})`;
  }
  const sm = sourceMapFor(file);
  if (sm) {
    const entry = sm.findEntry(frame.lineNumber, frame.columnNumber) as { originalSource?: string; originalLine?: number };
    if (entry && entry.originalSource) {
      let src = entry.originalSource;
      if (src.startsWith('file://')) src = fileURLToPath(src);
      else src = new URL(src, `file://${file}`).pathname;
      return `${relative(root, src)}:${(entry.originalLine ?? 0) + 1}`;
    }
  }
  return `${relative(root, file)}:${frame.lineNumber + 1}`;
}

/** The file (or package) part of a location. */
function fileOf(where: string): string {
  const pkg = where.indexOf(' (');
  if (pkg !== -1) return where.slice(0, pkg);
  return where.replace(/:\d+$/, '');
}

export function summarizeProfile(path: string, root: string, top = 20): ProfileSummary {
  const profile = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i]!;
    const dt = (profile.timeDeltas[i + 1] ?? profile.timeDeltas[i] ?? 0) / 1000;
    self.set(id, (self.get(id) ?? 0) + dt);
  }
  let totalMs = 0;
  let idleMs = 0;
  let gcMs = 0;
  const fnSelf = new Map<string, { name: string; where: string; ms: number }>();
  const fileSelf = new Map<string, number>();
  const incl = new Map<string, { name: string; where: string; ms: number }>();
  for (const [id, ms] of self) {
    const node = byId.get(id)!;
    const name = node.callFrame.functionName || '(anonymous)';
    totalMs += ms;
    if (name === '(idle)') {
      idleMs += ms;
      continue;
    }
    if (name === '(garbage collector)') gcMs += ms;
    const where = locate(node.callFrame, root);
    const key = `${name}@${where}`;
    const e = fnSelf.get(key) ?? { name, where, ms: 0 };
    e.ms += ms;
    fnSelf.set(key, e);
    const fileKey = fileOf(where);
    fileSelf.set(fileKey, (fileSelf.get(fileKey) ?? 0) + ms);
    // Inclusive time for mesh source frames: walk up once per distinct frame.
    const seen = new Set<string>();
    let cur: number | undefined = id;
    while (cur !== undefined) {
      const n = byId.get(cur)!;
      const w = locate(n.callFrame, root);
      if (w.startsWith('src/') || w.startsWith('examples/')) {
        const k = `${n.callFrame.functionName || '(anonymous)'}@${w}`;
        if (!seen.has(k)) {
          seen.add(k);
          const ie = incl.get(k) ?? { name: n.callFrame.functionName || '(anonymous)', where: w, ms: 0 };
          ie.ms += ms;
          incl.set(k, ie);
        }
      }
      cur = parent.get(cur);
    }
  }
  const busy = totalMs - idleMs;
  const entries = (list: Iterable<{ name: string; where: string; ms: number }>) =>
    [...list]
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top)
      .map((e) => ({ name: e.name, where: e.where, selfMs: e.ms, share: busy > 0 ? e.ms / busy : 0 }));
  return {
    totalMs,
    idleMs,
    gcMs,
    functions: entries(fnSelf.values()),
    files: entries([...fileSelf].map(([where, ms]) => ({ name: where, where, ms }))),
    inclusive: entries(incl.values()),
  };
}
