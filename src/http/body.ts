/** Reading request bodies with a size limit (413 beyond it) and a deadline. */
import type { IncomingMessage } from 'node:http';
import { MeshError } from '../errors.js';

export const DEFAULT_MAX_BODY = 4 * 1024 * 1024;

export function readBody(req: IncomingMessage, limit: number, errorId: string): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    req.resume();
    return Promise.reject(new MeshError(errorId, 413, `request body larger than ${limit} bytes`));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (err?: Error) => {
      if (done) return;
      done = true;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      if (err) reject(err);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.resume();
        finish(new MeshError(errorId, 413, `request body larger than ${limit} bytes`));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish();
    const onError = (err: Error) => finish(new MeshError(errorId, 400, `reading request body: ${err.message}`));
    const onAborted = () => finish(new MeshError(errorId, 400, 'request aborted'));
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}
