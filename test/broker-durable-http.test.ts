/**
 * Durable subscriptions of the http broker (the embedded default): the durable contract against
 * two brokers over one local registry directory (as two processes would have), their outbox in
 * broker.db beside the registry's database.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { HttpBroker } from '../src/broker/http/broker.js';
import { createBroker } from '../src/broker/create.js';
import { MemoryRegistry } from '../src/registry/memory.js';
import { LocalRegistry } from '../src/registry/local/index.js';
import { durableContract } from './broker-contract.js';
import { tempDir, waitFor } from './helpers.js';

const silent = pino({ level: 'silent' });

durableContract('http (SQLite outbox beside the local registry)', async () => {
  const dir = tempDir('mesh-durable-');
  const r1 = new LocalRegistry(dir.path);
  const r2 = new LocalRegistry(dir.path);
  // createBroker finds the directory of a local registry by itself
  const a = createBroker('http', { registry: r1, logger: silent });
  const b = createBroker('http', { registry: r2, logger: silent });
  return {
    brokers: [a, b],
    cleanup: async () => {
      await a.close();
      await b.close();
      await r1.close();
      await r2.close();
      dir.cleanup();
    },
  };
});

describe('http broker durable subscriptions', () => {
  it('refuses a durable subscription without a local registry, clearly', async () => {
    const registry = new MemoryRegistry();
    const broker = new HttpBroker({ registry, logger: silent });
    try {
      await assert.rejects(broker.subscribe('t', () => undefined, { durable: 'x' }), /durable subscriptions need the local registry/);
    } finally {
      await broker.close();
      await registry.close();
    }
  });

  it('delivers to plain subscribers too, with the Mesh-Id the durable copy has', async () => {
    const dir = tempDir('mesh-durable-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    try {
      const plain: Array<Record<string, string>> = [];
      const durable: Array<string | undefined> = [];
      await broker.subscribe('mixed', (m) => void plain.push(m.header));
      await broker.subscribe('mixed', (m) => void durable.push(m.id), { durable: 'd' });
      await broker.publish('mixed', { header: { a: '1' }, body: new Uint8Array(1) });
      await waitFor(() => plain.length === 1 && durable.length === 1);
      assert.equal(plain[0]!.a, '1');
      assert.equal(plain[0]!['Mesh-Id'], durable[0]);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});
