/**
 * The Python example of docs/sidecar.md (acknowledged subscriptions), run as written with
 * /usr/bin/python3 and Debian's python3-websockets against a real `mesh sidecar`: it handles good
 * messages and acks them, nacks a bad one until it is dead-lettered. Skipped (loudly) without
 * python3 or the websockets package; a failure when MESH_TEST_REQUIRE_ENGINES=1.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { http, ROOT, tempDir, waitFor } from '../helpers.js';
import { startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const PYTHON = '/usr/bin/python3';
const probe = spawnSync(PYTHON, ['-c', 'import websockets'], { encoding: 'utf8' });
const reason = probe.status === 0 ? undefined : `${PYTHON} with the websockets package not available (apt-get install python3-websockets)`;
if (reason) {
  if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
  console.warn(`SKIP: ${reason}`);
}

/** The ```python block of the section on acknowledged subscriptions. */
function example(): string {
  const doc = readFileSync(join(ROOT, 'docs/sidecar.md'), 'utf8');
  const m = /```python\n(# ack_subscriber\.py[\s\S]*?)```/.exec(doc);
  assert.ok(m, 'docs/sidecar.md has the ack_subscriber.py example');
  return m[1]!;
}

describe('docs/sidecar.md Python ack example', { skip: reason }, () => {
  const home = tempDir('mesh-py-ack-');
  let sc: SidecarProcess;
  before(async () => {
    sc = await startSidecar(home.path, ['--broker_ack_wait=2s', '--broker_max_deliver=3']);
  });
  after(async () => {
    await sc?.stop();
    home.cleanup();
  });

  it('handles and acks good messages, nacks a bad one until it reaches orders.dlq', async () => {
    const script = join(home.path, 'ack_subscriber.py');
    writeFileSync(script, example());
    // A dead-letter reader, to see the bad message arrive there.
    const dlq = new WebSocket(`${sc.base.replace(/^http/, 'ws')}/broker?topic=orders.dlq&ack=1&durable=dlq-reader`);
    const dead: Array<{ Id: number; Header: Record<string, string>; Body: string }> = [];
    dlq.on('message', (d) => {
      const f = JSON.parse(d.toString()) as (typeof dead)[number];
      dead.push(f);
      dlq.send(JSON.stringify({ ack: f.Id }));
    });
    await new Promise<void>((resolve, reject) => {
      dlq.once('open', () => resolve());
      dlq.once('error', reject);
    });
    const child = spawn(PYTHON, [script], { env: { ...process.env, MESH_SIDECAR: `127.0.0.1:${sc.port}` }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      // The consumer "billing" exists once the script has subscribed: wait for its WebSocket.
      await waitFor(async () => {
        if (child.exitCode !== null) throw new Error(`python exited:\n${out}`);
        const stats = await http('GET', `${sc.admin}/stats?filter=sidecar.broker.subscribers_active`);
        return /subscribers_active: 2\b/.test(stats.text);
      }, 15_000);
      for (const text of ['one', 'bad', 'two']) {
        const r = await http('POST', `${sc.base}/broker?topic=orders`, { headers: { 'content-type': 'text/plain' }, body: text });
        assert.equal(r.status, 200, r.text);
      }
      await waitFor(() => {
        if (child.exitCode !== null) throw new Error(`python exited:\n${out}`);
        return /handled one/.test(out) && /handled two/.test(out) && dead.length === 1;
      }, 30_000).catch((err: Error) => {
        throw new Error(`${err.message}\n--- python ---\n${out}`);
      });
      assert.equal(Buffer.from(dead[0]!.Body, 'base64').toString(), 'bad');
      assert.equal(dead[0]!.Header['Mesh-Dlq-Consumer'], 'billing');
      assert.equal(dead[0]!.Header['Mesh-Dlq-Deliveries'], '3');
      assert.equal((out.match(/failed .* attempt \d/g) ?? []).length, 3, out);
    } finally {
      child.kill('SIGKILL');
      dlq.terminate();
    }
  });
});
