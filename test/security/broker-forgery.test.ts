/**
 * The embedded http broker's delivery endpoint takes deliveries from mesh processes only: a
 * forged `POST /_mesh/broker` (anyone on the machine can read a `topic:` node's address) without
 * the mesh's secret, or with another, is refused and never reaches a subscriber behind a sidecar
 * with --sidecar_token, while a real publish from another mesh process does. The state directory
 * and its files are private to their user (0700, 0600), and processes making the secret at once
 * agree on one.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { ROOT, runCli, startProcess, tempDir, waitFor, type RunningProcess } from '../helpers.js';
import { http, startSidecar, subscribe, type SidecarProcess, type Subscriber } from '../fixtures/sidecar-common.js';

const TOKEN = 'sidecar-token-0123456789abcdef';
const REQUIRED = '{"id":"go.mesh.broker","code":401,"detail":"a broker secret is required (Mesh-Broker-Secret)","status":"Unauthorized"}';
const WRONG = '{"id":"go.mesh.broker","code":403,"detail":"wrong broker secret","status":"Forbidden"}';
const REFUSED_LOG = /refused a delivery (without|with a wrong) broker secret/g;

const mode = (path: string) => (statSync(path).mode & 0o7777).toString(8);

/** The delivery endpoint of a topic's subscriber, as any user of the machine can read it from the registry. */
async function topicNode(home: string, topic: string): Promise<{ url: string; id: string }> {
  const registry = new LocalRegistry(home);
  try {
    const services = await registry.getService(`topic:${topic}`);
    const node = services[0]!.nodes[0]!;
    return { url: `http://${node.address}:${node.port}/_mesh/broker?topic=${encodeURIComponent(topic)}&id=${encodeURIComponent(node.id)}`, id: node.id };
  } finally {
    await registry.close();
  }
}

/** A forged delivery: a message claiming an authenticated subject. */
async function forge(url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/octet-stream', 'mesh-broker-header': '{"Mesh-Auth-Subject":"admin"}', ...headers },
    body: 'forged',
  });
  return { status: res.statusCode, text: await res.body.text() };
}

