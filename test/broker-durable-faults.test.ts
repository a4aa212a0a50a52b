/**
 * Durable topics under faults, against real processes: a subscriber process killed (SIGKILL)
 * while 10,000 messages are in flight and started again (every message delivered at least once);
 * the nats-server killed and restarted on the same store in the middle of publishing (nothing the
 * publisher was told is stored goes missing). NATS runs with JetStream, started by the test.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { NatsBroker } from '../src/broker/nats.js';
import type { Broker } from '../src/broker/broker.js';
import { freePort, ROOT, startProcess, tempDir, waitFor } from './helpers.js';
import { natsServerOrSkip, startNatsServer, type NatsServer } from './nats-server.js';

const silent = pino({ level: 'silent' });
const { binary, reason } = natsServerOrSkip();
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

describe('durable faults: nats JetStream', { skip: !binary && reason }, () => {
  let server: NatsServer;
  let port = 0;
  const store = tempDir('mesh-js-faults-');
  before(async () => {
    port = await freePort();
    server = await startNatsServer(binary!, port, store.path);
  });
  after(async () => {
    await server?.stop();
    store.cleanup();
  });

  it('a subscriber process killed with 10,000 messages in flight: all delivered at least once after its restart', async () => {
    const pub = new NatsBroker({ address: `127.0.0.1:${port}`, logger: silent });
    const dir = tempDir('mesh-kill-');
    try {
      const r = await killSubscriberCase(pub, ['--broker', 'nats', '--address', `127.0.0.1:${port}`], dir.path);
      console.log(`# nats kill: ${r.seen} delivered, ${r.duplicates} redelivered after the kill (killed at ${r.atKill})`);
    } finally {
      await pub.close();
      dir.cleanup();
    }
  });

  it('a nats-server restart while publishing: every message the publisher was told is stored is delivered', async () => {
    const address = `127.0.0.1:${port}`;
    const pub = new NatsBroker({ address, reconnectTimeWaitMs: 100, logger: silent });
    const sub = new NatsBroker({ address, reconnectTimeWaitMs: 100, logger: silent });
    const topic = `mesh.faults.restart.${Date.now()}`;
    const got = new Set<string>();
    const acked: string[] = [];
    let rejected = 0;
    try {
      await sub.subscribe(topic, (m) => void got.add(m.id!), { durable: 'survivor', ackWaitMs: 2000 });
      let i = 0;
      const publishOne = async () => {
        const id = `r-${i++}`;
        try {
          await pub.publish(topic, { header: { 'Mesh-Id': id }, body: new Uint8Array(Buffer.from(id)) });
          acked.push(id);
        } catch {
          rejected++;
        }
      };
      while (acked.length < 500) await publishOne();
      await server.stop();
      await publishOne(); // rejected: the server is gone
      server = await startNatsServer(binary!, port, store.path);
      await waitFor(async () => {
        await publishOne();
        return acked.length >= 1000;
      }, 30_000, 10);
      assert.ok(rejected >= 1, 'a publish while the server was down was refused');
      await waitFor(() => acked.every((id) => got.has(id)), 30_000, 100);
      console.log(`# nats restart: ${acked.length} stored and delivered, ${rejected} refused while down`);
    } finally {
      await pub.close();
      await sub.close();
    }
  });
});
