/**
 * Subscribing is O(1) per subscriber: 1,000 subscribers of one topic, on the http broker directly
 * (with the local registry) and over a real sidecar's WebSocket /broker. Measured: the time of the
 * first 500 and of the second 500 (a cost that grows with the count shows as a second half much
 * slower than the first), with generous bounds for a loaded 2-core machine.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { HttpBroker } from '../../src/engines/broker/http/broker.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { Logging } from '../../src/base/util/log.js';
import type { Message } from '../../src/engines/broker/broker.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, startSidecar, subscribe, type Subscriber } from '../fixtures/sidecar-common.js';

const COUNT = 1000;
const HALF = COUNT / 2;
const TOTAL_BOUND_MS = 10_000;
const silent = new Logging('off').get('broker');

/** Runs fn(i) for i in [from, to) with at most `width` at a time; resolves with the elapsed ms. */
async function timed(from: number, to: number, width: number, fn: (i: number) => Promise<void>): Promise<number> {
  const start = performance.now();
  let next = from;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < to) await fn(next++);
    }),
  );
  return performance.now() - start;
}

function checkGrowth(what: string, first: number, second: number): void {
  console.log(`${what}: first ${HALF} subscribed in ${first.toFixed(0)} ms, second ${HALF} in ${second.toFixed(0)} ms`);
  assert.ok(first + second < TOTAL_BOUND_MS, `${COUNT} subscriptions took ${(first + second).toFixed(0)} ms`);
  // 3x, plus a little for timer granularity when both halves are very fast
  assert.ok(second <= 3 * first + 250, `the second ${HALF} (${second.toFixed(0)} ms) cost more than 3x the first (${first.toFixed(0)} ms)`);
}

describe('http broker: 1,000 subscribers of one topic', () => {
  const dir = tempDir('mesh-broker-scale-');
  const subRegistry = new LocalRegistry(dir.path);
  const pubRegistry = new LocalRegistry(dir.path); // a publishing process of its own
  const sub = new HttpBroker({ registry: subRegistry, logger: silent });
  const pub = new HttpBroker({ registry: pubRegistry, logger: silent });
  after(async () => {
    await pub.close();
    await sub.close();
    await subRegistry.close();
    await pubRegistry.close();
    dir.cleanup();
  });

  it('subscribes in O(1) each, registers one node, and one publish reaches every subscriber; a queue group gets each message once', async () => {
    const got = new Array<number>(COUNT).fill(0);
    const one = async (i: number) => {
      await sub.subscribe('fan', () => void got[i]!++);
    };
    const first = await timed(0, HALF, 50, one);
    const second = await timed(HALF, COUNT, 50, one);
    checkGrowth('http broker', first, second);
    const services = await subRegistry.getService('topic:fan');
    assert.deepEqual(services.map((s) => s.nodes.length), [1], 'one registry node for the process');

    // A queue group of 10 here too: each message goes to exactly one member, round robin.
    const members = new Array<number>(10).fill(0);
    for (let i = 0; i < members.length; i++) await sub.subscribe('fan', () => void members[i]!++, { queue: 'workers' });

    await pub.publish('fan', { header: { n: '1' }, body: new TextEncoder().encode('hello') });
    await waitFor(() => got.every((n) => n === 1), 10_000);
    for (let m = 1; m < 20; m++) await pub.publish('fan', { header: {}, body: new Uint8Array([m]) });
    await waitFor(() => got.every((n) => n === 20) && members.reduce((a, b) => a + b, 0) === 20, 10_000);
    assert.deepEqual(members, new Array(10).fill(2), 'round robin over the members');
  });

  it('unsubscribing keeps the node while others remain, and removes it with the last one', async () => {
    const received: Message[] = [];
    const a = await sub.subscribe('pair', (m) => void received.push(m));
    const b = await sub.subscribe('pair', (m) => void received.push(m));
    await a.unsubscribe();
    assert.equal((await subRegistry.getService('topic:pair')).length, 1);
    await pub.publish('pair', { header: {}, body: new Uint8Array([1]) });
    await waitFor(() => received.length === 1);
    await b.unsubscribe();
    assert.deepEqual(await subRegistry.getService('topic:pair'), []);
  });
});

describe('sidecar: 1,000 WebSocket subscribers of one topic', () => {
  const home = tempDir('mesh-sidecar-scale-');
  let sidecar: Awaited<ReturnType<typeof startSidecar>> | undefined;
  const subs: Subscriber[] = [];
  after(async () => {
    for (const s of subs) s.ws.terminate();
    await sidecar?.stop();
    home.cleanup();
  });

  it('all subscribe in O(1) each and one publish reaches every one', async () => {
    sidecar = await startSidecar(home.path);
    const one = async () => {
      subs.push(await subscribe(sidecar!.base, 'crowd'));
    };
    const first = await timed(0, HALF, 25, one);
    const second = await timed(HALF, COUNT, 25, one);
    checkGrowth('sidecar', first, second);
    assert.equal(subs.length, COUNT);
    const r = await http('POST', `${sidecar.base}/broker?topic=crowd`, { headers: { 'content-type': 'text/plain' }, body: 'to all' });
    assert.equal(r.status, 200, r.text);
    await waitFor(() => subs.every((s) => s.frames.length >= 1), 20_000);
    assert.ok(subs.every((s) => s.frames.length === 1 && s.bodies()[0] === 'to all'));
  });
});
