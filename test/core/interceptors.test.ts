/** Call interceptors: composition order, and the retry interceptor's decisions (src/core/client/interceptors/). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compose, type CallInterceptor, type Send } from '../../src/core/client/interceptors/compose.js';
import { retry, type RetryDecision } from '../../src/core/client/interceptors/retry.js';

type Log = string[];

test('compose: the first interceptor is outermost, and the chain is built once', () => {
  let built = 0;
  const tag =
    (name: string): CallInterceptor<Log, number, string> =>
    (next) => {
      built++;
      return async (log, n) => {
        log.push(`${name}>`);
        const r = await next(log, n);
        log.push(`<${name}`);
        return r;
      };
    };
  const send = compose<Log, number, string>(async (log, n) => (log.push(`send ${n}`), 'ok'), [tag('a'), tag('b')]);
  assert.equal(built, 2);
  const log: Log = [];
  return send(log, 7).then((r) => {
    assert.equal(r, 'ok');
    assert.deepEqual(log, ['a>', 'b>', 'send 7', '<b', '<a']);
    assert.equal(built, 2);
  });
});

/** A retry chain over scripted results: each try takes the next one. */
function scripted(results: string[], decide: (r: string) => RetryDecision, retries: number) {
  const tries: number[] = [];
  const terminal: Send<unknown, number, string> = async (_call, attempt) => {
    tries.push(attempt);
    return results[tries.length - 1]!;
  };
  const send = compose(terminal, [retry<unknown, number, string>({ retries: () => retries, attempt: (_c, n) => n * 10, decide, exhausted: () => 'none' })]);
  return { tries, send: () => send({}, 0) };
}

const byName = (r: string): RetryDecision => (r.startsWith('retry') ? 'retry' : r.startsWith('stop') ? 'stop' : 'done');

test('retry: tries until a final result, with the attempt of each retry', async () => {
  const s = scripted(['retry 1', 'retry 2', 'done 3'], byName, 5);
  assert.equal(await s.send(), 'done 3');
  assert.deepEqual(s.tries, [0, 10, 20]);
});

test('retry: the retries spent, the last result is the answer', async () => {
  const s = scripted(['retry 1', 'retry 2', 'retry 3'], byName, 1);
  assert.equal(await s.send(), 'retry 2');
  assert.deepEqual(s.tries, [0, 10]);
});

test('retry: stop answers with the previous result, or with its own on the first try', async () => {
  const a = scripted(['retry 1', 'stop 2'], byName, 3);
  assert.equal(await a.send(), 'retry 1');
  const b = scripted(['stop 1'], byName, 3);
  assert.equal(await b.send(), 'stop 1');
});

test('retry: no try once the deadline has passed', async () => {
  let tries = 0;
  const send = compose<unknown, number, string>(async () => (tries++, 'retry'), [
    retry({ retries: () => 3, attempt: (_c, n) => n, decide: () => 'retry', exhausted: () => 'none', deadline: () => Date.now() - 1 }),
  ]);
  assert.equal(await send({}, 0), 'none');
  assert.equal(tries, 0);
});
