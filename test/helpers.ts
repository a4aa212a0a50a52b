/** Shared helpers for tests: temp dirs, free ports, real child processes, engine skips. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connect, createServer } from 'node:net';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

export const ROOT = resolve(import.meta.dirname, '..');
/** The built CLI (npm test builds first). */
export const CLI = join(ROOT, 'dist/src/cli/main.js');

export function tempDir(prefix = 'mesh-test-'): { path: string; cleanup: () => void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

/**
 * A port that was free a moment ago. Racy (another process can take it before the caller listens):
 * only for a port nothing must listen on (a refused connection), or one a test must know before it
 * starts a server that cannot report its own (an engine binary, a restart on the same port).
 * Servers the tests start listen on port 0 and report theirs (waitForPort).
 */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls until fn returns a truthy value or the time runs out. */
export async function waitFor<T>(fn: () => T | Promise<T>, timeoutMs = 5000, stepMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`waitFor timed out${last ? `: ${String(last)}` : ''}`);
    await sleep(stepMs);
  }
}

/**
 * Waits until a count stops moving: resolves with its value once `polls` polls in a row, `stepMs`
 * apart, saw the same value and `ready` held (default: always). For backpressure tests: a
 * producer that is held back stops, one that is not runs to its end; stopping early can only
 * make the count smaller, so a bound on it cannot pass by timing.
 */
export async function waitForStill(read: () => number, opts: { stepMs?: number; polls?: number; timeoutMs?: number; ready?: (value: number) => boolean } = {}): Promise<number> {
  const { stepMs = 100, polls = 2, timeoutMs = 20000, ready = () => true } = opts;
  let last = NaN;
  let still = 0;
  await waitFor(
    () => {
      const now = read();
      still = now === last && ready(now) ? still + 1 : 0;
      last = now;
      return still >= polls;
    },
    timeoutMs,
    stepMs,
  );
  return last;
}

export interface RunningProcess {
  child: ChildProcess;
  output: () => string;
  /** Resolves when a line matching re appears in stdout or stderr. */
  waitForOutput: (re: RegExp, timeoutMs?: number) => Promise<string>;
  /**
   * Resolves with the port in the first capture group of re once a line matches: the port a
   * process started with `--address=127.0.0.1:0` printed (e.g. /mesh api listening on \S+:(\d+)/).
   */
  waitForPort: (re: RegExp, timeoutMs?: number) => Promise<number>;
  stop: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/** Starts `node dist/src/cli/main.js ...args` (or another script; '' for node's own args) as a real process, in `cwd` (default the current directory). */
export function startProcess(args: string[], env: Record<string, string> = {}, script = CLI, cwd?: string): RunningProcess {
  const child = spawn(process.execPath, script ? [script, ...args] : args, {
    env: { ...process.env, ...env },
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = once(child, 'exit').then(([code]) => code as number | null);
  const waitForMatch = (re: RegExp, timeoutMs = 10000) =>
    waitFor(() => {
      if (child.exitCode !== null) throw new Error(`process exited (${child.exitCode}):\n${out}`);
      return re.exec(out) ?? undefined;
    }, timeoutMs).catch((err: Error) => {
      throw new Error(`${err.message}\n--- output ---\n${out}`);
    });
  return {
    child,
    output: () => out,
    waitForOutput: async (re, timeoutMs) => (await waitForMatch(re, timeoutMs))[0],
    waitForPort: async (re, timeoutMs) => {
      const port = Number((await waitForMatch(re, timeoutMs))[1]);
      if (!Number.isInteger(port) || port <= 0) throw new Error(`no port in the first group of ${re}:\n${out}`);
      return port;
    },
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 10000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** What `mesh api`, `mesh sidecar` and `mesh proxy` print once bound (the port is group 1). */
export const PRINTED = {
  api: /mesh api listening on https?:\/\/\S+:(\d+) /,
  apiAdmin: /mesh api admin on http:\/\/\S+:(\d+)/,
  sidecar: /mesh sidecar listening on https?:\/\/\S+:(\d+) /,
  sidecarAdmin: /^admin listening on http:\/\/\S+:(\d+)/m,
  /** The first listener of `mesh proxy`. */
  proxy: /mesh proxy listener \S+ on https?:\/\/\S+:(\d+) /,
  proxyAdmin: /mesh proxy admin on http:\/\/\S+:(\d+)/,
};

/**
 * Runs the CLI to completion and returns its exit code and output. `io.input` is written to its
 * stdin (which is then closed; without it stdin is /dev/null); `io.onStdout` sees the output so far
 * after each chunk, with the child (to signal it once some output has come).
 */
export async function runCli(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 20000,
  io: { input?: string; onStdout?: (out: string, child: ChildProcess) => void } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: [io.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
    io.onStdout?.(stdout, child);
  });
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  if (io.input !== undefined) child.stdin!.end(io.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const [code] = await once(child, 'exit');
  clearTimeout(timer);
  return { code: code as number | null, stdout, stderr };
}

/**
 * Returns the value of an engine's environment variable, or undefined with a loud reason so the
 * caller can skip. With MESH_TEST_REQUIRE_ENGINES=1 (CI) a missing engine is a failure instead.
 */
export function engine(envVar: string, what: string): string | undefined {
  const value = process.env[envVar];
  if (value) return value;
  const reason = `${what} not available: set ${envVar} (CI's .ci/run starts it)`;
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
  console.warn(`SKIP: ${reason}`);
  return undefined;
}

/**
 * A program the test runs: the path in `envVar` (CI's .ci/run exports it), else `name` on PATH;
 * undefined with a loud reason when absent, so the caller can skip (with
 * MESH_TEST_REQUIRE_ENGINES=1, a failure instead). `install` says how to get it.
 */
export function binary(envVar: string, name: string, install: string): string | undefined {
  const fromEnv = process.env[envVar];
  if (fromEnv) return fromEnv;
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim();
  if (found) return found;
  const reason = `${name} not available: set ${envVar} or ${install}`;
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
  console.warn(`SKIP: ${reason}`);
  return undefined;
}

/** Every byte of a request (or any readable stream of Buffers). */
export function readBytes(stream: NodeJS.ReadableStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve(Buffer.concat(chunks)));
    stream.on('error', reject);
  });
}

/** Listens on a free loopback port; close() drops open connections and stops the server. */
export async function listenLoopback(server: import('node:http').Server): Promise<{ port: number; close(): Promise<void> }> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as import('node:net').AddressInfo).port,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

export interface HttpAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  /** The header lines as they came: names in their case, repeated ones apart. */
  rawHeaders: string[];
  text: string;
  /** The body's bytes (text is their UTF-8 reading). */
  bytes: Buffer;
  json<T = any>(): T;
}

