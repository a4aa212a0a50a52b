/** Runs the registry contract against every backend: memory, local (SQLite) and etcd (when available). */
import { describe } from 'node:test';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { registryContract, type RawRecord } from '../registry-contract.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry, LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import { EtcdRegistry } from '../../src/engines/registry/etcd/index.js';
import { engine, tempDir } from '../helpers.js';

/** JSON text for a stored column, or the value itself when it is already text (possibly not JSON). */
const column = (value: unknown, fallback: string) => (value === undefined ? fallback : typeof value === 'string' ? value : JSON.stringify(value));

registryContract('memory', async () => {
  const registry = new MemoryRegistry();
  return { registry, cleanup: () => registry.close() };
});

registryContract('local', async ({ onInvalidRecord }) => {
  const dir = tempDir('mesh-registry-');
  const registry = new LocalRegistry(dir.path, { onInvalidRecord });
  return {
    registry,
    cleanup: async () => {
      await registry.close();
      dir.cleanup();
    },
    // Another program writing the SQLite file directly (better-sqlite3, its own connection),
    // logging the change as mesh does so watchers look.
    writeRaw: async (r: RawRecord) => {
      const db = new Database(join(dir.path, LOCAL_DB_FILE));
      try {
        db.transaction(() => {
          db.prepare(`INSERT OR REPLACE INTO services (name, version, metadata, endpoints) VALUES (?, ?, ?, ?)`).run(
            r.name,
            r.version,
            column(r.metadata, '{}'),
            column(r.endpoints, '[]'),
          );
          db.prepare(`INSERT OR REPLACE INTO nodes (service, version, id, address, port, metadata, expires_at) VALUES (?, ?, ?, ?, ?, ?, NULL)`).run(
            r.name,
            r.version,
            r.node.id,
            r.node.address,
            r.node.port,
            column(r.node.metadata, '{}'),
          );
          const rev = (db.prepare(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`).get() as { value: number }).value;
          db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, ?)`).run(rev, r.name);
        })();
      } finally {
        db.close();
      }
    },
  };
});

const etcdAddress = engine('MESH_TEST_ETCD_ADDRESS', 'etcd');
describe('etcd', { skip: !etcdAddress && 'etcd not available: set MESH_TEST_ETCD_ADDRESS' }, () => {
  // A unique key prefix per registry so parallel runs and cases never see each other.
  const run = `${process.pid}-${randomUUID().slice(0, 8)}`;
  let n = 0;
  registryContract('etcd', async ({ onInvalidRecord }) => {
    const prefix = `/mesh-test/${run}/${n++}/`;
    const registry = new EtcdRegistry(etcdAddress!, { prefix, onInvalidRecord });
    return {
      registry,
      cleanup: async () => {
        await registry.purgePrefix().catch(() => undefined);
        await registry.close();
      },
      // Another program putting a value with the etcd3 client, in mesh's key layout.
      writeRaw: async (r: RawRecord) => {
        const key = `${prefix}${encodeURIComponent(r.name)}/${encodeURIComponent(r.version)}/${encodeURIComponent(String(r.node.id))}`;
        const value = { name: r.name, version: r.version, metadata: r.metadata, endpoints: r.endpoints, nodes: [{ ...r.node }] };
        await registry.client.put(key).value(JSON.stringify(value));
      },
    };
  });
});
