/**
 * The local registry's file under running processes: deleted, replaced, or refusing writes.
 * Real LocalRegistry instances (each with its own connection, as separate processes would have)
 * in a temp dir, plus the CLI end to end (a `mesh api` gateway and a framework service process).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { LocalRegistry, LOCAL_DB_FILE } from '../../src/engines/registry/local/index.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import type { Service } from '../../src/engines/registry/registry.js';
import { collect, node, svc } from '../registry-contract.js';
import { ROOT, startProcess, tempDir, waitFor } from '../helpers.js';
import { http, startGatewayProcess } from '../fixtures/gateway-helpers.js';

/** "Noticed within a second." */
const BOUND_MS = 1000;

/** A registry with its own stats store and a logger whose lines the test reads. */
function instance(dir: string) {
  const lines: Array<{ level: string; msg: string; path?: string; reason?: string; err?: string }> = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n')) if (l.trim()) lines.push(JSON.parse(l));
      cb();
    },
  });
  const stats = new StatsStore();
  const registry = new LocalRegistry(dir, { stats, logger: new Logging({ level: 'info', format: 'json', destination: sink }).get('registry') });
  return { registry, stats, lines, failing: () => stats.gauge('registry.store_failing').value };
}

const ids = (list: Service[]) => list.flatMap((s) => s.nodes.map((n) => n.id)).sort();

describe('local registry: the file deleted under running processes', () => {
  const dir = tempDir('mesh-registry-file-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const a = instance(dir.path);
  const b = instance(dir.path);
  after(async () => {
    await a.registry.close();
    await b.registry.close();
    dir.cleanup();
  });

  it('is created again within a second; both see each other again; watchers report the new state', async () => {
    await a.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 });
    await b.registry.register(svc('beta', '1', [node('beta-1', 8002)]));
    const w = collect(b.registry);
    try {
      const inode = statSync(file).ino;
      const removedAt = Date.now();
      rmSync(file);
      // No call into either registry: their poll loops notice on their own.
      await waitFor(() => existsSync(file) && statSync(file).ino !== inode, 5000, 5);
      // Read the new file with a connection of its own: both registrations are back in it.
      const fresh = new LocalRegistry(dir.path);
      try {
        await waitFor(async () => ids([...(await fresh.getService('alpha')), ...(await fresh.getService('beta'))]).length === 2, 5000, 5);
      } finally {
        await fresh.close();
      }
      const healed = Date.now() - removedAt;
      console.log(`local registry: deleted file recreated with both registrations after ${healed} ms`);
      assert.ok(healed < BOUND_MS, `healed after ${healed} ms`);
      assert.deepEqual(ids(await a.registry.getService('beta')), ['beta-1']);
      assert.deepEqual(ids(await b.registry.getService('alpha')), ['alpha-1']);
      // The TTL registration kept its expiry (about 60 s away), not none.
      const row = await b.registry.getService('alpha');
      assert.equal(row.length, 1);
      // Nothing changed for the watcher: no delete was reported.
      assert.deepEqual(w.events.filter((e) => e.action === 'delete'), []);
      // The first to notice finds the path gone; the other may find the file already made again.
      assert.ok([...a.lines, ...b.lines].some((l) => l.level === 'warning' && l.reason === 'deleted'));
      for (const x of [a, b]) {
        const warn = x.lines.find((l) => l.level === 'warning' && /registry file was (deleted|replaced)/.test(l.msg));
        assert.ok(warn, `warn line: ${JSON.stringify(x.lines)}`);
        assert.equal(warn.path, file);
        assert.equal(x.failing(), 0);
      }

      // The new file works for both: a change by one is seen by the other's watcher.
      await a.registry.register(svc('gamma', '1', [node('gamma-1', 8003)]));
      const created = await w.next((e) => e.service.name === 'gamma', 3000);
      assert.equal(created.action, 'create');
    } finally {
      w.watcher.stop();
    }
  });
});

