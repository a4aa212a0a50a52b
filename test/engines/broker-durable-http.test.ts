/**
 * Durable subscriptions of the http broker (the embedded default): the durable contract against
 * two brokers over one local registry directory (as two processes would have), their outbox in
 * broker.db beside the registry's database.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { createBroker } from '../../src/engines/broker/create.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { durableContract } from '../broker-contract.js';
import { statName } from '../../src/engines/broker/durable.js';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { OUTBOX_FILE } from '../../src/engines/broker/http/outbox.js';
import { BrokerUnavailableError } from '../../src/engines/broker/broker.js';

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
      await assert.rejects(broker.subscribe('t', () => undefined, { durable: 'x' }), /durable subscriptions and dead letters need the local registry/);
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

describe('durable stats', () => {
  it('counts published, delivered, acked, redelivered, dead_lettered and pending per topic and consumer', async () => {
    const { StatsStore } = await import('../../src/base/stats/store.js');
    const stats = new StatsStore();
    const dir = tempDir('mesh-durable-stats-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, stats, logger: silent });
    const value = (name: string) => stats.counter(name).value;
    try {
      let attempts = 0;
      await broker.subscribe('st', () => {
        if (++attempts <= 2) throw new Error('no');
      }, { durable: 'counted', maxDeliver: 2 });
      await broker.subscribe('st', () => undefined, { durable: 'fine' });
      await broker.publish('st', { header: {}, body: new Uint8Array(1) }); // fails twice for counted: dead-lettered
      await waitFor(() => value('broker.consumer.counted.dead_lettered') === 1 && value('broker.consumer.fine.acked') === 1, 10_000);
      await broker.publish('st', { header: {}, body: new Uint8Array(1) }); // acked by both
      await waitFor(() => value('broker.consumer.counted.acked') === 1 && value('broker.consumer.fine.acked') === 2, 10_000);
      assert.equal(value('broker.topic.st.published'), 2);
      assert.equal(value('broker.consumer.counted.delivered'), 3);
      assert.equal(value('broker.consumer.counted.redelivered'), 1);
      assert.equal(value('broker.topic.st.dead_lettered'), 1);
      // a topic with a dot (or anything but [A-Za-z0-9_-]) is cut and hashed: one stats segment
      assert.equal(value(`broker.topic.${statName('st.dlq')}.published`), 1);
      assert.match(statName('st.dlq'), /^st_dlq_[0-9a-f]{8}$/);
      assert.equal(value('broker.consumer.fine.redelivered'), 0);
      await broker.subscribe('odd/topic', () => undefined, { durable: 'odd' });
      await broker.publish('odd/topic', { header: {}, body: new Uint8Array(1) });
      await waitFor(() => value('broker.consumer.odd.acked') === 1, 10_000);
      assert.equal(value(`broker.topic.${statName('odd/topic')}.published`), 1);
      assert.ok(statName('x'.repeat(500)).length <= 41);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('the pending gauge (embedded broker)', () => {
  it('rises while the durable consumer is stopped and publishes accumulate, falls to 0 once they are delivered and acked', async () => {
    const { StatsStore } = await import('../../src/base/stats/store.js');
    const stats = new StatsStore();
    const dir = tempDir('mesh-durable-pending-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, stats, logger: silent });
    const pending = () => stats.gauge('broker.consumer.backlog.pending').value;
    const got = new Set<string>();
    try {
      const sub = await broker.subscribe('pend', (m) => void got.add(m.id!), { durable: 'backlog' });
      await sub.unsubscribe(); // the consumer stays registered: messages are kept for it
      for (let i = 0; i < 30; i++) await broker.publish('pend', { header: { 'Mesh-Id': `p-${i}` }, body: new Uint8Array(1) });
      await waitFor(() => pending() === 30, 10_000);
      assert.equal(got.size, 0);
      await broker.subscribe('pend', (m) => void got.add(m.id!), { durable: 'backlog' });
      await waitFor(() => got.size === 30, 10_000);
      await waitFor(() => pending() === 0, 10_000);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('--broker_stream_max_bytes on the embedded outbox', () => {
  it('drops the oldest stored messages of a consumer over the byte budget, counts them, keeps the newest', async () => {
    const { StatsStore } = await import('../../src/base/stats/store.js');
    const stats = new StatsStore();
    const dir = tempDir('mesh-durable-bytes-');
    const registry = new LocalRegistry(dir.path);
    // a row is its header as JSON ({"Mesh-Id":"b-NN"}: 18 bytes) and body (100): 118 bytes; 8 fit in 1,000
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, stats, durable: { maxBytes: 1000 }, logger: silent });
    const got: string[] = [];
    try {
      const sub = await broker.subscribe('capped', (m) => void got.push(m.id!), { durable: 'small' });
      await sub.unsubscribe();
      for (let i = 0; i < 20; i++) await broker.publish('capped', { header: { 'Mesh-Id': `b-${String(i).padStart(2, '0')}` }, body: new Uint8Array(100) });
      assert.equal(stats.counter('broker.topic.capped.dropped').value, 12);
      assert.equal(stats.counter('broker.topic.capped.published').value, 20);
      await waitFor(() => stats.gauge('broker.consumer.small.pending').value === 8, 10_000);
      // one message over the whole budget is kept (the newest is never dropped): the 8 before it go
      await broker.publish('capped', { header: { 'Mesh-Id': 'big' }, body: new Uint8Array(2000) });
      assert.equal(stats.counter('broker.topic.capped.dropped').value, 20);
      await broker.publish('capped', { header: { 'Mesh-Id': 'b-20' }, body: new Uint8Array(100) }); // drops big
      assert.equal(stats.counter('broker.topic.capped.dropped').value, 21);
      await broker.subscribe('capped', (m) => void got.push(m.id!), { durable: 'small' });
      await waitFor(() => got.length === 1 && stats.gauge('broker.consumer.small.pending').value === 0, 10_000);
      assert.deepEqual(got, ['b-20']);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });

  it('counts the bytes of a file whose byte counts were lost, and keeps counting across brokers on the file', async () => {
    const { StatsStore } = await import('../../src/base/stats/store.js');
    const Database = (await import('better-sqlite3')).default;
    const dir = tempDir('mesh-durable-bytes-old-');
    const registry = new LocalRegistry(dir.path);
    try {
      const a = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
      await (await a.subscribe('old', () => undefined, { durable: 'keep' })).unsubscribe();
      for (let i = 0; i < 10; i++) await a.publish('old', { header: { 'Mesh-Id': `o-${i}` }, body: new Uint8Array(100) });
      await a.close();
      const db = new Database(`${dir.path}/broker.db`);
      db.exec('DELETE FROM topic_bytes');
      db.close();
      const stats = new StatsStore();
      // {"Mesh-Id":"o-N"}: 17 + 100 bytes a row, 1,170 stored; a budget of 600 keeps 5 after the next publish
      const b = new HttpBroker({ registry, durableDirectory: dir.path, stats, durable: { maxBytes: 600 }, logger: silent });
      await b.publish('old', { header: { 'Mesh-Id': 'o-10' }, body: new Uint8Array(100) });
      assert.equal(stats.counter('broker.topic.old.dropped').value, 6);
      const got: string[] = [];
      await b.subscribe('old', (m) => void got.push(m.id!), { durable: 'keep' });
      await waitFor(() => got.length === 5 && stats.gauge('broker.consumer.keep.pending').value === 0, 10_000);
      assert.deepEqual(got.sort(), ['o-10', 'o-6', 'o-7', 'o-8', 'o-9']);
      await b.close();
    } finally {
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('mesh dlq list|replay (embedded broker)', () => {
  it('lists the dead letters of a topic and replays them', async () => {
    const dir = tempDir('mesh-dlq-cli-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    const reg = `--registry_address=${dir.path}`;
    try {
      let failing = true;
      const done: string[] = [];
      await broker.subscribe('cli.dlq', (m) => {
        if (failing) throw new Error('refused\nwith a newline');
        done.push(Buffer.from(m.body).toString());
      }, { durable: 'worker', maxDeliver: 1 });
      await broker.publish('cli.dlq', { header: { 'Mesh-Id': 'm-1' }, body: new Uint8Array(Buffer.from('payload')) });
      await waitFor(async () => (await broker.listDeadLetters('cli.dlq', 10)).length === 1, 10_000);
      const list = await runCli(['dlq', 'list', 'cli.dlq', reg]);
      assert.equal(list.code, 0, list.stderr);
      assert.equal(list.stdout, 'id\tconsumer\tdeliveries\terror\tbody\nm-1\tworker\t1\trefused with a newline\tpayload\n');
      const json = await runCli(['dlq', 'list', 'cli.dlq', reg, '--output=json']);
      const parsed = JSON.parse(json.stdout) as Array<{ id: string; body: string }>;
      assert.deepEqual(parsed.map((d) => [d.id, Buffer.from(d.body, 'base64').toString()]), [['m-1', 'payload']]);
      failing = false;
      const replay = await runCli(['dlq', 'replay', 'cli.dlq', reg]);
      assert.equal(replay.code, 0, replay.stderr);
      assert.equal(replay.stdout, 'replayed 1\n');
      await waitFor(() => done.length === 1, 10_000);
      assert.deepEqual(done, ['payload']);
      assert.equal((await runCli(['dlq', 'list', 'cli.dlq', reg])).stdout, 'id\tconsumer\tdeliveries\terror\tbody\n');
      const usage = await runCli(['dlq', 'purge', 'cli.dlq', reg]);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /usage: mesh dlq list\|replay TOPIC/);
      const memory = await runCli(['dlq', 'list', 'cli.dlq', '--broker=memory', reg]);
      assert.equal(memory.code, 1);
      assert.match(memory.stderr, /broker memory: has no dead letters/);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('Mesh.subscribe with durable options (the framework on the embedded default)', () => {
  it('a handler that throws is a nack: the event comes again with deliveryCount 2; an undecodable body ends in the dead-letter topic', async () => {
    const { Mesh } = await import('../../src/index.js');
    const dir = tempDir('mesh-durable-mesh-');
    const mesh = new Mesh({ registry: 'local', registryAddress: dir.path, broker: 'http', logLevel: 'off', drainDelay: 0, brokerMaxDeliver: 2 });
    try {
      const seen: Array<{ n: number; count: number | undefined }> = [];
      await mesh.subscribe<{ n: number }>(
        'jobs',
        (event, message) => {
          seen.push({ n: event.n, count: message.deliveryCount });
          if (seen.length === 1) throw new Error('first attempt fails');
        },
        { durable: 'workers', ackWaitMs: 5_000 },
      );
      const dead: string[] = [];
      // The raw message: the dead letter keeps its content-type, so the codec could not decode it either.
      await mesh.broker.subscribe('jobs.dlq', (message) => void dead.push(Buffer.from(message.body).toString()));
      await mesh.publish('jobs', { n: 7 });
      await waitFor(() => seen.length === 2, 10_000);
      assert.deepEqual(seen, [{ n: 7, count: 1 }, { n: 7, count: 2 }]);
      // Not JSON, though it says it is: never decodable, so after brokerMaxDeliver attempts it is a dead letter.
      await mesh.publish('jobs', Buffer.from('{not json'), { header: { 'content-type': 'application/json' } });
      await waitFor(() => dead.length === 1, 15_000);
      assert.deepEqual(dead, ['{not json']);
      assert.equal(seen.length, 2);
    } finally {
      await mesh.close();
      dir.cleanup();
    }
  });
});

describe('a broker.db-shm that refuses writes (chattr +i)', () => {
  /** Making writes fail as root: file modes do not stop root, the immutable flag does. */
  const chattr = (flag: '+i' | '-i', path: string): boolean => spawnSync('chattr', [flag, path], { stdio: 'pipe' }).status === 0;

  it('publishes are refused with a clear error and the process lives (no SIGBUS); one error line; all resumes when it takes writes', async (t) => {
    const dir = tempDir('mesh-durable-shm-');
    const shm = join(dir.path, `${OUTBOX_FILE}-shm`);
    const lines: Array<{ level: number; msg: string; error?: string }> = [];
    const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _e, cb) => (lines.push(JSON.parse(chunk.toString())), cb()) }));
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger });
    const got: string[] = [];
    try {
      await broker.subscribe('frozen', (m) => void got.push(new TextDecoder().decode(m.body)), { durable: 'd' });
      await broker.publish('frozen', { header: {}, body: new TextEncoder().encode('one') });
      await waitFor(() => got.length === 1);
      assert.ok(existsSync(shm), 'SQLite made its -shm file');
      if (!chattr('+i', shm)) {
        console.warn('SKIP: chattr +i is not available here (not root, or the file system has no immutable flag): the broker.db-shm case is NOT TESTED');
        t.skip('chattr +i is not available here: NOT TESTED');
        return;
      }
      // Before the fix, this write went through SQLite's mapping of the -shm file: SIGBUS, the process gone.
      await assert.rejects(broker.publish('frozen', { header: {}, body: new TextEncoder().encode('two') }), (err: Error) => {
        assert.ok(err instanceof BrokerUnavailableError, String(err));
        assert.match(err.message, /^http broker: durable outbox unavailable: .*broker\.db-shm cannot be written \(EPERM\)/);
        return true;
      });
      await assert.rejects(broker.publish('frozen', { header: {}, body: new TextEncoder().encode('three') }), BrokerUnavailableError);
      const errors = lines.filter((l) => l.level >= 50);
      assert.equal(errors.length, 1, JSON.stringify(lines));
      assert.equal(errors[0]!.msg, 'http broker: the durable outbox cannot be used until its -shm file takes writes again');
      // Opening the outbox meanwhile is refused clearly, before SQLite maps the file.
      const other = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
      try {
        await assert.rejects(other.publish('frozen', { header: {}, body: new Uint8Array(1) }), /cannot open the durable outbox .*broker\.db: .*broker\.db-shm cannot be written \(EPERM\)/);
      } finally {
        await other.close();
      }
      assert.ok(chattr('-i', shm));
      await broker.publish('frozen', { header: {}, body: new TextEncoder().encode('four') });
      await waitFor(() => got.length === 2);
      assert.deepEqual(got, ['one', 'four']);
      assert.ok(lines.some((l) => l.msg === 'http broker: the durable outbox takes writes again'));
    } finally {
      chattr('-i', shm);
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});
