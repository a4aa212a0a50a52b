/** The durable fault cases shared by the backends (test/broker-durable-faults.test.ts). */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Broker } from '../src/broker/broker.js';
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