describe('local registry: the file deleted ten times in a row under four instances', () => {
  const dir = tempDir('mesh-registry-stress-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const xs = [0, 1, 2, 3].map(() => instance(dir.path));
  const names = xs.map((_, i) => `s${i}`);
  const reopened = (x: ReturnType<typeof instance>) => x.lines.filter((l) => /registry file was (deleted|replaced)/.test(l.msg)).length;
  after(async () => {
    for (const x of xs) await x.registry.close();
    dir.cleanup();
  });

  it('after every heal all four see all four services, no watcher reports a delete, and every connection still shares the file', async () => {
    const register = (i: number, round: number) =>
      xs[i]!.registry.register(svc(names[i]!, '1', [node(`${names[i]}-1`, 8100 + i, { round: String(round) })]), { ttlMs: 60_000 });
    for (let i = 0; i < xs.length; i++) await register(i, 0);
    const ws = xs.map((x) => collect(x.registry));
    try {
      for (let round = 1; round <= 10; round++) {
        const inode = statSync(file).ino;
        const seen = xs.map(reopened);
        rmSync(file);
        // No call into any registry: each notices on its own poll and reopens (one publishes, the others use its file).
        await waitFor(() => xs.every((x, i) => reopened(x) > seen[i]!), 5000, 5);
        assert.notEqual(statSync(file).ino, inode, `round ${round}: a new file`);
        for (const [i, x] of xs.entries()) {
          assert.deepEqual((await x.registry.listServices()).map((s) => s.name), names, `round ${round}: instance ${i} sees all four`);
          assert.equal(x.failing(), 0);
        }
        for (const w of ws) assert.deepEqual(w.events.filter((e) => e.action === 'delete'), [], `round ${round}: no delete reported`);
        // Every connection still shares one WAL with the others (none lost its side files):
        // a change by each reaches every watcher.
        for (let i = 0; i < xs.length; i++) await register(i, round);
        await waitFor(
          () => ws.every((w) => names.every((n) => w.events.some((e) => e.service.name === n && e.service.nodes[0]?.metadata.round === String(round)))),
          5000,
          5,
        );
      }
      for (const w of ws) assert.deepEqual(w.events.filter((e) => e.action === 'delete'), []);
      // Nothing left behind: no temporary file, no lock.
      assert.deepEqual(
        readdirSync(dir.path).filter((f) => !['', '-wal', '-shm', '-id'].some((side) => f === `${LOCAL_DB_FILE}${side}`)),
        [],
      );
    } finally {
      for (const w of ws) w.watcher.stop();
    }
  });
});

/**
 * One process on the registry dir: registers `name` with a 1 s TTL and refreshes it every 100 ms
 * with a growing `seq`; prints `VIEW {"name":seq,...}` whenever the seqs it reads change, and
 * `DELETE name` for every delete its watcher reports.
 */
const PEER = `
const [dir, name] = process.argv.slice(1);
const { LocalRegistry } = await import(${JSON.stringify(new URL('../../src/engines/registry/local/index.ts', import.meta.url).href)});
const reg = new LocalRegistry(dir);
reg.watch((e) => { if (e.action === 'delete') console.log('DELETE ' + e.service.name); });
let seq = 0;
let last = '';
const beat = async () => {
  seq++;
  try {
    await reg.register({ name, version: '1', metadata: {}, endpoints: [], nodes: [{ id: name + '-1', address: '127.0.0.1', port: 9000, metadata: { seq: String(seq) } }] }, { ttlMs: 1000 });
    const view = {};
    for (const s of await reg.listServices()) for (const v of await reg.getService(s.name)) view[s.name] = Number(v.nodes[0]?.metadata.seq ?? 0);
    const line = JSON.stringify(view);
    if (line !== last) console.log('VIEW ' + line);
    last = line;
  } catch (err) {
    console.log('ERROR ' + err.message);
  }
};
await beat();
console.log('READY');
setInterval(beat, 100);
`;

describe('local registry: the file deleted ten times in a row under four processes', () => {
  const dir = tempDir('mesh-registry-procs-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const names = ['p0', 'p1', 'p2', 'p3'];
  const procs = names.map((name) => startProcess(['--import', 'tsx', '--input-type=module', '-e', PEER, dir.path, name], {}, ''));
  after(async () => {
    for (const p of procs) await p.stop();
    dir.cleanup();
  });
  /** The last view a process printed: each service's seq as it reads it. */
  const viewOf = (p: (typeof procs)[number]): Record<string, number> => {
    const lines = p.output().split('\n').filter((l) => l.startsWith('VIEW '));
    return lines.length ? (JSON.parse(lines[lines.length - 1]!.slice(5)) as Record<string, number>) : {};
  };
  const reopened = (p: (typeof procs)[number]) => (p.output().match(/registry file was (deleted|replaced)/g) ?? []).length;

  it('after every heal every process reads every other one\'s newest writes again; no delete is ever reported', async () => {
    for (const p of procs) await p.waitForOutput(/READY/, 15000);
    const allSee = (floor: Record<string, number>) =>
      procs.every((p) => {
        const v = viewOf(p);
        return names.every((n) => (v[n] ?? 0) > (floor[n] ?? 0));
      });
    await waitFor(() => allSee({}), 10000, 10);
    for (let round = 1; round <= 10; round++) {
      const inode = statSync(file).ino;
      const seen = procs.map(reopened);
      rmSync(file);
      await waitFor(() => procs.every((p, i) => reopened(p) > seen[i]!), 5000, 5);
      assert.notEqual(statSync(file).ino, inode, `round ${round}: a new file`);
      // Each process's own newest seq once all have reopened; then everyone must read past it:
      // a process left on side files of its own (a split) would never see the others' writes.
      const floor = Object.fromEntries(procs.map((p, i) => [names[i]!, viewOf(p)[names[i]!] ?? 0]));
      await waitFor(() => allSee(floor), 5000, 10).catch((err: Error) => {
        throw new Error(`round ${round}: ${err.message}; floor ${JSON.stringify(floor)}; views ${JSON.stringify(procs.map(viewOf))}`);
      });
    }
    for (const [i, p] of procs.entries()) {
      assert.doesNotMatch(p.output(), /^(DELETE|ERROR) /m, `process ${names[i]}:\n${p.output()}`);
    }
  });
});

describe('local registry: a lock file left by a process that died holding it', () => {
  const dir = tempDir('mesh-registry-lock-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const a = instance(dir.path);
  after(async () => {
    await a.registry.close();
    dir.cleanup();
  });

  it('is broken: the deleted file is created again and the lock is gone', async () => {
    await a.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 });
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    writeFileSync(`${file}-lock`, `${dead}\n`);
    const inode = statSync(file).ino;
    rmSync(file);
    await waitFor(() => existsSync(file) && statSync(file).ino !== inode, 5000, 5);
    assert.equal(existsSync(`${file}-lock`), false);
    const fresh = new LocalRegistry(dir.path);
    try {
      assert.deepEqual(ids(await fresh.getService('alpha')), ['alpha-1']);
    } finally {
      await fresh.close();
    }
    assert.equal(a.failing(), 0);
  });
});

describe('local registry: the file replaced (another database renamed over it)', () => {
  const dir = tempDir('mesh-registry-file-');
  const other = tempDir('mesh-registry-other-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const a = instance(dir.path);
  const b = instance(dir.path);
  after(async () => {
    await a.registry.close();
    await b.registry.close();
    dir.cleanup();
    other.cleanup();
  });

  it('both reopen the new file within a second, write theirs into it, and watchers report its services', async () => {
    await a.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 });
    await b.registry.register(svc('beta', '1', [node('beta-1', 8002)]));
    const replacement = new LocalRegistry(other.path);
    await replacement.register(svc('gamma', '1', [node('gamma-1', 8003)]));
    await replacement.close();
    const w = collect(a.registry);
    try {
      const replacedAt = Date.now();
      renameSync(join(other.path, LOCAL_DB_FILE), file);
      const created = await w.next((e) => e.service.name === 'gamma', 5000);
      assert.equal(created.action, 'create');
      await waitFor(async () => ids(await b.registry.getService('alpha')).length === 1 && ids(await a.registry.getService('beta')).length === 1, 5000, 5);
      const healed = Date.now() - replacedAt;
      console.log(`local registry: replaced file healed after ${healed} ms`);
      assert.ok(healed < BOUND_MS, `healed after ${healed} ms`);
      assert.deepEqual(ids(await b.registry.getService('gamma')), ['gamma-1']);
      assert.ok(a.lines.some((l) => l.level === 'warning' && l.reason === 'replaced' && l.path === file));
    } finally {
      w.watcher.stop();
    }
  });
});

