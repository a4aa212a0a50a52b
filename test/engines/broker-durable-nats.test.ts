/**
 * Durable topics on NATS JetStream: the durable contract against a nats-server of the test's own
 * with JetStream on (-js -sd <tmpdir>), and the broker's own cases (no JetStream on the server).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { NatsBroker } from '../../src/engines/broker/nats.js';
import { MemoryBroker } from '../../src/engines/broker/memory.js';
import { durableContract } from '../broker-contract.js';
import { freePort, runCli, tempDir, waitFor } from '../helpers.js';
import { natsServerOrSkip, startNatsServer, type NatsServer } from '../nats-server.js';

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

  it('mesh consumers list|rm on NATS: the topic stream\'s consumers with their pending messages; rm deletes one', async () => {
    const broker = new NatsBroker({ address, logger: silent });
    const flags = ['--registry=memory', '--broker=nats', `--broker_address=${address}`];
    try {
      await (await broker.subscribe('cli.nats.consumers', () => undefined, { durable: 'billing' })).unsubscribe();
      const got: string[] = [];
      const audit = await broker.subscribe('cli.nats.consumers', (m) => void got.push(m.id!), { durable: 'audit' });
      for (let i = 0; i < 3; i++) await broker.publish('cli.nats.consumers', { header: { 'Mesh-Id': `c-${i}` }, body: new Uint8Array(1) });
      await waitFor(() => got.length === 3, 10_000);
      await audit.unsubscribe();
      await waitFor(async () => (await broker.listConsumers('cli.nats.consumers')).map((c) => `${c.name}:${c.pending}`).join() === 'audit:0,billing:3', 10_000);
      const list = await runCli(['consumers', 'list', 'cli.nats.consumers', ...flags]);
      assert.equal(list.stderr, '');
      assert.equal(list.code, 0);
      const time = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';
      assert.match(list.stdout, new RegExp(`^name\\tpending\\tlast_active\\naudit\\t0\\t${time}\\nbilling\\t3\\t${time}\\n$`));
      const rm = await runCli(['consumers', 'rm', 'cli.nats.consumers', 'billing', ...flags]);
      assert.equal(rm.stderr, '');
      assert.equal(rm.stdout, 'removed billing\n');
      assert.deepEqual((await broker.listConsumers('cli.nats.consumers')).map((c) => c.name), ['audit']);
      const missing = await runCli(['consumers', 'rm', 'cli.nats.consumers', 'billing', ...flags]);
      assert.equal(missing.code, 1);
      assert.equal(missing.stderr, 'mesh: consumer billing of topic cli.nats.consumers: not found (404 Not Found)\n');
      assert.equal((await runCli(['consumers', 'list', 'no.stream.here', ...flags])).stdout, 'name\tpending\tlast_active\n');
    } finally {
      await broker.close();
    }
  });

  it('caps the consumer names of a topic, and the server removes a name idle past the inactive threshold', async () => {
    const broker = new NatsBroker({ address, durable: { maxConsumers: 2, inactiveThresholdMs: 1000 }, logger: silent });
    try {
      const a = await broker.subscribe('nats.capped', () => undefined, { durable: 'a' });
      await (await broker.subscribe('nats.capped', () => undefined, { durable: 'b' })).unsubscribe();
      await assert.rejects(
        broker.subscribe('nats.capped', () => undefined, { durable: 'c' }),
        { name: 'DurableLimitError', message: 'topic "nats.capped" has 2 durable consumer names, the most allowed (--broker_max_consumers): remove unused ones with mesh consumers rm nats.capped NAME' },
      );
      // a name the topic has is fine; the stopped one goes after the threshold, the running one stays
      await (await broker.subscribe('nats.capped', () => undefined, { durable: 'b' })).unsubscribe();
      await waitFor(async () => (await broker.listConsumers('nats.capped')).map((c) => c.name).join() === 'a', 15_000, 100);
      await broker.subscribe('nats.capped', () => undefined, { durable: 'c' });
      await a.unsubscribe();
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
