/**
 * The gRPC schema of a process: the services, methods and message types of the `.proto` files
 * given by --proto_path (and --proto_files), loaded once at start with protobufjs. A file that
 * does not parse stops the start with `file:line: what`.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import type protobuf from 'protobufjs';
import { protobufjs } from '../../../base/util/lazy-packages.js';
import type { StreamKind } from '../frames.js';
import { SchemaOptionError } from '../../../base/util/option-error.js';

/** One RPC of a loaded service. */
export interface GrpcMethod {
  /** `pkg.Service` */
  readonly service: string;
  readonly name: string;
  /** `/pkg.Service/Method`, the HTTP/2 path of the call. */
  readonly path: string;
  readonly requestType: protobuf.Type;
  readonly responseType: protobuf.Type;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
}

/** What a method is: unary, or the kind of stream its `stream` keywords make it. */
export function streamKindOf(m: GrpcMethod): 'unary' | StreamKind {
  if (m.requestStream) return m.responseStream ? 'bidi' : 'client';
  return m.responseStream ? 'server' : 'unary';
}

/** Files loaded at most (a --proto_path that points at a whole disk is a mistake, not a schema). */
const MAX_FILES = 10_000;

/** A .proto file or directory that does not load; by the option's schema key when an option names it (else 'proto_files'). */
export class ProtoLoadError extends SchemaOptionError {
  constructor(reason: string, key = 'proto_files') {
    super(key, reason);
    this.name = 'ProtoLoadError';
  }
}

/** The methods of a set of loaded services, by full and by short service name. */
export class GrpcSchema {
  private readonly byFull = new Map<string, Map<string, GrpcMethod>>();
  private readonly byShort = new Map<string, string[]>();

  constructor(readonly root: protobuf.Root | undefined) {
    if (root) this.collect(root);
  }

  /** The full names of the services, sorted. */
  get services(): string[] {
    return [...this.byFull.keys()].sort();
  }

  private collect(ns: protobuf.NamespaceBase): void {
    const { Namespace, Service } = protobufjs();
    for (const obj of ns.nestedArray) {
      if (obj instanceof Service) {
        const full = obj.fullName.replace(/^\./, '');
        const methods = new Map<string, GrpcMethod>();
        for (const m of obj.methodsArray) {
          m.resolve();
          methods.set(m.name, {
            service: full,
            name: m.name,
            path: `/${full}/${m.name}`,
            requestType: m.resolvedRequestType!,
            responseType: m.resolvedResponseType!,
            requestStream: m.requestStream === true,
            responseStream: m.responseStream === true,
          });
        }
        this.byFull.set(full, methods);
        const short = obj.name;
        const list = this.byShort.get(short) ?? [];
        list.push(full);
        this.byShort.set(short, list);
      }
      if (obj instanceof Namespace) this.collect(obj);
    }
  }

  /** True when a loaded service has this full or short name. */
  hasService(name: string): boolean {
    return this.byFull.has(name) || this.byShort.has(name);
  }

  /**
   * The method of a mesh endpoint `Service.Method`, where `Service` is a service's full name
   * (`helloworld.Greeter`) or its short name (`Greeter`) when one loaded service has it.
   * `{ error }` says why there is none.
   */
  lookup(endpoint: string): { method: GrpcMethod } | { error: string } {
    const dot = endpoint.lastIndexOf('.');
    if (dot <= 0 || dot === endpoint.length - 1) return { error: `endpoint ${JSON.stringify(endpoint)}: use Service.Method` };
    const service = endpoint.slice(0, dot);
    const name = endpoint.slice(dot + 1);
    let full = this.byFull.has(service) ? service : undefined;
    if (!full) {
      const candidates = this.byShort.get(service) ?? [];
      if (candidates.length > 1) return { error: `service ${service} is ambiguous: name one of ${candidates.sort().join(', ')}` };
      full = candidates[0];
    }
    if (!full) return { error: `no gRPC service ${service}` };
    const method = this.byFull.get(full)!.get(name);
    if (!method) return { error: `gRPC service ${full} has no method ${name}` };
    return { method };
  }
}