/**
 * Making writes fail as root: file modes do not stop root, so the directory, the database and
 * its WAL are made immutable (`chattr +i`, ext4 and most Linux file systems): every write then
 * fails in SQLite itself (EPERM: SQLITE_IOERR / SQLITE_READONLY / SQLITE_CANTOPEN).
 */
function chattr(flag: '+i' | '-i', paths: string[]): boolean {
  try {
    execFileSync('chattr', [flag, ...paths], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
}

describe('local registry: a store that refuses writes keeps the last known view', () => {
  const dir = tempDir('mesh-registry-ro-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const frozen = [dir.path, file, `${file}-wal`];
  const service = instance(dir.path); // registers with a TTL, as a framework service does
  const gateway = instance(dir.path); // only reads and watches, as `mesh api` does
  after(async () => {
    chattr('-i', frozen);
    await service.registry.close();
    await gateway.registry.close();
    dir.cleanup();
  });

  it('readers and watchers keep healthy nodes past the TTL, gauge 1, one error line; recovery writes ours again', async (t) => {
    const TTL = 1500;
    await service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: TTL });
    const w = collect(gateway.registry);
    await waitFor(async () => ids(await gateway.registry.getService('alpha')).length === 1);
    if (!chattr('+i', frozen)) {
      t.skip('chattr +i is not available here (not root, or the file system has no immutable flag): NOT TESTED');
      return;
    }
    const frozenAt = Date.now();
    // A refresh fails, loudly, to its caller.
    await assert.rejects(service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: TTL }), (err: Error) => {
      assert.match(err.message, /^registry local \(.*registry\.db\): write failed: SQLITE_/);
      return true;
    });
    assert.equal(service.failing(), 1);
    // A new registration fails too, and is not remembered.
    await assert.rejects(service.registry.register(svc('late', '1', [node('late-1', 8009)])), /write failed: SQLITE_/);

    // Past the TTL (nobody could refresh): still there, for readers of both and the watcher.
    await waitFor(() => Date.now() > frozenAt + TTL + 500, TTL + 2000, 50);
    assert.deepEqual(ids(await gateway.registry.getService('alpha')), ['alpha-1']);
    assert.deepEqual(ids(await service.registry.getService('alpha')), ['alpha-1']);
    assert.deepEqual((await gateway.registry.listServices()).map((s) => s.name), ['alpha']);
    assert.deepEqual(w.events.filter((e) => e.action === 'delete'), [], 'the watcher reported no expiry');
    assert.equal(gateway.failing(), 1, 'the reader found the store failing at its expiry sweep');
    // How old the view is: the gauge counts the seconds since the store was last known good.
    await waitFor(() => gateway.stats.gauge('registry.stale_seconds').value >= 1 && service.stats.gauge('registry.stale_seconds').value >= 1, 5000);
    for (const x of [service, gateway]) {
      const errors = x.lines.filter((l) => l.level === 'error');
      assert.equal(errors.length, 1, `one error line, not one per poll: ${JSON.stringify(x.lines)}`);
      assert.match(errors[0]!.msg, /registry store failing/);
      assert.equal(errors[0]!.path, file);
    }

    // The service keeps refreshing (it is told each time that it failed) ...
    await assert.rejects(service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 }));
    // ... and once the store takes writes again, its registration is written again by itself.
    assert.ok(chattr('-i', frozen));
    await waitFor(() => service.failing() === 0 && gateway.failing() === 0, 5000);
    for (const x of [service, gateway]) assert.equal(x.stats.gauge('registry.stale_seconds').value, 0);
    const fresh = new LocalRegistry(dir.path);
    try {
      assert.deepEqual(ids(await fresh.getService('alpha')), ['alpha-1']);
      assert.deepEqual(await fresh.getService('late'), [], 'a registration that failed is not written later');
    } finally {
      await fresh.close();
    }
    assert.ok(service.lines.some((l) => l.level === 'info' && /registry store recovered/.test(l.msg)));
  });
});

