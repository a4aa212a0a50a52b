/**
 * Durable topics on NATS JetStream: the durable contract against a nats-server of the test's own
 * with JetStream on (-js -sd <tmpdir>), and the broker's own cases (no JetStream on the server).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { NatsBroker } from '../src/broker/nats.js';
import { MemoryBroker } from '../src/broker/memory.js';
import { durableContract } from './broker-contract.js';
import { freePort, tempDir, waitFor } from './helpers.js';
import { natsServerOrSkip, startNatsServer, type NatsServer } from './nats-server.js';

const silent = pino({ level: 'silent' });
const { binary, reason } = natsServerOrSkip();

describe('nats JetStream', { skip: !binary && reason }, () => {
  let server: NatsServer;
  let plain: NatsServer;
  let address = '';
  let plainAddress = '';
  const store = tempDir('mesh-js-');
  before(async () => {
    const port = await freePort();
    server = await startNatsServer(binary!, port, store.path);
    address = `127.0.0.1:${port}`;
    const p2 = await freePort();
    plain = await startNatsServer(binary!, p2);
    plainAddress = `127.0.0.1:${p2}`;
  });
  after(async () => {
    await server?.stop();
    await plain?.stop();
    store.cleanup();
  });

  durableContract('nats (JetStream)', async () => {
    const a = new NatsBroker({ address, logger: silent });
    const b = new NatsBroker({ address, logger: silent });
    return {
      brokers: [a, b],
      cleanup: async () => {
        await a.close();
        await b.close();
      },
    };
  });

  it('says JetStream is off when a durable subscription meets a server without it; plain topics still work', async () => {
    const broker = new NatsBroker({ address: plainAddress, logger: silent });
    try {
      await assert.rejects(broker.subscribe('mesh.test.nojs', () => undefined, { durable: 'x' }), /JetStream is not available/);
      const got: string[] = [];
      await broker.subscribe('mesh.test.nojs', (m) => void got.push(Buffer.from(m.body).toString()));
      await broker.publish('mesh.test.nojs', { header: {}, body: new Uint8Array(Buffer.from('plain')) });
      await waitFor(() => got.length === 1);
      assert.deepEqual(got, ['plain']);
    } finally {
      await broker.close();
    }
  });
});

describe('memory broker and durable subscriptions', () => {
  it('rejects a durable subscription clearly', async () => {
    const broker = new MemoryBroker({ logger: silent });
    await assert.rejects(broker.subscribe('t', () => undefined, { durable: 'x' }), /memory broker: durable subscriptions need the nats or http broker/);
    await broker.close();
  });
});
