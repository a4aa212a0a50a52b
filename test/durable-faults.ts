/** The durable fault cases shared by the backends (test/engines/broker-durable-faults.test.ts). */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Broker } from '../src/engines/broker/broker.js';
import { ROOT, startProcess, waitFor } from './helpers.js';

const FIXTURE = join(ROOT, 'test/fixtures/durable-subscriber.ts');
const env = { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import tsx`.trim() };

/** The complete lines of the subscriber's file (a line cut by the kill is left out). */
function idsIn(file: string): string[] {
  if (!existsSync(file)) return [];
  const lines = readFileSync(file, 'utf8').split('\n');
  lines.pop();
  return lines;
}

/** Publishes n messages with ids `<prefix>-<i>`, 200 at a time. */
async function publishMany(pub: Broker, topic: string, prefix: string, n: number): Promise<void> {
  for (let i = 0; i < n; i += 200) {
    const batch: Promise<void>[] = [];
    for (let j = i; j < Math.min(n, i + 200); j++) batch.push(pub.publish(topic, { header: { 'Mesh-Id': `${prefix}-${j}` }, body: new Uint8Array(Buffer.from(`m${j}`)) }));
    await Promise.all(batch);
  }
}

/**
 * The subscriber-kill case for any backend: `args` start the fixture against it. Publishes N
 * messages, starts the subscriber, SIGKILLs it once it has seen some (fewer than all), starts it
 * again, and waits until every id was seen.
 */
export async function killSubscriberCase(pub: Broker, args: string[], dir: string): Promise<{ seen: number; duplicates: number; atKill: number }> {
  const N = 10_000;
  const topic = `mesh.faults.kill.${Date.now()}`;
  const out = join(dir, 'seen.txt');
  const sub = (): ReturnType<typeof startProcess> =>
    startProcess([...args, '--topic', topic, '--durable', 'killme', '--out', out, '--ack-wait', '2000'], env, FIXTURE);
  // The consumer exists before the messages: start it once, stop it, then publish the backlog.
  let p = sub();
  await p.waitForOutput(/READY/, 20_000);
  await p.stop('SIGKILL');
  await publishMany(pub, topic, 'k', N);
  p = sub();
  await p.waitForOutput(/READY/, 20_000);
  await waitFor(() => idsIn(out).length >= 500, 30_000);
  await p.stop('SIGKILL');
  const atKill = idsIn(out).length;
  assert.ok(atKill < N, `the subscriber was killed with messages in flight (${atKill} of ${N} seen)`);
  p = sub();
  try {
    await waitFor(() => new Set(idsIn(out)).size === N, 90_000, 100);
  } finally {
    await p.stop('SIGKILL');
  }
  const ids = idsIn(out);
  const unique = new Set(ids);
  for (let i = 0; i < N; i++) assert.ok(unique.has(`k-${i}`), `k-${i} delivered`);
  return { seen: unique.size, duplicates: ids.length - unique.size, atKill };
}


const PUBLISHER = join(ROOT, 'test/fixtures/durable-publisher.ts');

/**
 * The publisher-kill case of the embedded http broker (it has no server to restart: its store is
 * the publisher's own outbox write). A publisher process SIGKILLed mid-stream while a durable
 * subscriber process runs; then a second publisher and the subscriber both SIGKILLed and started
 * again. Every publish that resolved (the id the publisher wrote after it) is delivered.
 */
export async function killPublisherCase(registryDir: string, dir: string): Promise<{ acked: number; seen: number; duplicates: number; unacked: number }> {
  const topic = `mesh.faults.pubkill.${Date.now()}`;
  const acked = join(dir, 'acked.txt');
  const out = join(dir, 'seen.txt');
  const sub = (): ReturnType<typeof startProcess> =>
    startProcess(['--broker', 'http', '--registry', registryDir, '--topic', topic, '--durable', 'pubkill', '--out', out, '--ack-wait', '2000'], env, FIXTURE);
  const publisher = (prefix: string, count?: number): ReturnType<typeof startProcess> =>
    startProcess(['--registry', registryDir, '--topic', topic, '--prefix', prefix, '--out', acked, ...(count ? ['--count', String(count)] : [])], env, PUBLISHER);
  const ackedOf = (prefix: string): number => idsIn(acked).filter((id) => id.startsWith(`${prefix}-`)).length;
  const allSeen = (): boolean => {
    const seen = new Set(idsIn(out));
    return idsIn(acked).every((id) => seen.has(id));
  };
  let s = sub();
  await s.waitForOutput(/READY/, 20_000);
  try {
    // 1. The publisher alone killed mid-stream; the subscriber keeps running.
    let p = publisher('a');
    await waitFor(() => ackedOf('a') >= 2000, 60_000);
    await p.stop('SIGKILL');
    await waitFor(allSeen, 60_000, 100);
    // 2. A publisher and the subscriber both killed, both started again.
    p = publisher('b');
    await waitFor(() => ackedOf('b') >= 1000 && idsIn(out).some((id) => id.startsWith('b-')), 60_000);
    await Promise.all([p.stop('SIGKILL'), s.stop('SIGKILL')]);
    s = sub();
    await s.waitForOutput(/READY/, 20_000);
    p = publisher('c', 500);
    await waitFor(() => p.child.exitCode !== null, 60_000);
    assert.equal(p.child.exitCode, 0, p.output());
    assert.equal(ackedOf('c'), 500);
    await waitFor(allSeen, 60_000, 100);
  } finally {
    await s.stop('SIGKILL');
  }
  const ackedIds = idsIn(acked);
  const ids = idsIn(out);
  const unique = new Set(ids);
  const ackedSet = new Set(ackedIds);
  for (const id of ackedIds) assert.ok(unique.has(id), `${id} (acknowledged to the publisher) delivered`);
  return { acked: ackedIds.length, seen: unique.size, duplicates: ids.length - unique.size, unacked: [...unique].filter((id) => !ackedSet.has(id)).length };
}
