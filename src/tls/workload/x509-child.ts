/**
 * The X.509 work of a workload (its CSR, a certificate signed by the local mesh CA, a CA made on
 * first use) done in a short-lived child process: node's own binary running
 * ./x509-child-main.ts, a JSON request on its stdin, a JSON answer on its stdout. The library
 * that does that work (src/tls/workload/x509.ts) stays out of this process's heap for good: a
 * sidecar that imported it once, even in a worker thread, would keep most of its memory.
 * An error in the child comes back with its message (and a CaError stays one).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { CaError } from './ca.js';

/** What the child does. */
export type X509ChildRequest =
  /** A CSR (PEM) for the key of `keyPem` (PKCS#8), subject CN `commonName`. */
  | { op: 'csr'; keyPem: string; commonName: string }
  /**
   * A certificate chain (PEM) from the mesh CA in `dir` for `service`: for the CSR `csrPem`, or
   * for the key of `keyPem` (the child makes the CSR).
   */
  | { op: 'sign'; dir: string; trustDomain: string; altNames?: readonly string[]; service: string; ttlMs: number; csrPem?: string; keyPem?: string }
  /** A new mesh CA in `dir` (answers ''). */
  | { op: 'init'; dir: string; trustDomain: string };

/** The child's answer on its stdout: the result, or the error it met. */
export type X509ChildAnswer = { ok: string } | { error: string; name?: string };

/** How long the child may take (node's start, the library's load, the work). */
export const X509_CHILD_TIMEOUT_MS = 30_000;
/** The most the child may print on stdout (a chain is a few KiB) or stderr. */
const MAX_OUTPUT_BYTES = 1 << 20;

/**
 * How to start the child: the compiled module next to this one (dist/), or, when this module
 * runs from src/ under tsx (the tests), the TypeScript module with tsx's loader. None of this
 * process's node flags (heap sizes, loader hooks) are passed on.
 */
export function x509ChildArgs(): string[] {
  const url = import.meta.url;
  const compiled = fileURLToPath(new URL('./x509-child-main.js', url));
  if (url.endsWith('.js') && existsSync(compiled)) return [compiled];
  return ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL('./x509-child-main.ts', url))];
}

/** Runs one request in a child process; rejects with the child's error, or with what went wrong with the child. */
export function runX509Child(request: X509ChildRequest, o: { timeoutMs?: number } = {}): Promise<string> {
  const timeoutMs = o.timeoutMs ?? X509_CHILD_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, x509ChildArgs(), { stdio: ['pipe', 'pipe', 'pipe'], windowsHide: true });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let errBytes = 0;
    let failure: Error | undefined;
    const fail = (e: Error) => {
      failure ??= e;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => fail(new Error(`the X.509 child process did not answer within ${timeoutMs} ms`)), timeoutMs);
    child.stdout.on('data', (chunk: Buffer) => {
      outBytes += chunk.length;
      if (outBytes > MAX_OUTPUT_BYTES) return fail(new Error(`the X.509 child process printed more than ${MAX_OUTPUT_BYTES} bytes`));
      out.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (errBytes < MAX_OUTPUT_BYTES) err.push(chunk);
      errBytes += chunk.length;
    });
    child.stdin.on('error', () => {}); // The child's exit says what went wrong.
    child.on('error', (e) => fail(new Error(`cannot start the X.509 child process (${process.execPath}): ${e.message}`)));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (failure) return reject(failure);
      let answer: X509ChildAnswer | undefined;
      try {
        answer = JSON.parse(Buffer.concat(out).toString('utf8')) as X509ChildAnswer;
      } catch {
        answer = undefined;
      }
      if (answer && 'ok' in answer && typeof answer.ok === 'string') return resolve(answer.ok);
      if (answer && 'error' in answer && typeof answer.error === 'string') return reject(answer.name === 'CaError' ? new CaError(answer.error) : new Error(answer.error));
      const stderr = Buffer.concat(err).toString('utf8').trim().split('\n').slice(-5).join(' | ');
      reject(new Error(`the X.509 child process ended (${signal ?? `exit code ${code}`}) without an answer${stderr ? `: ${stderr}` : ''}`));
    });
    child.stdin.end(JSON.stringify(request));
  });
}
