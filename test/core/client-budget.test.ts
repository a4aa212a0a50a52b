/**
 * A call (or stream) whose budget was spent waiting for a host, because the registry was slow to
 * answer a service's first lookup, is not sent once the host comes: the caller gets its 504 and
 * the host is released as cancelled (no error, no timeout, nothing for outlier detection).
 * A real backend on loopback counts what reaches it; the registry answers when the test says.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import type { Service } from '../../src/engines/registry/registry.js';
import { Client } from '../../src/core/client/client.js';
import { MeshError } from '../../src/base/errors.js';
import { ContextStore } from '../../src/base/util/call-context.js';
import { waitFor } from '../helpers.js';
import { node, upstreamFixture } from '../fixtures/upstream.js';

const up = upstreamFixture();
after(() => up.close());

/** A registry whose lookups wait until `open()`; `waiting` counts lookups in progress. */
class GatedRegistry extends MemoryRegistry {
  waiting = 0;
  private gate!: () => void;
  private readonly opened = new Promise<void>((r) => (this.gate = r));
  open(): void {
    this.gate();
  }
  override async getService(name: string): Promise<Service[]> {
    this.waiting++;
    await this.opened;
    this.waiting--;
    return super.getService(name);
  }
}

async function setup(service: string, context?: ContextStore) {
  const b = await up.backend();
  const registry = new GatedRegistry();
  await registry.register({ name: service, version: '1', metadata: {}, endpoints: [], nodes: [node('n1', b.port)] });
  const { cm, stats } = up.manager({ registry });
  const client = new Client({ selector: cm, requestTimeoutMs: 5000, retries: 1, stats, context });
  return { b, registry, stats, cm, client };
}

/** Waits until `ms` have passed since `since`: the call's budget, counted by the clock it uses. */
const spent = (since: number, ms: number) => waitFor(() => Date.now() - since > ms, ms + 5000, 10);

function assertNothingCharged(s: Awaited<ReturnType<typeof setup>>, service: string): void {
  assert.equal(s.b.hits, 0, 'nothing reached the backend');
  const host = s.cm.clusters().find((c) => c.name === service)!.hosts[0]!;
  assert.equal(host.stats.rq_error, 0);
  assert.equal(host.stats.rq_timeout, 0);
  assert.equal(host.stats.cx_total, 0, 'no connection was opened');
  assert.equal(s.stats.counter(`cluster.${service}.upstream_rq_cancelled`).value, 1);
  assert.equal(s.stats.counter(`cluster.${service}.upstream_rq_timeout`).value, 0);
}

test('a call whose budget the registry lookup spent fails with its 504 without being sent; the host is not charged', async () => {
  const s = await setup('budget.unary');
  const call = s.client.call('budget.unary', 'Say.Hello', Buffer.from('{}'), { timeoutMs: 200 });
  const sent = Date.now(); // the call's budget started before this
  const settled = call.then(
    () => undefined,
    (err: unknown) => err,
  );
  await waitFor(() => s.registry.waiting === 1);
  await spent(sent, 200);
  s.registry.open();
  const err = await settled;
  assert.ok(err instanceof MeshError, String(err));
  assert.equal(err.toBody(), JSON.stringify({ id: 'go.mesh.client', code: 504, detail: 'call budget.unary.Say.Hello: timeout after 200ms', status: 'Gateway Timeout' }));
  // The host the lookup found after the call's budget ended is given back as cancelled.
  await waitFor(() => s.stats.counter('cluster.budget.unary.upstream_rq_cancelled').value === 1);
  assertNothingCharged(s, 'budget.unary');
  // With the registry answering, the next call goes through.
  const ok = await s.client.call('budget.unary', 'Say.Hello', Buffer.from('{}'), { timeoutMs: 2000 });
  assert.equal(ok.status, 200);
  assert.equal(s.b.hits, 1);
});

