/**
 * The sidecar's acknowledged WebSocket subscriptions (`/broker?topic=T&ack=1&durable=NAME`): frames
 * with ids, {"ack":n} and {"nack":n}, max_inflight, redelivery on nack and after a reconnect with
 * the same durable name, and the errors of bad queries and frames. A real `mesh sidecar` on the
 * embedded default broker (http, durable outbox beside the local registry).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { http, runCli, startProcess, tempDir, waitFor } from '../helpers.js';
import { refusedHandshake, startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

interface AckFrame {
  Id: number;
  MessageId: string;
  Deliveries: number;
  Header: Record<string, string>;
  Body: string;
}

const body = (f: AckFrame) => Buffer.from(f.Body, 'base64').toString('utf8');

async function ackSubscriber(base: string, query: string): Promise<{ ws: WebSocket; frames: AckFrame[]; closed: Promise<{ code: number; reason: string }> }> {
  const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/broker?${query}`);
  const frames: AckFrame[] = [];
  ws.on('message', (data) => frames.push(JSON.parse(data.toString()) as AckFrame));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return { ws, frames, closed };
}

const publish = async (base: string, topic: string, text: string) => {
  const r = await http('POST', `${base}/broker?topic=${topic}`, { headers: { 'content-type': 'text/plain' }, body: text });
  assert.equal(r.status, 200, r.text);
};

describe('sidecar /broker with acks', () => {
  const home = tempDir('mesh-sc-ack-');
  let sc: SidecarProcess;
  before(async () => {
    sc = await startSidecar(home.path, ['--broker_ack_wait=2s']);
  });
  after(async () => {
    await sc?.stop();
    home.cleanup();
  });

  it('sends frames with ids, at most max_inflight unanswered, and takes acks', async () => {
    const sub = await ackSubscriber(sc.base, 'topic=acks&ack=1&durable=w1&max_inflight=2');
    let maxOpen = 0;
    const answered = new Set<number>();
    sub.ws.on('message', () => {
      maxOpen = Math.max(maxOpen, sub.frames.length - answered.size);
    });
    for (let i = 0; i < 6; i++) await publish(sc.base, 'acks', `m${i}`);
    // answer each frame as it comes, one at a time
    await waitFor(() => {
      for (const f of sub.frames) {
        if (answered.has(f.Id)) continue;
        answered.add(f.Id);
        sub.ws.send(JSON.stringify({ ack: f.Id }));
      }
      return answered.size >= 6;
    }, 15_000);
    assert.equal(maxOpen <= 2, true, `at most 2 unanswered frames at once (saw ${maxOpen})`);
    assert.deepEqual(sub.frames.map(body).sort(), ['m0', 'm1', 'm2', 'm3', 'm4', 'm5']);
    for (const f of sub.frames) {
      assert.equal(f.Deliveries, 1);
      assert.equal(f.Header['Mesh-Id'], f.MessageId);
      assert.equal(typeof f.Id, 'number');
    }
    sub.ws.close();
    await sub.closed;
  });

  it('redelivers a nacked frame with the same MessageId and the next delivery count', async () => {
    const sub = await ackSubscriber(sc.base, 'topic=nacks&ack=1&durable=w2');
    await publish(sc.base, 'nacks', 'again');
    await waitFor(() => sub.frames.length === 1, 10_000);
    sub.ws.send(JSON.stringify({ nack: sub.frames[0]!.Id }));
    await waitFor(() => sub.frames.length === 2, 10_000);
    const [first, second] = sub.frames;
    assert.equal(second!.MessageId, first!.MessageId);
    assert.equal(second!.Deliveries, 2);
    assert.notEqual(second!.Id, first!.Id);
    sub.ws.send(JSON.stringify({ ack: second!.Id }));
    sub.ws.close();
    await sub.closed;
  });

  it('redelivers what was unanswered at a disconnect, and what came meanwhile, to the next connection of the name', async () => {
    const first = await ackSubscriber(sc.base, 'topic=reconnect&ack=1&durable=w3');
    await publish(sc.base, 'reconnect', 'r1');
    await publish(sc.base, 'reconnect', 'r2');
    await waitFor(() => first.frames.length === 2, 10_000);
    first.ws.send(JSON.stringify({ ack: first.frames.find((f) => body(f) === 'r1')!.Id }));
    first.ws.terminate(); // r2 unanswered
    await first.closed;
    await publish(sc.base, 'reconnect', 'r3'); // nobody connected
    const second = await ackSubscriber(sc.base, 'topic=reconnect&ack=1&durable=w3');
    await waitFor(() => {
      for (const f of second.frames) second.ws.send(JSON.stringify({ ack: f.Id }));
      return second.frames.length >= 2;
    }, 15_000);
    assert.deepEqual(second.frames.map(body).sort(), ['r2', 'r3']);
    const r2 = second.frames.find((f) => body(f) === 'r2')!;
    assert.equal(r2.MessageId, first.frames.find((f) => body(f) === 'r2')!.MessageId);
    assert.ok(r2.Deliveries >= 2);
    second.ws.close();
    await second.closed;
  });

  it('refuses bad ack queries with 400 and closes on a frame that is not an answer (1008)', async () => {
    const ws = sc.base.replace(/^http/, 'ws');
    const noName = await refusedHandshake(`${ws}/broker?topic=t&ack=1`);
    assert.equal(noName.status, 400);
    assert.equal(noName.body, '{"id":"go.mesh.sidecar","code":400,"detail":"durable: required with ack=1 (the name the broker keeps messages for)","status":"Bad Request"}');
    const zero = await refusedHandshake(`${ws}/broker?topic=t&ack=1&durable=x&max_inflight=0`);
    assert.equal(zero.status, 400);
    assert.match(zero.body, /max_inflight: must be an integer from 1 to 64/);
    const stray = await refusedHandshake(`${ws}/broker?topic=t&durable=x`);
    assert.equal(stray.status, 400);
    assert.match(stray.body, /durable: only with ack=1/);
    const sub = await ackSubscriber(sc.base, 'topic=badframes&ack=1&durable=w4');
    sub.ws.send('hello');
    const closed = await sub.closed;
    assert.equal(closed.code, 1008);
    assert.match(closed.reason, /ack mode/);
  });
});

describe('mesh subscribe --ack --durable', () => {
  it('gets what was published while it was down (direct, embedded broker), and acks through a sidecar', async () => {
    const home = tempDir('mesh-cli-ack-');
    const reg = `--registry_address=${home.path}`;
    try {
      let sub = startProcess([reg, 'subscribe', 'cli.acks', '--ack', '--durable', 'printer']);
      await sub.waitForOutput(/subscribed to cli\.acks \(durable printer, acknowledged\)/, 20_000);
      let pub = await runCli([reg, 'publish', 'cli.acks', 'first']);
      assert.equal(pub.code, 0, pub.stderr);
      await sub.waitForOutput(/first\n/, 10_000);
      await sub.stop('SIGKILL');
      pub = await runCli([reg, 'publish', 'cli.acks', 'while-down']);
      assert.equal(pub.code, 0, pub.stderr);
      sub = startProcess([reg, 'subscribe', 'cli.acks', '--ack', '--durable', 'printer']);
      await sub.waitForOutput(/while-down\n/, 20_000);
      assert.ok(!/first/.test(sub.output()), 'an acknowledged message is not printed again');
      await sub.stop('SIGKILL');

      const sc = await startSidecar(home.path, ['--enable_stats']);
      try {
        const proxy = `--proxy_address=127.0.0.1:${sc.port}`;
        const viaSidecar = startProcess([proxy, 'subscribe', 'cli.sc', '--ack', '--durable', 'scprinter']);
        await viaSidecar.waitForOutput(/subscribed to cli\.sc/, 20_000);
        pub = await runCli([proxy, 'publish', 'cli.sc', 'through']);
        assert.equal(pub.code, 0, pub.stderr);
        await viaSidecar.waitForOutput(/through\n/, 10_000);
        await waitFor(async () => /broker\.consumer\.scprinter\.acked: 1\b/.test((await http('GET', `${sc.admin}/stats?filter=scprinter`)).text), 10_000);
        await viaSidecar.stop('SIGKILL');
      } finally {
        await sc.stop();
      }
      const bad = await runCli([reg, 'subscribe', 'cli.acks', '--ack']);
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /subscribe --ack needs --durable NAME/);
    } finally {
      home.cleanup();
    }
  });
});
