/**
 * The primary's side of the --concurrency rate limit buckets (src/cli/rate-limit-ipc.ts) in process:
 * an ask from a worker whose channel is already closed gets no answer, and no 'error' on the worker
 * (which, with nobody listening, would be an uncaught exception of the primary). The worker is a
 * stand-in that behaves as node's does: a send on a closed channel without a callback emits 'error'.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import cluster, { type Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { servePrimaryBuckets } from '../../src/cli/rate-limit-ipc.js';

class ClosedWorker extends EventEmitter {
  sent: unknown[] = [];
  isConnected(): boolean {
    return false;
  }
  send(message: unknown, _handle?: unknown, callback?: (err: Error | null) => void): boolean {
    this.sent.push(message);
    const err = new Error('Channel closed');
    if (typeof callback === 'function') process.nextTick(callback, err);
    else process.nextTick(() => this.emit('error', err));
    return false;
  }
}

describe('the primary answering the rate limit asks of its workers', () => {
  it('a worker whose channel is closed: no answer sent, no error raised', async () => {
    const stop = servePrimaryBuckets(100);
    const errors: Error[] = [];
    const worker = new ClosedWorker();
    // An 'error' nobody listens to throws; count it here instead, as the assertion.
    const emit = worker.emit.bind(worker);
    worker.emit = (event: string | symbol, ...args: unknown[]) => (event === 'error' && worker.listenerCount('error') === 0 ? (errors.push(args[0] as Error), true) : emit(event, ...args));
    try {
      cluster.emit('message', worker as unknown as Worker, { mesh: 'rl-grant', id: 1, key: 'k', policy: { name: 'default', ratePerSec: 1, burst: 1 }, want: 1 });
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(errors.map((e) => e.message), []);
      assert.deepEqual(worker.sent, []);
    } finally {
      stop();
    }
  });
});