describe('local registry: a -shm file that refuses writes (chattr +i) keeps the last view and never kills the process', () => {
  const dir = tempDir('mesh-registry-shm-');
  const shm = `${join(dir.path, LOCAL_DB_FILE)}-shm`;
  const service = instance(dir.path);
  const gateway = instance(dir.path);
  after(async () => {
    chattr('-i', [shm]);
    await service.registry.close();
    await gateway.registry.close();
    dir.cleanup();
  });

  it('writes refused, readers and watchers keep the view past the TTL, opening refused clearly; all back when it takes writes', async (t) => {
    const TTL = 1500;
    await service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: TTL });
    const w = collect(gateway.registry);
    await waitFor(async () => ids(await gateway.registry.getService('alpha')).length === 1);
    assert.ok(existsSync(shm), 'SQLite made its -shm file');
    if (!chattr('+i', [shm])) {
      console.warn('SKIP: chattr +i is not available here (not root, or the file system has no immutable flag): the -shm case is NOT TESTED');
      t.skip('chattr +i is not available here: NOT TESTED');
      return;
    }
    const frozenAt = Date.now();
    // Before the fix, this write went through SQLite's mapping of the -shm file: SIGBUS, the process gone.
    await assert.rejects(service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: TTL }), (err: Error) => {
      assert.match(err.message, /^registry local \(.*registry\.db\): store failing, write refused: .*registry\.db-shm cannot be written \(EPERM\)/);
      return true;
    });
    assert.equal(service.failing(), 1);
    assert.throws(() => new LocalRegistry(dir.path), /cannot open .*registry\.db: .*registry\.db-shm cannot be written \(EPERM\)/);

    // Past the TTL (nobody could refresh): still there, for both, and the watcher reported no expiry.
    await waitFor(() => Date.now() > frozenAt + TTL + 500, TTL + 2000, 50);
    assert.deepEqual(ids(await gateway.registry.getService('alpha')), ['alpha-1']);
    assert.deepEqual(ids(await service.registry.getService('alpha')), ['alpha-1']);
    assert.deepEqual(w.events.filter((e) => e.action === 'delete'), [], 'the watcher reported no expiry');
    await waitFor(() => gateway.failing() === 1, 3000);
    for (const x of [service, gateway]) {
      const errors = x.lines.filter((l) => l.level === 'error');
      assert.equal(errors.length, 1, `one error line, not one per poll: ${JSON.stringify(x.lines)}`);
      assert.match(errors[0]!.msg, /registry store failing/);
    }

    // It takes writes again: both recover, the service's registration is written again by itself.
    await assert.rejects(service.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 }));
    assert.ok(chattr('-i', [shm]));
    await waitFor(() => service.failing() === 0 && gateway.failing() === 0, 5000);
    const fresh = new LocalRegistry(dir.path);
    try {
      assert.deepEqual(ids(await fresh.getService('alpha')), ['alpha-1']);
    } finally {
      await fresh.close();
    }
  });
});

