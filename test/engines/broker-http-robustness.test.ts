/**
 * The http broker under hostile or odd input and conditions: ids a response header cannot carry,
 * ids encodeURIComponent refuses, a caller changing its header object after publish(), and a wall
 * clock stepping back while the subscriber list is cached.
 */
import { describe, it, mock } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { request } from 'undici';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { DELIVERY_PATH, HEADER_FIELD, encodeHeader } from '../../src/engines/broker/http/wire.js';
import { loadSecret, SECRET_FIELD } from '../../src/engines/broker/http/secret.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry, LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { RegistryValidationError } from '../../src/engines/registry/validate.js';
import Database from 'better-sqlite3';
import { ROOT, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { bytes, collector, httpBrokerPair, msg, silent } from '../fixtures/brokers.js';


const FIXTURE = join(ROOT, 'test/fixtures/broker-peer.ts');
const env = { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --import tsx`.trim() };
const peerMessages = (p: RunningProcess) =>
  p
    .output()
    .split('\n')
    .filter((l) => l.startsWith('MSG '))
    .map((l) => JSON.parse(l.slice(4)) as { body: string });

describe('http broker: unknown ids of a batch are reported without breaking the response header', () => {
  it('a batch naming an id with a non-Latin-1 character does not crash the subscriber process', async () => {
    const dir = tempDir('mesh-review-crash-');
    const registry = new LocalRegistry(dir.path);
    const peer = startProcess(['--registry', dir.path, '--topic', 'crash'], env, FIXTURE);
    try {
      const ready = await peer.waitForOutput(/READY \S+/, 20_000);
      const hostPort = ready.split(' ')[1]!;
      const id = (await registry.getService('topic:crash'))[0]!.nodes[0]!.id;
      // The secret of the directory the peer shares (its broker.secret).
      const secret = { [SECRET_FIELD]: loadSecret({ directory: dir.path }).value };
      // One known id and one the endpoint does not know, with a character setHeader refuses.
      const res = await request(`http://${hostPort}${DELIVERY_PATH}?topic=crash&id=${id}&id=%E2%82%AC`, {
        method: 'POST',
        headers: { [HEADER_FIELD]: encodeHeader({}), ...secret },
        body: 'hello',
        headersTimeout: 3000,
        bodyTimeout: 3000,
      }).catch((err: Error) => err);
      assert.ok(!(res instanceof Error), `no answer: ${String(res)}\n${peer.output().slice(-1500)}`);
      assert.equal(res.statusCode, 404);
      await res.body.dump();
      await waitFor(() => peerMessages(peer).length === 1, 2000);
      // a good delivery last: the process handled it, so it outlived the bad batch
      const marker = await request(`http://${hostPort}${DELIVERY_PATH}?topic=crash&id=${id}`, { method: 'POST', headers: { [HEADER_FIELD]: encodeHeader({}), ...secret }, body: 'marker' });
      assert.equal(marker.statusCode, 202);
      await marker.body.dump();
      await waitFor(() => peerMessages(peer).length === 2, 2000);
      assert.equal(peer.child.exitCode, null, `the subscriber process died:\n${peer.output().slice(-1500)}`);
    } finally {
      await peer.stop('SIGKILL');
      await registry.close();
      dir.cleanup();
    }
  });

  it('a foreign registry node with such an id does not kill the subscriber on an ordinary publish', async () => {
    const dir = tempDir('mesh-review-crash2-');
    const registry = new LocalRegistry(dir.path);
    const pub = new HttpBroker({ registry, logger: silent });
    const peer = startProcess(['--registry', dir.path, '--topic', 'crash'], env, FIXTURE);
    try {
      const ready = await peer.waitForOutput(/READY \S+/, 20_000);
      const [address, port] = ready.split(' ')[1]!.split(':') as [string, string];
      // The registry's doors refuse such an id; another implementation may still write it into the file.
      await assert.rejects(
        registry.register({ name: 'topic:crash', version: 'broadcast', metadata: {}, endpoints: [], nodes: [{ id: 'ghost-\u20ac', address, port: Number(port), metadata: {} }] }),
        RegistryValidationError,
      );
      const db = new Database(join(dir.path, LOCAL_DB_FILE));
      try {
        db.prepare(`INSERT OR REPLACE INTO services (name, version, metadata, endpoints) VALUES ('topic:crash', 'broadcast', '{}', '[]')`).run();
        db.prepare(`INSERT OR REPLACE INTO nodes (service, version, id, address, port, metadata, expires_at) VALUES ('topic:crash', 'broadcast', ?, ?, ?, ?, NULL)`).run(
          'ghost-\u20ac',
          address,
          Number(port),
          JSON.stringify({ broker: 'http', batch: '1' }),
        );
        const rev = (db.prepare(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`).get() as { value: number }).value;
        db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, 'topic:crash')`).run(rev);
      } finally {
        db.close();
      }
      await pub.publish('crash', msg('ordinary message'));
      await waitFor(() => peerMessages(peer).length === 1, 2000);
      // a marker last: the process handled it, so it outlived the ghost id
      await pub.publish('crash', msg('marker'));
      await waitFor(() => peerMessages(peer).length === 2, 2000);
      assert.equal(peer.child.exitCode, null, `the subscriber process died:\n${peer.output().slice(-1500)}`);
    } finally {
      await peer.stop('SIGKILL');
      await pub.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('http broker: the subscriber list is built for all subscribers at once', () => {
  it('one registry node whose id encodeURIComponent rejects does not fail the publish for everyone', async () => {
    const { registry, pub, sub, close } = httpBrokerPair();
    try {
      const good = collector();
      await sub.subscribe('t', good.handler);
      // a lone surrogate: fine for JSON, URIError for encodeURIComponent; the registry refuses it now
      await assert.rejects(
        registry.register({ name: 'topic:t', version: 'broadcast', metadata: {}, endpoints: [], nodes: [{ id: 'bad-\ud800', address: '127.0.0.1', port: 9, metadata: { broker: 'http' } }] }),
        RegistryValidationError,
      );
      // Before the cache, the bad node's delivery failed alone (logged) and the others got the message.
      await pub.publish('t', msg('for the good one'));
      await waitFor(() => good.got.length === 1, 2000);
    } finally {
      await close();
    }
  });
});

describe('http broker: local subscribers and remote ones see the same header', () => {
  it('the header is taken when publish is called, for local subscribers as for remote ones', async () => {
    const registry = new MemoryRegistry();
    const pub = new HttpBroker({ registry, logger: silent });
    const other = new HttpBroker({ registry, logger: silent });
    try {
      const local = collector();
      const remote = collector();
      await pub.subscribe('h', local.handler);
      await other.subscribe('h', remote.handler);
      const header = { k: 'original' };
      const p = pub.publish('h', { header, body: bytes('x') });
      header.k = 'changed after publish()'; // the caller reuses its object (the memory broker copied it already)
      await p;
      await waitFor(() => local.got.length === 1 && remote.got.length === 1);
      assert.equal(remote.got[0]!.header.k, 'original');
      assert.equal(local.got[0]!.header.k, 'original', 'local subscriber saw a header the remote ones did not');
    } finally {
      await pub.close();
      await other.close();
      await registry.close();
    }
  });
});

describe('http broker: the cache age does not follow the wall clock', () => {
  it('a subscriber list is read again after lookupCacheMs even when the clock stepped back (watch not delivering)', async () => {
    const memory = new MemoryRegistry();
    // A registry whose watch never reports anything (an etcd watch stream that is down, a local
    // watcher whose polls fail): lookupCacheMs is then the only bound on staleness.
    const deaf: Registry = Object.assign(Object.create(memory) as Registry, {
      watch: () => ({ stop: () => undefined }),
    });
    const pub = new HttpBroker({ registry: deaf, lookupCacheMs: 100, logger: silent });
    const sub = new HttpBroker({ registry: memory, logger: silent });
    const realNow = Date.now.bind(Date);
    try {
      const first = collector();
      await sub.subscribe('c', first.handler);
      await pub.publish('c', msg('m0'));
      await waitFor(() => first.got.length === 1);
      // NTP steps the clock back by one hour.
      mock.method(Date, 'now', () => realNow() - 3_600_000);
      const later = collector();
      await sub.subscribe('c', later.handler);
      // The monotonic clock moves on by 4 x lookupCacheMs while the wall clock says otherwise.
      const realMono = performance.now.bind(performance);
      mock.method(performance, 'now', () => realMono() + 400);
      await pub.publish('c', msg('m1'));
      await waitFor(() => later.got.length >= 1);
      assert.equal(later.got.length, 1, 'the list read before the clock step is still used');
    } finally {
      mock.restoreAll();
      await pub.close();
      await sub.close();
      await memory.close();
    }
  });
});

describe('http broker: no cached subscriber list before the registry watch is ready', () => {
  it('reads the registry per message until the watch reports changes, then keeps the list', async () => {
    const memory = new MemoryRegistry();
    let reads = 0;
    let markReady!: () => void;
    const ready = new Promise<void>((r) => (markReady = r));
    // A watch that needs time to start (etcd's first read): a change in that window would not be reported.
    const slow: Registry = Object.assign(Object.create(memory) as Registry, {
      getService: (name: string) => {
        reads++;
        return memory.getService(name);
      },
      watch: (onEvent: Parameters<Registry['watch']>[0]) => ({ ...memory.watch(onEvent), ready }),
    });
    const pub = new HttpBroker({ registry: slow, logger: silent });
    const sub = new HttpBroker({ registry: memory, logger: silent });
    try {
      const c = collector();
      await sub.subscribe('r', c.handler);
      await pub.publish('r', msg('a'));
      await pub.publish('r', msg('b'));
      assert.equal(reads, 2, 'one registry read per message while the watch is not ready');
      markReady();
      await ready; // resumes after the broker's own reaction to ready, registered earlier
      await pub.publish('r', msg('c'));
      await pub.publish('r', msg('d'));
      await pub.publish('r', msg('e'));
      assert.equal(reads, 3, 'then one read, and the list is kept');
      await waitFor(() => c.got.length === 5);
    } finally {
      await pub.close();
      await sub.close();
      await memory.close();
    }
  });
});
