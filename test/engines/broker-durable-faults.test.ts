/**
 * Durable topics under faults, against real processes: a subscriber process killed (SIGKILL)
 * while 10,000 messages are in flight and started again (every message delivered at least once);
 * the nats-server killed and restarted on the same store in the middle of publishing (nothing the
 * publisher was told is stored goes missing). NATS runs with JetStream, started by the test.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { NatsBroker } from '../../src/engines/broker/nats.js';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { freePort, tempDir, waitFor } from '../helpers.js';
import { killPublisherCase, killSubscriberCase } from '../durable-faults.js';
import { natsServerOrSkip, startNatsServer, type NatsServer } from '../nats-server.js';

const silent = pino({ level: 'silent' });
const { binary, reason } = natsServerOrSkip();

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

describe('durable faults: http broker (SQLite outbox)', () => {
  it('a subscriber process killed with 10,000 messages in flight: all delivered at least once after its restart', async () => {
    const dir = tempDir('mesh-kill-http-');
    const registry = new LocalRegistry(dir.path);
    const pub = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    try {
      const r = await killSubscriberCase(pub, ['--broker', 'http', '--registry', dir.path], dir.path);
      console.log(`# http kill: ${r.seen} delivered, ${r.duplicates} redelivered after the kill (killed at ${r.atKill})`);
    } finally {
      await pub.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('durable faults: http broker publisher killed', () => {
  it('a publisher process killed mid-stream, then a publisher and the subscriber killed and restarted: every acknowledged publish delivered', async () => {
    const dir = tempDir('mesh-pubkill-http-');
    try {
      const r = await killPublisherCase(dir.path, dir.path);
      console.log(`# http publisher kill: ${r.acked} acknowledged, ${r.seen} delivered (${r.unacked} not acknowledged), ${r.duplicates} redelivered`);
    } finally {
      dir.cleanup();
    }
  });
});