describe('local registry: the file replaced by something that cannot be opened', () => {
  const dir = tempDir('mesh-registry-dir-');
  const file = join(dir.path, LOCAL_DB_FILE);
  const a = instance(dir.path);
  after(async () => {
    await a.registry.close();
    dir.cleanup();
  });

  it('keeps the last view, refuses writes with a clear error, and heals once the path is a file again', async () => {
    await a.registry.register(svc('alpha', '1', [node('alpha-1', 8001)]), { ttlMs: 60_000 });
    for (const side of ['', '-wal', '-shm']) rmSync(`${file}${side}`, { force: true });
    execFileSync('mkdir', [file]);
    await waitFor(() => a.failing() === 1, 3000, 10);
    assert.deepEqual(ids(await a.registry.getService('alpha')), ['alpha-1']);
    await assert.rejects(a.registry.register(svc('beta', '1', [node('beta-1', 8002)])), (err: Error) => {
      assert.match(err.message, /store failing, write refused: .*not a regular file/);
      return true;
    });
    rmSync(file, { recursive: true });
    await waitFor(() => a.failing() === 0, 3000, 10);
    const fresh = new LocalRegistry(dir.path);
    try {
      assert.deepEqual(ids(await fresh.getService('alpha')), ['alpha-1']);
    } finally {
      await fresh.close();
    }
  });
});

