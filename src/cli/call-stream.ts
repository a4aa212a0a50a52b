/**
 * `mesh call --stream=server|client|bidi`: one streaming call (docs/cli.md "Streaming calls").
 * Answers are printed as they arrive, one compact JSON line each; client and bidi requests are
 * read from stdin, one JSON message a non-empty line, and stdin's end ends the client's side.
 * SIGINT cancels the stream (the server is told) and exits 130.
 */
import type { StreamKind } from '../core/transport/frames.js';
import type { Operations } from './operations.js';
import { FlagError } from './flags.js';
import { parseJson, stringifyJson } from '../base/codec/json.js';
import { printable } from '../base/util/text.js';

/** Exit code of a stream cancelled by Ctrl-C (128 + SIGINT). */
export const INTERRUPTED_EXIT = 130;

export interface StreamCallArgs {
  service: string;
  endpoint: string;
  kind: StreamKind;
  /** A server stream's one request (JSON text, already checked). */
  requestJson: string;
  /** The stream's deadline in ms; undefined or 0: none. */
  timeoutMs?: number;
  /** The requests of client and bidi streams. */
  input: AsyncIterable<Buffer | string>;
  /** Longest stdin line accepted (--max_body_size): memory stays bounded. */
  maxLineBytes: number;
  out: (text: string) => void;
  /** Resolves when the output can take more: the next answer is read only then, so a slow reader slows the stream instead of filling memory. */
  drain?: () => Promise<void>;
}

/** One answer as one line: compact JSON, or the text with control characters escaped when it is not JSON. */
export function answerLine(payload: Buffer): string {
  const text = payload.toString('utf8');
  try {
    return stringifyJson(parseJson(text)) + '\n';
  } catch {
    return printable(text) + '\n';
  }
}

/** Runs the stream to its end; resolves with the exit code, rejects with its MeshError or a FlagError (a bad stdin line). */
export async function runStreamCall(ops: Operations, args: StreamCallArgs): Promise<number> {
  const abort = new AbortController();
  let interrupted = false;
  const onSigint = () => {
    interrupted = true;
    abort.abort();
  };
  process.once('SIGINT', onSigint);
  let inputError: FlagError | undefined;
  try {
    const call = await ops.stream(args.service, args.endpoint, {
      kind: args.kind,
      contentType: 'application/json',
      request: args.kind === 'server' ? Buffer.from(args.requestJson) : undefined,
      timeoutMs: args.timeoutMs,
      signal: abort.signal,
    });
    if (args.kind !== 'server') {
      sendLines(call, args.input, args.maxLineBytes).catch((err: unknown) => {
        // A bad line gives the stream up; any other failure of send is the stream's own, which the
        // iteration below reports.
        if (err instanceof FlagError) {
          inputError = err;
          call.cancel(err.message);
        }
      });
    }
    for await (const message of call) {
      args.out(answerLine(message));
      await args.drain?.();
    }
    if (inputError) throw inputError;
    return 0;
  } catch (err) {
    if (interrupted) return INTERRUPTED_EXIT;
    if (inputError) throw inputError;
    throw err;
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}

/** Sends each non-empty line of `input` as one message, then ends the client's side. */
async function sendLines(call: { send(p: Uint8Array): Promise<void>; end(): void }, input: AsyncIterable<Buffer | string>, maxLineBytes: number): Promise<void> {
  for await (const { n, line } of readLines(input, maxLineBytes)) {
    const text = line.trim();
    if (!text) continue;
    try {
      parseJson(text);
    } catch (err) {
      throw new FlagError(`call --stream: line ${n} of stdin is not valid JSON: ${(err as Error).message}`);
    }
    await call.send(Buffer.from(text));
  }
  call.end();
}

/** The lines of `input` (split on \n; the last one may lack it), numbered from 1; a line over `maxBytes` is an error. */
export async function* readLines(input: AsyncIterable<Buffer | string>, maxBytes: number): AsyncGenerator<{ n: number; line: string }> {
  let pending: Buffer[] = [];
  let size = 0;
  let n = 0;
  const tooLong = () => new FlagError(`call --stream: line ${n + 1} of stdin is longer than ${maxBytes} bytes (--max_body_size)`);
  for await (const chunk of input) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    let start = 0;
    for (let nl = buf.indexOf(10); nl !== -1; nl = buf.indexOf(10, start)) {
      size += nl - start;
      if (size > maxBytes) throw tooLong();
      pending.push(buf.subarray(start, nl));
      const line = Buffer.concat(pending).toString('utf8');
      pending = [];
      size = 0;
      start = nl + 1;
      yield { n: ++n, line };
    }
    if (start < buf.length) {
      size += buf.length - start;
      if (size > maxBytes) throw tooLong();
      pending.push(Buffer.from(buf.subarray(start)));
    }
  }
  if (size > 0) yield { n: ++n, line: Buffer.concat(pending).toString('utf8') };
}
