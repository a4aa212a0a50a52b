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
import { freePort, runCli, tempDir, waitFor } from './helpers.js';
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

  it('mesh dlq list|replay on an empty dead-letter stream: the header and "replayed 0", then the dead letter once there is one', async () => {
    const broker = new NatsBroker({ address, logger: silent });
    const flags = ['--registry=memory', '--broker=nats', `--broker_address=${address}`];
    try {
      let failing = true;
      const done: string[] = [];
      // the durable subscription creates the topic's stream and its (empty) dead-letter stream
      await broker.subscribe('cli.nats.dlq', (m) => {
        if (failing) throw new Error('refused');
        done.push(Buffer.from(m.body).toString());
      }, { durable: 'worker', maxDeliver: 1 });
      const empty = await runCli(['dlq', 'list', 'cli.nats.dlq', ...flags]);
      assert.equal(empty.stderr, '');
      assert.equal(empty.code, 0);
      assert.equal(empty.stdout, 'id\tconsumer\tdeliveries\terror\tbody\n');
      const none = await runCli(['dlq', 'replay', 'cli.nats.dlq', ...flags]);
      assert.equal(none.stderr, '');
      assert.equal(none.code, 0);
      assert.equal(none.stdout, 'replayed 0\n');
      await broker.publish('cli.nats.dlq', { header: { 'Mesh-Id': 'n-1' }, body: new Uint8Array(Buffer.from('payload')) });
      await waitFor(async () => (await broker.listDeadLetters('cli.nats.dlq', 10)).length === 1, 10_000);
      const list = await runCli(['dlq', 'list', 'cli.nats.dlq', ...flags]);
      assert.equal(list.code, 0, list.stderr);
      assert.equal(list.stdout, 'id\tconsumer\tdeliveries\terror\tbody\nn-1\tworker\t1\trefused\tpayload\n');
      failing = false;
      const replay = await runCli(['dlq', 'replay', 'cli.nats.dlq', ...flags]);
      assert.equal(replay.code, 0, replay.stderr);
      assert.equal(replay.stdout, 'replayed 1\n');
      await waitFor(() => done.length === 1, 10_000);
      // emptied by the replay (first_seq past last_seq): empty again
      assert.equal((await runCli(['dlq', 'list', 'cli.nats.dlq', ...flags])).stdout, 'id\tconsumer\tdeliveries\terror\tbody\n');
    } finally {
      await broker.close();
    }
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
