/**
 * Durable consumer names on the embedded broker (the SQLite outbox, broker.db): a message is
 * stored once per topic whatever the number of names (500 names opened and closed through a real
 * sidecar), names idle past --broker_inactive_threshold are removed, a topic has at most
 * --broker_max_consumers names, `mesh consumers list|rm TOPIC` as a CLI process, and a broker.db
 * of the first schema (one row per message and name) migrated when opened.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pino from 'pino';
import WebSocket from 'ws';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { http, runCli, tempDir, waitFor } from '../helpers.js';
import { refusedHandshake, startSidecar } from '../fixtures/sidecar-common.js';

const silent = pino({ level: 'silent' });

/** Counts of the outbox's tables, read as another process would (the file itself). */
function rows(dir: string, topic: string): { messages: number; inflight: number; consumers: number; bodyBytes: number } {
  const db = new Database(join(dir, 'broker.db'), { readonly: true });
  try {
    const one = (sql: string) => (db.prepare(sql).get(topic) as { n: number | null }).n ?? 0;
    return {
      messages: one('SELECT count(*) AS n FROM messages WHERE topic = ?'),
      inflight: one('SELECT count(*) AS n FROM inflight WHERE topic = ?'),
      consumers: one('SELECT count(*) AS n FROM consumers WHERE topic = ?'),
      bodyBytes: one('SELECT sum(length(body)) AS n FROM messages WHERE topic = ?'),
    };
  } finally {
    db.close();
  }
}