describe('CLI: the gateway keeps answering after the registry file is deleted', () => {
  const home = tempDir('mesh-registry-e2e-');
  const WHO = join(ROOT, 'test/fixtures/who-service.ts');
  let gateway: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
  let who: ReturnType<typeof startProcess> | undefined;
  after(async () => {
    await gateway?.stop();
    await who?.stop();
    home.cleanup();
  });

  it('200 for the service before and after `rm registry.db`, past the TTL', async () => {
    who = startProcess(
      ['--import', 'tsx', WHO, `--registry_address=${home.path}`, '--register_ttl=1s', '--register_interval=300ms', '--log_level=warning'],
      {},
      '',
    );
    await who.waitForOutput(/listening on/, 15000);
    gateway = await startGatewayProcess(home.path, ['--namespace=go.mesh.srv']);
    const call = () => http('POST', `${gateway!.url}/who/am`, { headers: { 'content-type': 'application/json' }, body: '{}' });
    await waitFor(async () => (await call()).status === 200, 10000);
    rmSync(join(home.path, LOCAL_DB_FILE));
    const removedAt = Date.now();
    // Past two TTLs: every answer is 200 (a split registry would turn into 404 here).
    const statuses: number[] = [];
    while (Date.now() - removedAt < 2500) statuses.push((await call()).status);
    assert.ok(statuses.length > 0);
    assert.deepEqual([...new Set(statuses)], [200], `statuses after rm: ${statuses.join(',')}`);
    assert.ok(existsSync(join(home.path, LOCAL_DB_FILE)), 'the file was created again');
    assert.match(who.output() + gateway.proc.output(), /registry file was deleted/);
  });
});

describe('local registry: eight processes opening a new directory at the same moment', () => {
  it('all of them open it (no SQLITE_BUSY while the first turns it to WAL), five times over', async () => {
    // Each process waits for a go file, so that the opens race as they do when a --concurrency
    // primary forks its workers, or a test starts a gateway and its services together.
    const script = `
      import { existsSync } from 'node:fs';
      import { LocalRegistry } from ${JSON.stringify(join(ROOT, 'src/engines/registry/local/index.ts'))};
      const [dir, name] = process.argv.slice(-2);
      console.log('READY');
      while (!existsSync(dir + '/go')) await new Promise((r) => setImmediate(r));
      const registry = new LocalRegistry(dir);
      await registry.register({ name, version: 'v1', metadata: {}, endpoints: [], nodes: [{ id: name + '-1', address: '127.0.0.1', port: 1, metadata: {} }] });
      console.log('OPEN ' + name);
      await registry.close();
    `;
    for (let round = 0; round < 5; round++) {
      const dir = tempDir('mesh-registry-race-');
      try {
        const procs = Array.from({ length: 8 }, (_, i) => startProcess(['--import', 'tsx', '--input-type=module', '-e', script, dir.path, `s${i}`], {}, ''));
        const exits = procs.map((p) => once(p.child, 'exit').then(([code]) => code as number | null));
        // Every process is up and polling before the go file appears.
        await Promise.all(procs.map((p) => p.waitForOutput(/READY/, 20000)));
        writeFileSync(join(dir.path, 'go'), '');
        const codes = await Promise.all(exits);
        assert.deepEqual(codes, procs.map(() => 0), procs.map((p) => p.output()).join('\n'));
      } finally {
        dir.cleanup();
      }
    }
  });
});