async function stat(admin: string, name: string): Promise<number> {
  const r = await http('GET', `${admin}/stats?filter=${encodeURIComponent(`^${name.replace(/\./g, '\\.')}$`)}`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(r.text);
  return m ? Number(m[1]) : 0;
}

describe('http broker: forged deliveries', () => {
  const home = tempDir('mesh-broker-forgery-');
  let sc: SidecarProcess;
  let sub: Subscriber;

  before(async () => {
    // A directory and a registry file left open to others by an older version: tightened at start.
    const old = new LocalRegistry(home.path);
    await old.close();
    chmodSync(join(home.path, 'registry.db'), 0o644);
    chmodSync(home.path, 0o755);
    sc = await startSidecar(home.path, [`--sidecar_token=${TOKEN}`]);
    sub = await subscribe(sc.base, 'orders', undefined, { 'mesh-sidecar-token': TOKEN });
  });
  after(async () => {
    sub?.ws.close();
    await sc?.stop();
    home.cleanup();
  });

  it('a delivery without the secret is 401, with another 403; neither reaches the subscriber; a real publish does', async () => {
    const { url } = await topicNode(home.path, 'orders');
    assert.deepEqual(await forge(url), { status: 401, text: REQUIRED });
    assert.deepEqual(await forge(url, { 'mesh-broker-secret': 'not-the-secret-0123456789' }), { status: 403, text: WRONG });
    assert.deepEqual(await forge(url, { 'mesh-broker-secret': '' }), { status: 403, text: WRONG });
    assert.equal(await stat(sc.admin, 'broker.http.delivery_refused'), 3);
    // Logged once, not once per refusal.
    assert.equal(sc.proc.output().match(REFUSED_LOG)?.length, 1, sc.proc.output());

    // Another mesh process (the CLI) publishes with the secret of the shared MESH_HOME.
    const pub = await runCli(['publish', 'orders', 'real', `--registry_address=${home.path}`, '--log_level=warning']);
    assert.equal(pub.code, 0, pub.stderr);
    await waitFor(() => sub.frames.length >= 1);
    // Frames arrive in order: had a forged delivery got through, it would be first.
    assert.deepEqual(sub.bodies(), ['real']);
    assert.equal(sub.frames[0]!.Header['Mesh-Auth-Subject'], undefined);
    assert.equal(await stat(sc.admin, 'broker.http.delivery_refused'), 3);
  });

  it('MESH_HOME is 0700 and its files 0600, tightened when they were open (and logged)', async () => {
    // A durable subscription makes the broker's own database too.
    const acked = new URL(`${sc.base.replace(/^http/, 'ws')}/broker?topic=billing&ack=1&durable=forgery`);
    const ack = await subscribeUrl(acked);
    try {
      await waitFor(() => readdirSync(home.path).includes('broker.db-wal'));
      assert.equal(mode(home.path), '700');
      const files = readdirSync(home.path).filter((f) => /^(registry\.db|broker\.db)(-wal|-shm|-id)?$|^broker\.secret$/.test(f)).sort();
      assert.deepEqual(files, ['broker.db', 'broker.db-shm', 'broker.db-wal', 'broker.secret', 'registry.db', 'registry.db-id', 'registry.db-shm', 'registry.db-wal']);
      for (const f of files) assert.equal(mode(join(home.path, f)), '600', f);
      const out = sc.proc.output();
      const tightened = out.split('\n').filter((l) => l.includes('tightened its mode')).map((l) => JSON.parse(l) as { path: string; was: string; now: string });
      assert.deepEqual(
        tightened.map(({ path, was, now }) => ({ path, was, now })),
        [
          { path: home.path, was: '0755', now: '0700' },
          { path: join(home.path, 'registry.db'), was: '0644', now: '0600' },
        ],
      );
    } finally {
      ack.close();
    }
  });
});

describe('http broker: the secret across processes', () => {
  it('given as a variable or a file, it must match; MESH_HOME\'s own secret is another', async () => {
    const home = tempDir('mesh-broker-shared-');
    const elsewhere = tempDir('mesh-broker-secret-file-');
    const secretFile = join(elsewhere.path, 'secret');
    const SHARED = 'shared-secret-of-two-machines-0123';
    writeFileSync(secretFile, `${SHARED}\n`, { mode: 0o600 });
    const sc = await startSidecar(home.path, [], { MESH_BROKER_SECRET: SHARED });
    const sub = await subscribe(sc.base, 'shared');
    try {
      const own = await runCli(['publish', 'shared', 'own-secret', `--registry_address=${home.path}`, '--log_level=warning']);
      assert.equal(own.code, 0, own.stderr);
      await waitFor(async () => (await stat(sc.admin, 'broker.http.delivery_refused')) === 1);
      assert.match(own.stderr, /"error":"status 403: .*wrong broker secret.*"msg":"http broker: delivery to a subscriber failed"/);
      const shared = await runCli(['publish', 'shared', 'shared-secret', `--registry_address=${home.path}`, `--broker_secret_file=${secretFile}`, '--log_level=warning']);
      assert.equal(shared.code, 0, shared.stderr);
      await waitFor(() => sub.frames.length >= 1);
      assert.deepEqual(sub.bodies(), ['shared-secret']);
      const bad = await runCli(['publish', 'shared', 'x', `--registry_address=${home.path}`, '--broker_secret=short']);
      assert.notEqual(bad.code, 0);
      assert.match(bad.stderr, /broker secret: must be at least 16 characters/);
      assert.doesNotMatch(bad.stderr, /short/);
    } finally {
      sub.ws.close();
      await sc.stop();
      home.cleanup();
      elsewhere.cleanup();
    }
  });

  it('processes making the secret at once agree on one (0600, no temporary file left)', async () => {
    const dir = tempDir('mesh-broker-secret-race-');
    const peers: RunningProcess[] = [];
    try {
      for (let i = 0; i < 6; i++) peers.push(startProcess(['--import', 'tsx', join(ROOT, 'test/fixtures/broker-secret-peer.ts'), dir.path], {}, ''));
      for (const p of peers) await p.waitForOutput(/^READY$/m, 15000);
      writeFileSync(join(dir.path, 'go'), '');
      const secretOf = (p: RunningProcess) => /^SECRET (\S+)$/m.exec(p.output())?.[1];
      await waitFor(() => peers.every((p) => secretOf(p) !== undefined || p.child.exitCode !== null), 15000);
      const secrets = peers.map((p) => secretOf(p) ?? `no secret: ${p.output()}`);
      const onDisk = readFileSync(join(dir.path, 'broker.secret'), 'utf8').trim();
      assert.deepEqual(new Set(secrets), new Set([onDisk]));
      assert.match(onDisk, /^[\w-]{43}$/);
      assert.equal(mode(join(dir.path, 'broker.secret')), '600');
      assert.deepEqual(readdirSync(dir.path).sort(), ['broker.secret', 'go']);
    } finally {
      for (const p of peers) await p.stop();
      dir.cleanup();
    }
  });
});

/** A WebSocket subscription at a full URL (with the sidecar token); resolves once open. */
async function subscribeUrl(url: URL): Promise<{ close: () => void }> {
  const { default: WebSocket } = await import('ws');
  const ws = new WebSocket(url, { headers: { 'mesh-sidecar-token': TOKEN } });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => reject(new Error(`handshake refused: ${res.statusCode}`)));
  });
  return { close: () => ws.close() };
}