function openWs(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

function closeWs(ws: WebSocket): Promise<void> {
  return new Promise((resolve) => {
    ws.once('close', () => resolve());
    ws.close();
  });
}

describe('durable names on the embedded broker: storage per message, not per name', () => {
  it('500 names opened and closed through the sidecar, then 300 publishes of 1 KB: 300 messages stored, not 150,000', async () => {
    const home = tempDir('mesh-consumers-fan-');
    const sc = await startSidecar(home.path);
    try {
      const ws = sc.base.replace(/^http/, 'ws');
      for (let i = 0; i < 500; i += 50) {
        const batch = await Promise.all(Array.from({ length: 50 }, (_, j) => openWs(`${ws}/broker?topic=fan&ack=1&durable=n${i + j}`)));
        await Promise.all(batch.map(closeWs));
      }
      const payload = 'x'.repeat(1024);
      const started = process.hrtime.bigint();
      for (let i = 0; i < 300; i++) {
        const r = await http('POST', `${sc.base}/broker?topic=fan`, { headers: { 'content-type': 'text/plain' }, body: payload });
        assert.equal(r.status, 200, r.text);
      }
      const perPublishMs = Number(process.hrtime.bigint() - started) / 1e6 / 300;
      console.log(`# 500 stopped names, 300 publishes of 1 KB through the sidecar: ${perPublishMs.toFixed(2)} ms a publish`);
      assert.deepEqual(rows(home.path, 'fan'), { messages: 300, inflight: 0, consumers: 500, bodyBytes: 300 * 1024 });
      // each name still gets everything published after it was made
      const list = await runCli(['consumers', 'list', 'fan', `--registry_address=${home.path}`, '--output=json']);
      assert.equal(list.code, 0, list.stderr);
      const consumers = JSON.parse(list.stdout) as Array<{ name: string; pending: number }>;
      assert.equal(consumers.length, 500);
      assert.ok(consumers.every((c) => c.pending === 300), 'every name keeps the 300 messages');
    } finally {
      await sc.stop();
      home.cleanup();
    }
  });

  it('a message is deleted once every name of its topic has acknowledged it', async () => {
    const dir = tempDir('mesh-consumers-gc-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    try {
      const a: string[] = [];
      const b: string[] = [];
      const subA = await broker.subscribe('gc', (m) => void a.push(m.id!), { durable: 'a' });
      await (await broker.subscribe('gc', (m) => void b.push(m.id!), { durable: 'b' })).unsubscribe();
      for (let i = 0; i < 20; i++) await broker.publish('gc', { header: { 'Mesh-Id': `g-${i}` }, body: new Uint8Array(10) });
      await waitFor(() => a.length === 20, 10_000);
      // a has acknowledged all 20, b none: all kept for b
      await waitFor(() => rows(dir.path, 'gc').inflight === 0, 10_000);
      assert.equal(rows(dir.path, 'gc').messages, 20);
      await broker.subscribe('gc', (m) => void b.push(m.id!), { durable: 'b' });
      await waitFor(() => b.length === 20 && rows(dir.path, 'gc').messages === 0, 10_000);
      assert.deepEqual(rows(dir.path, 'gc'), { messages: 0, inflight: 0, consumers: 2, bodyBytes: 0 });
      await subA.unsubscribe();
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('durable names: the inactive threshold', () => {
  it('a name no subscriber used for the threshold is removed with the messages kept for it; a running one stays', async () => {
    const dir = tempDir('mesh-consumers-idle-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, durable: { inactiveThresholdMs: 1000 }, logger: silent });
    try {
      const got: string[] = [];
      await broker.subscribe('idle', (m) => void got.push(m.id!), { durable: 'running' });
      await (await broker.subscribe('idle', () => undefined, { durable: 'stopped' })).unsubscribe();
      for (let i = 0; i < 5; i++) await broker.publish('idle', { header: { 'Mesh-Id': `i-${i}` }, body: new Uint8Array(10) });
      await waitFor(() => got.length === 5, 10_000);
      assert.equal(rows(dir.path, 'idle').messages, 5);
      // the stopped name goes, and the messages only it still needed with it
      await waitFor(async () => (await broker.listConsumers('idle')).map((c) => c.name).join() === 'running', 10_000);
      await waitFor(() => rows(dir.path, 'idle').messages === 0, 10_000);
      // the running name (made before the stopped one) is still there, and after one more
      // threshold too (a name stopped now goes by then), and gets what comes next
      await (await broker.subscribe('idle', () => undefined, { durable: 'later' })).unsubscribe();
      await waitFor(async () => (await broker.listConsumers('idle')).map((c) => c.name).join() === 'running', 10_000);
      await broker.publish('idle', { header: { 'Mesh-Id': 'i-5' }, body: new Uint8Array(10) });
      await waitFor(() => got.length === 6, 10_000);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });

  it('refuses a threshold under 1 s (0: never)', () => {
    const registry = new MemoryRegistry();
    assert.throws(() => new HttpBroker({ registry, durable: { inactiveThresholdMs: 10 }, logger: silent }), /consumer inactive threshold: must be 0 \(never\) or from 1s/);
    assert.throws(() => new HttpBroker({ registry, durable: { maxConsumers: 0 }, logger: silent }), /max consumers: must be an integer from 1 to 100000/);
  });
});

describe('durable names: the cap per topic', () => {
  it('a new name over --broker_max_consumers is refused (429 at the sidecar) with what to do; known names and other topics still subscribe', async () => {
    const home = tempDir('mesh-consumers-cap-');
    const sc = await startSidecar(home.path, ['--broker_max_consumers=2']);
    try {
      const ws = sc.base.replace(/^http/, 'ws');
      const a = await openWs(`${ws}/broker?topic=capped&ack=1&durable=a`);
      const b = await openWs(`${ws}/broker?topic=capped&ack=1&durable=b`);
      const refused = await refusedHandshake(`${ws}/broker?topic=capped&ack=1&durable=c`);
      assert.equal(refused.status, 429);
      assert.equal(
        refused.body,
        '{"id":"go.mesh.sidecar","code":429,"detail":"subscribe to topic capped failed: topic \\"capped\\" has 2 durable consumer names, the most allowed (--broker_max_consumers): remove unused ones with mesh consumers rm capped NAME","status":"Too Many Requests"}',
      );
      // a name the topic has, and a new name on another topic, are fine
      const again = await openWs(`${ws}/broker?topic=capped&ack=1&durable=a`);
      const other = await openWs(`${ws}/broker?topic=other&ack=1&durable=c`);
      await Promise.all([a, b, again, other].map(closeWs));
      // the sidecar has let go of every subscription (a running one would register its name again)
      await waitFor(async () => /subscribers_active: 0\b/.test((await http('GET', `${sc.admin}/stats?filter=sidecar.broker.subscribers_active`)).text), 10_000);
      const rm = await runCli(['consumers', 'rm', 'capped', 'b', `--registry_address=${home.path}`]);
      assert.equal(rm.code, 0, rm.stderr);
      const c = await openWs(`${ws}/broker?topic=capped&ack=1&durable=c`);
      c.close();
    } finally {
      await sc.stop();
      home.cleanup();
    }
  });
});

describe('mesh consumers list|rm (embedded broker)', () => {
  it('lists the names of a topic with their pending messages and last activity, and removes one', async () => {
    const dir = tempDir('mesh-consumers-cli-');
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    const reg = `--registry_address=${dir.path}`;
    try {
      await (await broker.subscribe('cli.c', () => undefined, { durable: 'billing' })).unsubscribe();
      const got: string[] = [];
      const audit = await broker.subscribe('cli.c', (m) => void got.push(m.id!), { durable: 'audit' });
      for (let i = 0; i < 3; i++) await broker.publish('cli.c', { header: { 'Mesh-Id': `c-${i}` }, body: new Uint8Array(1) });
      await waitFor(() => got.length === 3 && rows(dir.path, 'cli.c').inflight === 0, 10_000);
      await audit.unsubscribe();
      const db = new Database(join(dir.path, 'broker.db'), { readonly: true });
      const active = Object.fromEntries(
        (db.prepare("SELECT name, active_at FROM consumers WHERE topic = 'cli.c'").all() as Array<{ name: string; active_at: number }>).map((c) => [c.name, new Date(c.active_at).toISOString()]),
      );
      db.close();
      const list = await runCli(['consumers', 'list', 'cli.c', reg]);
      assert.equal(list.stderr, '');
      assert.equal(list.code, 0);
      assert.equal(list.stdout, `name\tpending\tlast_active\naudit\t0\t${active.audit}\nbilling\t3\t${active.billing}\n`);
      const json = await runCli(['consumers', 'list', 'cli.c', reg, '--output=json']);
      assert.equal(json.stdout, `[{"name":"audit","pending":0,"lastActive":"${active.audit}"},{"name":"billing","pending":3,"lastActive":"${active.billing}"}]\n`);
      const rm = await runCli(['consumers', 'rm', 'cli.c', 'billing', reg]);
      assert.equal(rm.stderr, '');
      assert.equal(rm.code, 0);
      assert.equal(rm.stdout, 'removed billing\n');
      // billing's 3 messages were kept for it alone: gone with it
      assert.deepEqual(rows(dir.path, 'cli.c'), { messages: 0, inflight: 0, consumers: 1, bodyBytes: 0 });
      assert.equal((await runCli(['consumers', 'list', 'cli.c', reg])).stdout, `name\tpending\tlast_active\naudit\t0\t${active.audit}\n`);
      const missing = await runCli(['consumers', 'rm', 'cli.c', 'billing', reg]);
      assert.equal(missing.code, 1);
      assert.equal(missing.stderr, 'mesh: consumer billing of topic cli.c: not found (404 Not Found)\n');
      const usage = await runCli(['consumers', 'rm', 'cli.c', reg]);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /usage: mesh consumers list TOPIC \| mesh consumers rm TOPIC NAME/);
      const memory = await runCli(['consumers', 'list', 'cli.c', '--broker=memory', reg]);
      assert.equal(memory.code, 1);
      assert.match(memory.stderr, /broker memory: has no durable consumers/);
      const empty = await runCli(['consumers', 'list', 'nobody.here', reg]);
      assert.equal(empty.stdout, 'name\tpending\tlast_active\n');
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});

describe('a broker.db of the first schema (one row per message and name)', () => {
  it('is migrated when opened: one row per message, each name keeps its messages and delivery counts, dead letters kept', async () => {
    const dir = tempDir('mesh-consumers-migrate-');
    const old = new Database(join(dir.path, 'broker.db'));
    // the first schema, as earlier versions wrote it
    old.exec(`
      CREATE TABLE consumers (topic TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (topic, name));
      CREATE TABLE messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, consumer TEXT NOT NULL, id TEXT NOT NULL,
        header TEXT NOT NULL, body BLOB NOT NULL, deliveries INTEGER NOT NULL DEFAULT 0,
        visible_at INTEGER NOT NULL, published_at INTEGER NOT NULL);
      CREATE INDEX messages_due ON messages (topic, consumer, visible_at);
      CREATE TABLE backlog (topic TEXT NOT NULL, consumer TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (topic, consumer));
      CREATE TRIGGER backlog_insert AFTER INSERT ON messages BEGIN
        INSERT INTO backlog (topic, consumer, bytes) VALUES (NEW.topic, NEW.consumer, length(CAST(NEW.header AS BLOB)) + length(NEW.body))
        ON CONFLICT (topic, consumer) DO UPDATE SET bytes = bytes + excluded.bytes;
      END;
      CREATE TRIGGER backlog_delete AFTER DELETE ON messages BEGIN
        UPDATE backlog SET bytes = bytes - (length(CAST(OLD.header AS BLOB)) + length(OLD.body)) WHERE topic = OLD.topic AND consumer = OLD.consumer;
      END;
      INSERT INTO consumers VALUES ('old', 'keep'), ('old', 'other'), ('old.dlq', 'dlq');
    `);
    const now = Date.now();
    const insert = old.prepare('INSERT INTO messages (topic, consumer, id, header, body, deliveries, visible_at, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
    for (let i = 0; i < 4; i++) {
      const id = `o-${i}`;
      const header = JSON.stringify({ 'Mesh-Id': id });
      insert.run('old', 'keep', id, header, Buffer.from(`m${i}`), 0, now, now);
      // other had already tried o-0 twice (due again now); it acknowledged o-3
      if (i !== 3) insert.run('old', 'other', id, header, Buffer.from(`m${i}`), i === 0 ? 2 : 0, now, now);
    }
    insert.run('old.dlq', 'dlq', 'd-1', JSON.stringify({ 'Mesh-Id': 'd-1', 'Mesh-Dlq-Consumer': 'keep' }), Buffer.from('dead'), 0, now, now);
    old.close();

    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    try {
      assert.deepEqual((await broker.listConsumers('old')).map((c) => [c.name, c.pending]), [['keep', 4], ['other', 3]]);
      assert.deepEqual(rows(dir.path, 'old'), { messages: 4, inflight: 7, consumers: 2, bodyBytes: 8 });
      const db = new Database(join(dir.path, 'broker.db'), { readonly: true });
      assert.equal(db.pragma('user_version', { simple: true }), 2);
      assert.equal(db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name IN ('backlog', 'messages_v1', 'consumers_v1')").get().n, 0);
      db.close();
      assert.deepEqual((await broker.listDeadLetters('old', 10)).map((m) => m.id), ['d-1']);
      const keep: string[] = [];
      const other: Array<[string, number]> = [];
      await broker.subscribe('old', (m) => void keep.push(m.id!), { durable: 'keep' });
      await broker.subscribe('old', (m) => void other.push([m.id!, m.deliveryCount!]), { durable: 'other' });
      await broker.publish('old', { header: { 'Mesh-Id': 'o-4' }, body: new Uint8Array(Buffer.from('m4')) });
      await waitFor(() => keep.length === 5 && other.length === 4, 10_000);
      assert.deepEqual(keep.sort(), ['o-0', 'o-1', 'o-2', 'o-3', 'o-4']);
      assert.deepEqual(other.sort(), [['o-0', 3], ['o-1', 1], ['o-2', 1], ['o-4', 1]]);
      await waitFor(() => rows(dir.path, 'old').messages === 0, 10_000);
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });

  it('refuses a file of a newer schema, saying what to do', async () => {
    const dir = tempDir('mesh-consumers-newer-');
    const db = new Database(join(dir.path, 'broker.db'));
    db.pragma('user_version = 9');
    db.close();
    const registry = new LocalRegistry(dir.path);
    const broker = new HttpBroker({ registry, durableDirectory: dir.path, logger: silent });
    try {
      await assert.rejects(
        broker.subscribe('t', () => undefined, { durable: 'x' }),
        new RegExp(`cannot open the durable outbox ${join(dir.path, 'broker.db').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: the file has schema version 9, newer than this mesh \\(2\\): upgrade mesh, or move the file away to start empty`),
      );
    } finally {
      await broker.close();
      await registry.close();
      dir.cleanup();
    }
  });
});