test('a call waiting for a registry lookup that does not answer gets its 504 when its budget ends, while the lookup still waits', async () => {
  const s = await setup('budget.hung');
  let settled: unknown;
  void s.client.call('budget.hung', 'Say.Hello', Buffer.from('{}'), { timeoutMs: 200 }).then(
    () => (settled = 'answered'),
    (err: unknown) => (settled = err),
  );
  // Bounded generously to catch a call that waits for the lookup (the registry never answers here).
  await waitFor(() => settled !== undefined, 10_000);
  assert.equal(s.registry.waiting, 1, 'the lookup still waits: the call did not');
  assert.ok(settled instanceof MeshError, String(settled));
  assert.equal(settled.toBody(), JSON.stringify({ id: 'go.mesh.client', code: 504, detail: 'call budget.hung.Say.Hello: timeout after 200ms', status: 'Gateway Timeout' }));
  assert.equal(settled.responseFlag, 'UT');
  // The lookup answers at last: its host is given back untouched, the next call goes through.
  s.registry.open();
  await waitFor(() => s.stats.counter('cluster.budget.hung.upstream_rq_cancelled').value === 1);
  assertNothingCharged(s, 'budget.hung');
  assert.equal((await s.client.call('budget.hung', 'Say.Hello', Buffer.from('{}'), { timeoutMs: 2000 })).status, 200);
});

test('a stream whose deadline the registry lookup spent is not opened; the host is not charged', async () => {
  const s = await setup('budget.stream');
  const open = s.client.stream('budget.stream', 'Say.Stream', { kind: 'server', request: Buffer.from('{}'), timeoutMs: 200 });
  const sent = Date.now();
  const settled = open.then(
    () => undefined,
    (err: unknown) => err,
  );
  await waitFor(() => s.registry.waiting === 1);
  await spent(sent, 200);
  s.registry.open();
  const err = await settled;
  assert.ok(err instanceof MeshError, `the stream was opened: ${String(err)}`);
  assert.equal(err.toBody(), JSON.stringify({ id: 'go.mesh.client', code: 504, detail: 'stream budget.stream.Say.Stream: deadline of 200ms exceeded', status: 'Gateway Timeout' }));
  await waitFor(() => s.stats.counter('cluster.budget.stream.upstream_rq_cancelled').value === 1);
  assertNothingCharged(s, 'budget.stream');
});

test('a stream waiting for a registry lookup that does not answer fails at its deadline, while the lookup still waits', async () => {
  const s = await setup('budget.hungstream');
  let settled: unknown;
  void s.client.stream('budget.hungstream', 'Say.Stream', { kind: 'server', request: Buffer.from('{}'), timeoutMs: 200 }).then(
    () => (settled = 'opened'),
    (err: unknown) => (settled = err),
  );
  // Bounded generously to catch a stream that waits for the lookup (the registry never answers here).
  await waitFor(() => settled !== undefined, 10_000);
  assert.equal(s.registry.waiting, 1, 'the lookup still waits: the stream did not');
  assert.ok(settled instanceof MeshError, String(settled));
  assert.equal(settled.toBody(), JSON.stringify({ id: 'go.mesh.client', code: 504, detail: 'stream budget.hungstream.Say.Stream: deadline of 200ms exceeded', status: 'Gateway Timeout' }));
  s.registry.open();
  await waitFor(() => s.stats.counter('cluster.budget.hungstream.upstream_rq_cancelled').value === 1);
  assertNothingCharged(s, 'budget.hungstream');
});

test('a stream opened in a call being served whose deadline has passed is not opened (was: sent with a 1 ms deadline)', async () => {
  const context = new ContextStore();
  const s = await setup('budget.late', context);
  s.registry.open();
  const err = await context.run({ deadline: Date.now() - 1 }, () => s.client.stream('budget.late', 'Say.Stream', { kind: 'server', request: Buffer.from('{}') })).then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof MeshError, `the stream was opened: ${String(err)}`);
  assert.equal(
    err.toBody(),
    JSON.stringify({ id: 'go.mesh.client', code: 504, detail: 'stream budget.late.Say.Stream: the deadline of the call being served passed before it was opened', status: 'Gateway Timeout' }),
  );
  assert.equal(s.b.hits, 0, 'nothing reached the backend');
  assert.equal(s.cm.clusters().length, 0, 'no host was even looked for');
});