export interface HttpOptions {
  headers?: Record<string, string>;
  body?: string | Buffer | Uint8Array;
  /** https: the CA to trust. */
  ca?: string | Buffer;
  /** https: the SNI name to send. */
  servername?: string;
  /** https: accept any certificate (a test that looks at what the server sends, not at trust). */
  insecure?: boolean;
  timeoutMs?: number;
}

/**
 * The tests' HTTP client: one request on a fresh connection (no pool, so Host and the other
 * headers go exactly as given), the whole answer read. https URLs trust `ca` when given.
 * For bytes no client would write, use rawHttp; to read an answer as it streams, node:http itself.
 */
export function http(method: string, url: string, options: HttpOptions = {}): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const send = url.startsWith('https:') ? httpsRequest : httpRequest;
    const headers = { ...options.headers };
    const framed = Object.keys(headers).some((k) => /^(content-length|transfer-encoding)$/i.test(k));
    // A body goes with its Content-Length (node would send a DELETE's body unframed).
    if (options.body !== undefined && !framed) headers['content-length'] = String(Buffer.byteLength(options.body));
    let answered = false;
    let failure: Error | undefined;
    const tls = {
      ...(options.ca ? { ca: options.ca } : {}),
      ...(options.servername !== undefined ? { servername: options.servername } : {}),
      ...(options.insecure ? { rejectUnauthorized: false } : {}),
    };
    const req = send(url, { method, headers, agent: false, ...tls }, (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const bytes = Buffer.concat(chunks);
        const text = bytes.toString('utf8');
        resolve({ status: res.statusCode ?? 0, headers: res.headers, rawHeaders: res.rawHeaders, text, bytes, json: () => JSON.parse(text) });
      });
      res.on('error', reject);
    });
    req.setTimeout(options.timeoutMs ?? 20_000, () => req.destroy(new Error(`no answer from ${method} ${url} within ${options.timeoutMs ?? 20_000} ms`)));
    // A server may answer (413) and close while the body is still being written: the write fails
    // (EPIPE) but the answer is read all the same. Only a close without an answer is a failure.
    req.on('error', (err) => (failure = err));
    // ...and a late EPIPE on the socket after the answer is no one's error.
    req.on('socket', (socket) => socket.on('error', () => undefined));
    req.on('close', () => answered || reject(failure ?? new Error(`${method} ${url}: closed without an answer`)));
    req.end(options.body);
  });
}

/**
 * Sends raw bytes to 127.0.0.1:port and resolves with everything the server wrote until it closed
 * the connection (send `Connection: close`): `raw` as latin1 text, byte for byte, and the answer
 * parsed. For requests no client library would write (no Host, HTTP/1.0, a foreign Host on an
 * upgrade, header bytes 0x80-0xff).
 */
export async function rawHttp(
  port: number,
  request: string | Buffer,
  timeoutMs = 10_000,
): Promise<{ raw: string; head: string; status: number; headers: Record<string, string>; body: string }> {
  const bytes = await new Promise<Buffer>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => resolve(Buffer.concat(chunks)));
    socket.on('error', reject);
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no close within ${timeoutMs} ms`)));
  });
  const raw = bytes.toString('latin1');
  const text = bytes.toString('utf8');
  const split = text.indexOf('\r\n\r\n');
  const head = split === -1 ? text : text.slice(0, split);
  const [statusLine, ...lines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const i = line.indexOf(':');
    headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return { raw, head, status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0), headers, body: split === -1 ? '' : text.slice(split + 4) };
}

/** One import circle among `edges` as its files (the first file again at the end), or undefined when there is none. */
export function findCycle(edges: Array<{ from: string; to: string }>): string[] | undefined {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const done = new Set<string>();
  const path: string[] = [];
  const onPath = new Set<string>();
  const visit = (file: string): string[] | undefined => {
    if (onPath.has(file)) return [...path.slice(path.indexOf(file)), file];
    if (done.has(file)) return undefined;
    path.push(file);
    onPath.add(file);
    for (const to of next.get(file) ?? []) {
      const cycle = visit(to);
      if (cycle) return cycle;
    }
    path.pop();
    onPath.delete(file);
    done.add(file);
    return undefined;
  };
  for (const file of [...next.keys()].sort()) {
    const cycle = visit(file);
    if (cycle) return cycle;
  }
  return undefined;
}

/** `mesh ... --help` as one line per flag: a flag's help wrapped at 100 columns goes on under its start (35 spaces). */
export function unwrapHelp(text: string): string {
  return text.replace(/\n {35}(?=\S)/g, ' ');
}
