/** Runs the broker contract against every backend, plus each backend's own cases. */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BrokerUnavailableError, type Broker } from '../../src/engines/broker/broker.js';
import { MemoryBroker } from '../../src/engines/broker/memory.js';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { NatsBroker } from '../../src/engines/broker/nats.js';
import { createBroker } from '../../src/engines/broker/create.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { brokerContract } from '../broker-contract.js';
import { engine, freePort, tempDir, waitFor } from '../helpers.js';
import { httpBrokerPair, silent } from '../fixtures/brokers.js';

/** Handler failures are logged on purpose in these tests: keep the output clean. */

brokerContract('memory', async () => {
  const broker = new MemoryBroker({ logger: silent });
  return { brokers: [broker, broker], cleanup: () => broker.close() };
});

brokerContract('http (local registry, two processes\' worth of brokers on one SQLite dir)', async () => {
  const dir = tempDir('mesh-broker-');
  // Two registry handles on one directory, as two processes would have.
  const r1 = new LocalRegistry(dir.path);
  const r2 = new LocalRegistry(dir.path);
  const { pub, sub, close } = httpBrokerPair({ registry: [r1, r2] });
  return {
    brokers: [pub, sub],
    cleanup: async () => {
      await close();
      await r1.close();
      await r2.close();
      dir.cleanup();
    },
  };
});

brokerContract('http (memory registry)', async () => {
  const { pub, sub, close } = httpBrokerPair();
  return { brokers: [pub, sub], cleanup: close };
});

const natsAddress = engine('MESH_TEST_NATS_ADDRESS', 'nats');
describe('nats', { skip: !natsAddress && 'nats not available: set MESH_TEST_NATS_ADDRESS' }, () => {
  brokerContract('nats', async () => {
    const a = new NatsBroker({ address: natsAddress!, logger: silent });
    const b = new NatsBroker({ address: natsAddress!, logger: silent });
    return {
      brokers: [a, b],
      cleanup: async () => {
        await a.close();
        await b.close();
      },
    };
  });

  it('reports connected and rejects publishing after close', async () => {
    const broker = new NatsBroker({ address: natsAddress!, logger: silent });
    await broker.connect();
    assert.equal(broker.connected, true);
    await broker.close();
    assert.equal(broker.connected, false);
    await assert.rejects(broker.publish('mesh.test.closed', { header: {}, body: new Uint8Array(1) }), BrokerUnavailableError);
  });

  it('rejects a header NATS cannot carry, with a clear error', async () => {
    const broker = new NatsBroker({ address: natsAddress!, logger: silent });
    try {
      await assert.rejects(
        broker.publish('mesh.test.badheader', { header: { 'bad:key': 'v' }, body: new Uint8Array(1) }),
        /header/,
      );
    } finally {
      await broker.close();
    }
  });
});

describe('nats without a server', () => {
  it('rejects publish with BrokerUnavailableError when nothing listens', async () => {
    const port = await freePort();
    const broker = new NatsBroker({ address: `127.0.0.1:${port}`, logger: silent, timeoutMs: 2000 });
    try {
      await assert.rejects(broker.publish('x', { header: {}, body: new Uint8Array(1) }), BrokerUnavailableError);
      await assert.rejects(broker.subscribe('x', () => undefined), BrokerUnavailableError);
      assert.equal(broker.connected, false);
    } finally {
      await broker.close();
    }
  });

  it('requires an address', () => {
    assert.throws(() => new NatsBroker({ address: '' }), /address/);
  });
});

describe('memory broker', () => {
  it('round-robins a queue group', async () => {
    const broker = new MemoryBroker({ logger: silent });
    const counts = [0, 0, 0];
    for (let i = 0; i < 3; i++) await broker.subscribe('rr', () => void counts[i]!++, { queue: 'q' });
    for (let i = 0; i < 9; i++) await broker.publish('rr', { header: {}, body: new Uint8Array(0) });
    await waitFor(() => counts.reduce((a, b) => a + b) === 9);
    assert.deepEqual(counts, [3, 3, 3]);
    await broker.close();
  });

  it('gives each subscriber its own copy', async () => {
    const broker = new MemoryBroker({ logger: silent });
    const seen: string[] = [];
    await broker.subscribe('copy', (m) => {
      m.body[0] = 0x21;
      m.header.x = 'changed';
    });
    await broker.subscribe('copy', (m) => void seen.push(`${m.header.x}:${Buffer.from(m.body).toString()}`));
    const body = new Uint8Array(Buffer.from('abc'));
    await broker.publish('copy', { header: { x: 'orig' }, body });
    await waitFor(() => seen.length === 1);
    assert.deepEqual(seen, ['orig:abc']);
    assert.equal(Buffer.from(body).toString(), 'abc');
    await broker.close();
  });

  it('copies a Buffer body too (memory, and the http broker handing over to its own subscriptions)', async () => {
    const registry = new MemoryRegistry();
    for (const broker of [new MemoryBroker({ logger: silent }), new HttpBroker({ registry, logger: silent })] as Broker[]) {
      const seen: string[] = [];
      const mutate = (m: { header: Record<string, string>; body: Uint8Array }) => {
        m.body[0] = 0x21;
        m.header.x = 'changed';
      };
      const record = (m: { header: Record<string, string>; body: Uint8Array }) => void seen.push(`${m.header.x}:${Buffer.from(m.body).toString()}`);
      await broker.subscribe('copy', mutate);
      await broker.subscribe('copy', record);
      await broker.subscribe('copy', mutate);
      await broker.subscribe('copy', record);
      const body = Buffer.from('abc');
      await broker.publish('copy', { header: { x: 'orig' }, body });
      await waitFor(() => seen.length === 2);
      assert.deepEqual(seen, ['orig:abc', 'orig:abc'], broker.name);
      assert.equal(body.toString(), 'abc', broker.name);
      await broker.close();
    }
    await registry.close();
  });

  it('rejects publish and subscribe after close with BrokerUnavailableError', async () => {
    const broker = new MemoryBroker({ logger: silent });
    await broker.close();
    await assert.rejects(broker.publish('t', { header: {}, body: new Uint8Array(0) }), BrokerUnavailableError);
    await assert.rejects(broker.subscribe('t', () => undefined), BrokerUnavailableError);
  });
});

describe('createBroker', () => {
  const registry = new MemoryRegistry();
  after(() => registry.close());

  it('creates each kind', async () => {
    const kinds: Array<[string, string | undefined, string]> = [
      ['memory', undefined, 'memory'],
      ['http', undefined, 'http'],
      ['http', '127.0.0.1:0', 'http'],
      ['nats', '127.0.0.1:4222', 'nats'],
    ];
    for (const [kind, address, name] of kinds) {
      const b: Broker = createBroker(kind, { registry, address });
      assert.equal(b.name, name);
      await b.close();
    }
  });

  it('needs an address for nats', () => {
    assert.throws(() => createBroker('nats', { registry }), /nats.*address/);
  });

  it('names the valid kinds for an unknown one', () => {
    assert.throws(() => createBroker('kafka', { registry }), (err: Error) => {
      assert.match(err.message, /kafka/);
      for (const k of ['http', 'memory', 'nats']) assert.ok(err.message.includes(k), err.message);
      return true;
    });
  });
});