export interface ProtoSource {
  /** Directories searched for the files and their imports, in order. */
  paths: readonly string[];
  /** Files to load, relative to a path directory or absolute; none: every `.proto` under the paths. */
  files?: readonly string[];
}

/** Loads the protos; throws ProtoLoadError (`file:line: message` when the parser says where). */
export function loadProtos(source: ProtoSource): GrpcSchema {
  const dirs = source.paths.map((p) => resolve(p));
  for (const d of dirs) {
    let ok = false;
    try {
      ok = statSync(d).isDirectory();
    } catch {
      // reported below
    }
    if (!ok) throw new ProtoLoadError(`{proto_path} ${d}: not a directory`, 'proto_path');
  }
  const find = (name: string): string | undefined => {
    if (isAbsolute(name)) return existsSync(name) ? name : undefined;
    for (const d of dirs) {
      const p = join(d, name);
      if (existsSync(p)) return p;
    }
    return undefined;
  };
  let files: string[];
  if (source.files && source.files.length > 0) {
    files = source.files.map((f) => {
      const p = find(f);
      if (!p) throw new ProtoLoadError(`{proto_files} ${f}: not found in ${dirs.join(', ')}`);
      return p;
    });
  } else {
    const seen = new Set<string>();
    files = [];
    for (const d of dirs) {
      for (const rel of readdirSync(d, { recursive: true, encoding: 'utf8' }).sort()) {
        if (!rel.endsWith('.proto')) continue;
        const key = rel.split(sep).join('/');
        if (seen.has(key)) continue; // the first directory that has a file wins, as with protoc -I
        seen.add(key);
        files.push(join(d, rel));
        if (files.length > MAX_FILES) throw new ProtoLoadError(`{proto_path}: more than ${MAX_FILES} .proto files under ${dirs.join(', ')}`, 'proto_path');
      }
    }
    if (files.length === 0) throw new ProtoLoadError(`{proto_path}: no .proto file under ${dirs.join(', ')}`, 'proto_path');
  }

  const root = new (protobufjs().Root)();
  const read = new Set<string>(files);
  root.resolvePath = (origin, target) => {
    const found = find(target) ?? (origin ? protobufjs().util.path.resolve(origin, target) : target);
    read.add(found);
    return found;
  };
  try {
    root.loadSync(files, { keepCase: true });
    root.resolveAll();
  } catch (err) {
    throw new ProtoLoadError(describe(err as Error, [...read], dirs));
  }
  return new GrpcSchema(root);
}

/** A parser error as `file:line: message`; the file found by parsing each file alone when the message does not name it. */
function describe(err: Error, files: string[], dirs: string[]): string {
  const show = (file: string) => {
    for (const d of dirs) {
      const r = relative(d, file);
      if (!r.startsWith('..') && !isAbsolute(r)) return r;
    }
    return file;
  };
  const msg = err.message;
  let m = /^(.*) \((.+), line (\d+)\)$/.exec(msg);
  if (m) return `${show(m[2]!)}:${m[3]}: ${m[1]}`;
  m = /^(.*) \(line (\d+)\)$/.exec(msg);
  if (m) {
    for (const file of files) {
      let source: string;
      try {
        source = readFileSync(file, 'utf8');
      } catch {
        continue;
      }
      try {
        protobufjs().parse(source, new (protobufjs().Root)(), { keepCase: true });
      } catch (e) {
        const again = /^(.*) \((?:.+, )?line (\d+)\)$/.exec((e as Error).message);
        if (again) return `${show(file)}:${again[2]}: ${again[1]}`;
      }
    }
    return `${m[1]} (line ${m[2]})`;
  }
  const enoent = /ENOENT[^']*'([^']+)'/.exec(msg);
  if (enoent) return `${show(enoent[1]!)}: not found (an import that is in no --proto_path directory?)`;
  return `.proto files: ${msg}`;
}
