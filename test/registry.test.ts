/** Runs the registry contract against every backend: memory, local (SQLite) and etcd (when available). */
import { describe } from 'node:test';
import { randomUUID } from 'node:crypto';
import { registryContract } from './registry-contract.js';
import { MemoryRegistry } from '../src/registry/memory.js';
import { LocalRegistry } from '../src/registry/local.js';
import { EtcdRegistry } from '../src/registry/etcd.js';
import { engine, tempDir } from './helpers.js';

registryContract('memory', async () => {
  const registry = new MemoryRegistry();
  return { registry, cleanup: () => registry.close() };
});

registryContract('local', async () => {
  const dir = tempDir('mesh-registry-');
  const registry = new LocalRegistry(dir.path);
  return {
    registry,
    cleanup: async () => {
      await registry.close();
      dir.cleanup();
    },
  };
});

const etcdAddress = engine('MESH_TEST_ETCD_ADDRESS', 'etcd');
describe('etcd', { skip: !etcdAddress && 'etcd not available: set MESH_TEST_ETCD_ADDRESS' }, () => {
  // A unique key prefix per registry so parallel runs and cases never see each other.
  const run = `${process.pid}-${randomUUID().slice(0, 8)}`;
  let n = 0;
  registryContract('etcd', async () => {
    const prefix = `/mesh-test/${run}/${n++}/`;
    const registry = new EtcdRegistry(etcdAddress!, { prefix });
    return {
      registry,
      cleanup: async () => {
        await registry.purgePrefix().catch(() => undefined);
        await registry.close();
      },
    };
  });
});
