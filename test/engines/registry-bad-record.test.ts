/**
 * A record that breaks the registry rules, written straight into the local registry's SQLite file
 * by another program, next to a healthy node of the same service: a running gateway (a registry
 * watcher) keeps answering 200 through the healthy node and does not crash, a gateway started
 * afterwards answers 200 too, the skip is counted (registry.invalid_record) and logged, and the
 * CLI's listing prints no forged line.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { createRegistry } from '../../src/engines/registry/create.js';
import { LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { runCli, tempDir, waitFor } from '../helpers.js';
import { http, registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

/** Writes one node row (and its service row) as a program other than mesh would, logging the change so watchers look. */
function writeRow(dir: string, service: string, version: string, node: { id: string; address: string; port: number }): void {
  const db = new Database(join(dir, LOCAL_DB_FILE));
  try {
    db.transaction(() => {
      db.prepare(`INSERT OR IGNORE INTO services (name, version, metadata, endpoints) VALUES (?, ?, '{}', '[]')`).run(service, version);
      db.prepare(`INSERT OR REPLACE INTO nodes (service, version, id, address, port, metadata, expires_at) VALUES (?, ?, ?, ?, ?, '{}', NULL)`).run(
        service,
        version,
        node.id,
        node.address,
        node.port,
      );
      const rev = (db.prepare(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`).get() as { value: number }).value;
      db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, ?)`).run(rev, service);
    })();
  } finally {
    db.close();
  }
}

/** A call through the gateway's /rpc to the plain app. */
const rpc = (url: string) =>
  http('POST', `${url}/rpc`, { headers: { 'content-type': 'application/json' }, body: '{"service":"go.mesh.api.plain","method":"Echo.Call","request":{}}' });

async function invalidRecords(admin: string): Promise<number> {
  const text = (await http('GET', `${admin}/stats?filter=^registry\\.invalid_record$`)).text;
  const m = /^registry\.invalid_record: (\d+)$/m.exec(text);
  return m ? Number(m[1]) : 0;
}

describe('a bad stored registry record next to a healthy node', () => {
  const dir = tempDir('mesh-bad-record-');
  let registry: Registry;
  let plain: PlainApp;
  let early: GatewayProcess;
  let late: GatewayProcess | undefined;

  before(async () => {
    registry = createRegistry('local', dir.path);
    plain = await startPlainApp('plain');
    await registerPlain(registry, 'go.mesh.api.plain', plain.port);
    early = await startGatewayProcess(dir.path);
  });

  after(async () => {
    await Promise.all([early?.stop(), late?.stop()]);
    await plain?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('a running gateway keeps answering 200 and does not crash; a gateway started afterwards answers 200', async () => {
    assert.equal((await rpc(early.url)).status, 200);
    // The registration that used to crash every watcher (TypeError: Invalid URL), stored directly.
    writeRow(dir.path, 'go.mesh.api.plain', 'v1', { id: 'x', address: '127.0.0.1 x', port: 1 });
    writeRow(dir.path, 'forged\ngo.mesh.api.evil 127.0.0.1', 'v1', { id: 'y', address: '127.0.0.1', port: 2 });
    // The running gateway's watch has read the change (and skipped the bad rows).
    await waitFor(async () => ((await invalidRecords(early.admin)) >= 2 ? true : undefined), 10_000);
    for (let i = 0; i < 5; i++) {
      const r = await rpc(early.url);
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(early.proc.child.exitCode, null, 'the gateway is still running');
    assert.match(early.proc.output(), /invalid registry record skipped/);
    const clusters = (await http('GET', `${early.admin}/clusters`)).text;
    assert.doesNotMatch(clusters, /127\.0\.0\.1 x/);
    assert.match(clusters, new RegExp(`^go\\.mesh\\.api\\.plain::127\\.0\\.0\\.1:${plain.port}::health_flags::healthy$`, 'm'));

    late = await startGatewayProcess(dir.path);
    const r = await rpc(late.url);
    assert.equal(r.status, 200, r.text);
    assert.ok((await invalidRecords(late.admin)) >= 1);
  });

  it('the CLI lists and shows only what passes the rules: no forged line', async () => {
    const env = { MESH_REGISTRY_ADDRESS: dir.path };
    const list = await runCli(['list', 'services'], env);
    assert.equal(list.code, 0, list.stderr);
    assert.equal(list.stdout, 'go.mesh.api.plain\n');
    const get = await runCli(['get', 'service', 'go.mesh.api.plain', '--output=json'], env);
    assert.deepEqual((JSON.parse(get.stdout) as { nodes: Array<{ id: string }> }).nodes.map((n) => n.id), [`go.mesh.api.plain-${plain.port}`]);
  });
});

describe('an oversize node written into the store: skipped by a watcher, logged once, counted every time', () => {
  it('one node of 64 × 4,000 characters of metadata: the watch carries only the good nodes; one warning however often the service changes', async () => {
    const { Writable } = await import('node:stream');
    const pino = (await import('pino')).default;
    const { StatsStore } = await import('../../src/base/stats/store.js');
    const { LocalRegistry } = await import('../../src/engines/registry/local/index.js');
    const { invalidRecordSink, INVALID_RECORD_STAT } = await import('../../src/engines/registry/validate.js');
    const { collect, node, svc } = await import('../registry-contract.js');
    const dir = tempDir('mesh-oversize-');
    const lines: Array<{ msg: string; problem?: string }> = [];
    const log = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _e, cb) => (lines.push(JSON.parse(chunk.toString())), cb()) }));
    const stats = new StatsStore();
    const registry = new LocalRegistry(dir.path, { onInvalidRecord: invalidRecordSink({ stats, log }) });
    const w = collect(registry, 'shop');
    try {
      await registry.register(svc('shop', '1', [node('good-0', 7000)]));
      const heavy = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'x'.repeat(4000)]));
      const db = new Database(join(dir.path, LOCAL_DB_FILE));
      try {
        db.transaction(() => {
          db.prepare(`INSERT OR REPLACE INTO nodes (service, version, id, address, port, metadata, expires_at) VALUES ('shop', '1', 'heavy', '127.0.0.1', 1, ?, NULL)`).run(JSON.stringify(heavy));
          const rev = (db.prepare(`UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value`).get() as { value: number }).value;
          db.prepare(`INSERT OR IGNORE INTO changes (revision, service) VALUES (?, 'shop')`).run(rev);
        })();
      } finally {
        db.close();
      }
      for (let i = 1; i <= 3; i++) {
        await registry.register(svc('shop', '1', [node(`good-${i}`, 7000 + i)]));
        await w.next((e) => e.service.nodes.some((n) => n.id === `good-${i}`));
      }
      assert.ok(w.events.every((e) => e.service.nodes.every((n) => n.id !== 'heavy')), 'no event carries the heavy node');
      assert.deepEqual((await registry.getService('shop'))[0]!.nodes.map((n) => n.id), ['good-0', 'good-1', 'good-2', 'good-3']);
      const warnings = lines.filter((l) => l.msg === 'invalid registry record skipped');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.equal(warnings[0]!.problem, 'node "heavy".Metadata: 256182 bytes of keys and values, more than the limit of 16384');
      assert.ok(stats.counter(INVALID_RECORD_STAT).value >= 3, 'counted on every read');
    } finally {
      w.watcher.stop();
      await registry.close();
      dir.cleanup();
    }
  });
});
