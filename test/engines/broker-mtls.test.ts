/**
 * The http broker's deliveries over mutual TLS, with real processes: a message published on one
 * sidecar reaches a subscriber behind another, both with --mtls=strict (certificates of one mesh
 * CA in --ca_dir). The subscriber's endpoint refuses a plain delivery (even one with the right
 * secret); a strict publisher does not deliver to a plain endpoint; a permissive endpoint still
 * takes plain deliveries (a mesh migrating one process at a time).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { createRegistry } from '../../src/engines/registry/create.js';
import { http, runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { flushTopic, startSidecar, subscribe, type SidecarProcess, type Subscriber } from '../fixtures/sidecar-common.js';

async function stat(admin: string, name: string): Promise<number> {
  const escaped = name.replace(/\./g, '\\.');
  const res = await fetch(`${admin}/stats?filter=${encodeURIComponent(`^${escaped}$`)}`);
  const m = new RegExp(`^${escaped}: (\\d+)$`, 'm').exec(await res.text());
  return m ? Number(m[1]) : -1;
}

/** The registry node of this topic's broadcast subscription (there is one process subscribed). */
async function topicNode(dir: string, topic: string): Promise<{ address: string; port: number; metadata: Record<string, string>; id: string }> {
  const registry = createRegistry('local', dir);
  try {
    return await waitFor(async () => {
      const [record] = await registry.getService(`topic:${topic}`).catch(() => []);
      return record?.nodes[0];
    }, 10_000);
  } finally {
    await registry.close();
  }
}

/** One plain HTTP request as raw bytes; resolves with what came back before the server closed or answered in full. */
function rawPlain(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      const len = /content-length: (\d+)/i.exec(got);
      if (end !== -1 && len && got.length >= end + 4 + Number(len[1])) socket.end();
    });
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
    socket.write(request);
  });
}

describe('http broker deliveries with --mtls', () => {
  const dir = tempDir();
  const ca = tempDir('mesh-ca-');
  const sidecars: SidecarProcess[] = [];
  const subs: Subscriber[] = [];
  const flags = (mode: string) => [`--ca_dir=${ca.path}`, `--mtls=${mode}`];
  let publisher: SidecarProcess;
  let subscriber: SidecarProcess;

  before(async () => {
    publisher = await startSidecar(dir.path, flags('strict'));
    sidecars.push(publisher);
    subscriber = await startSidecar(dir.path, flags('strict'));
    sidecars.push(subscriber);
  });
  after(async () => {
    for (const s of subs) s.ws.terminate();
    for (const s of sidecars) await s.stop('SIGKILL');
    dir.cleanup();
    ca.cleanup();
  });

  test('a message published on one strict sidecar reaches a subscriber behind another, over mutual TLS', async () => {
    const sub = await subscribe(subscriber.base, 'orders');
    subs.push(sub);
    const node = await topicNode(dir.path, 'orders');
    assert.equal(node.metadata.mtls, 'true');
    const r = await http('POST', `${publisher.base}/broker?topic=orders`, { headers: { 'content-type': 'text/plain' }, body: 'first' });
    assert.equal(r.status, 200, r.text);
    await waitFor(() => sub.bodies().includes('first'), 10_000);
    assert.ok((await stat(publisher.admin, 'broker.http.ssl.handshake')) >= 1);
    assert.equal(await stat(publisher.admin, 'broker.http.ssl.fail_verify_error'), 0);
    assert.ok((await stat(subscriber.admin, 'http.broker.ssl.handshake')) >= 1);
  });

  test('the strict endpoint refuses a plain delivery, even with the mesh\'s secret: the subscriber gets nothing', async () => {
    const node = await topicNode(dir.path, 'orders');
    const secret = readFileSync(join(dir.path, 'broker.secret'), 'utf8').trim();
    const body = 'forged';
    const got = await rawPlain(node.port, `POST /_mesh/broker?topic=orders&id=${encodeURIComponent(node.id)} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/octet-stream\r\nmesh-broker-secret: ${secret}\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    assert.match(got, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.equal(got.slice(got.indexOf('\r\n\r\n') + 4), '{"id":"go.mesh.broker","code":400,"detail":"service go.mesh.broker accepts mutual TLS only (--mtls=strict): call it with a mesh workload certificate","status":"Bad Request"}');
    assert.ok((await stat(subscriber.admin, 'http.broker.downstream_cx_plain_refused')) >= 1);
    // Everything published after it arrives, and the forged body never did.
    const orders = subs[0]!;
    await flushTopic(publisher.base, 'orders', [orders]);
    assert.ok(!orders.bodies().includes('forged'));
  });

  test('mesh publish and mesh subscribe with --mtls=strict deliver and receive over mutual TLS', async () => {
    const common = [`--registry_address=${dir.path}`, `--ca_dir=${ca.path}`, '--mtls=strict', '--log_level=warning'];
    const pub = await runCli(['publish', 'orders', 'from the cli', ...common]);
    assert.equal(pub.code, 0, pub.stderr);
    await waitFor(() => subs[0]!.bodies().includes('from the cli'), 10_000);
    const cli = startProcess(['subscribe', 'shipping', ...common]);
    try {
      await cli.waitForOutput(/subscribed to shipping/, 20_000);
      assert.equal((await topicNode(dir.path, 'shipping')).metadata.mtls, 'true');
      const r = await http('POST', `${publisher.base}/broker?topic=shipping`, { headers: { 'content-type': 'text/plain' }, body: 'to the cli' });
      assert.equal(r.status, 200, r.text);
      await cli.waitForOutput(/^to the cli$/m, 10_000);
    } finally {
      await cli.stop();
    }
  });

  test('a strict publisher does not deliver to a plain endpoint; a permissive endpoint takes plain and mTLS deliveries', async () => {
    const plain = await startSidecar(dir.path, []);
    sidecars.push(plain);
    const plainSub = await subscribe(plain.base, 'audit');
    subs.push(plainSub);
    await topicNode(dir.path, 'audit');
    const refusedBefore = await stat(publisher.admin, 'broker.http.upstream_cx_plain_refused');
    const r = await http('POST', `${publisher.base}/broker?topic=audit`, { headers: { 'content-type': 'text/plain' }, body: 'secret stuff' });
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await stat(publisher.admin, 'broker.http.upstream_cx_plain_refused')) > refusedBefore, 10_000);
    assert.deepEqual(plainSub.bodies(), []);

    const permissive = await startSidecar(dir.path, flags('permissive'));
    sidecars.push(permissive);
    const permSub = await subscribe(permissive.base, 'billing');
    subs.push(permSub);
    const node = await topicNode(dir.path, 'billing');
    assert.equal(node.metadata.mtls, 'true');
    // From a plain publisher (the process not migrated yet), and from a strict one.
    assert.equal((await http('POST', `${plain.base}/broker?topic=billing`, { headers: { 'content-type': 'text/plain' }, body: 'from plain' })).status, 200);
    assert.equal((await http('POST', `${publisher.base}/broker?topic=billing`, { headers: { 'content-type': 'text/plain' }, body: 'from strict' })).status, 200);
    await waitFor(() => permSub.bodies().includes('from plain') && permSub.bodies().includes('from strict'), 10_000);
  });
});
