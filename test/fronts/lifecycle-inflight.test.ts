/**
 * In-flight tracking of ServerLifecycle (src/base/http/lifecycle.ts) on loopback: requests that finish
 * in any order leave the count exact, and a drain cuts off exactly the requests still open (and
 * their connections).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, Agent, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ServerLifecycle } from '../../src/base/http/lifecycle.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { waitFor } from '../helpers.js';

test('requests that finish out of order are counted exactly; a drain cuts off the ones still open', async () => {
  const pending = new Map<string, ServerResponse>();
  const server = createServer((req, res) => {
    lifecycle.request(res);
    req.resume();
    pending.set(req.url!.slice(1), res);
  });
  const stats = new StatsStore();
  const lifecycle = new ServerLifecycle(server, { maxConnections: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 10_000, drainTimeoutMs: 200 }, { stats, prefix: 'http.t.' });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;

  const answers: Array<Promise<number | string>> = [];
  for (let i = 0; i < 6; i++) {
    answers.push(
      new Promise((resolve) => {
        const agent = new Agent({ keepAlive: true }); // one connection per request
        request({ host: '127.0.0.1', port, path: `/${i}`, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        })
          .on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
          .end();
      }),
    );
  }
  await waitFor(() => pending.size === 6 || undefined);
  assert.equal(lifecycle.inFlight, 6);

  // Out of order: the middle, the last, the first.
  for (const id of ['2', '5', '0']) pending.get(id)!.end('ok');
  for (const i of [2, 5, 0]) assert.equal(await answers[i], 200);
  await waitFor(() => lifecycle.inFlight === 3 || undefined);

  pending.get('3')!.end('ok');
  assert.equal(await answers[3], 200);
  await waitFor(() => lifecycle.inFlight === 2 || undefined);

  // 1 and 4 never answer: the drain waits drainTimeoutMs, then cuts them and their connections off.
  const result = await lifecycle.close();
  assert.deepEqual(result, { requestsCutOff: 2, connectionsCutOff: 2 });
  assert.equal(typeof (await answers[1]), 'string');
  assert.equal(typeof (await answers[4]), 'string');
  assert.equal(stats.counter('http.t.downstream_cx_destroy_active_rq').value, 2);
});
