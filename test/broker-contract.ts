/**
 * The broker contract: every backend (memory, http, nats) passes these cases. The factory gives two
 * brokers sharing one backend (the same instance is fine for memory); messages are published on
 * the first and subscribed on the second unless a case says otherwise.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Broker, Message } from '../src/broker/broker.js';
import { waitFor } from './helpers.js';

export type BrokerFactory = () => Promise<{ brokers: [Broker, Broker]; cleanup(): Promise<void> }>;

interface Received {
  topic: string;
  message: Message;
}

function collector(): { got: Received[]; handler: (message: Message, topic: string) => void } {
  const got: Received[] = [];
  return { got, handler: (message, topic) => void got.push({ topic, message }) };
}

const text = (m: Message) => Buffer.from(m.body).toString();
const bytes = (s: string) => new Uint8Array(Buffer.from(s));
/** A fresh topic per case so cases never see each other's traffic on a shared server. */
const freshTopic = (what: string) => `mesh.test.${what}.${randomUUID().slice(0, 8)}`;

const MARKER = 'marker';
/** What a collector got, markers left out. */
const real = (c: { got: Received[] }) => c.got.filter((r) => text(r.message) !== MARKER);

/**
 * Publishes markers on topic until every collector has got one. A subscription delivers in order,
 * so once its marker is in, everything published before it has arrived too: counting then is exact,
 * however slow the machine.
 */
async function flushed(pub: Broker, topic: string, collectors: Array<{ got: Received[] }>): Promise<void> {
  await waitFor(
    async () => {
      await pub.publish(topic, { header: {}, body: bytes(MARKER) });
      return collectors.every((c) => c.got.some((r) => text(r.message) === MARKER));
    },
    10_000,
    50,
  );
}

export function brokerContract(name: string, factory: BrokerFactory, options: { skip?: string | false } = {}): void {
  async function withBrokers(fn: (pub: Broker, sub: Broker) => Promise<void>): Promise<void> {
    const { brokers, cleanup } = await factory();
    try {
      await fn(brokers[0], brokers[1]);
    } finally {
      await cleanup();
    }
  }

  describe(`broker contract: ${name}`, { skip: options.skip }, () => {
    it('delivers headers and binary bytes intact, with the topic', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('bytes');
        const c = collector();
        const s = await sub.subscribe(topic, c.handler);
        assert.equal(s.topic, topic);
        assert.equal(s.queue, undefined);
        const body = new Uint8Array(256);
        for (let i = 0; i < 256; i++) body[i] = i; // includes 0x00 and 0xff
        const header = {
          'Content-Type': 'application/octet-stream',
          Timestamp: '1499951537',
          'X-Trace-Id': 'abc-123',
          'X-Text': 'héllo ✓ "quoted" {json}',
        };
        await pub.publish(topic, { header, body });
        await waitFor(() => c.got.length === 1);
        const [r] = c.got;
        assert.equal(r!.topic, topic);
        assert.deepEqual(r!.message.header, header);
        assert.ok(r!.message.body instanceof Uint8Array);
        assert.equal(Buffer.compare(Buffer.from(r!.message.body), Buffer.from(body)), 0);
        assert.equal(r!.message.body[0], 0x00);
        assert.equal(r!.message.body[255], 0xff);
      }));

    it('delivers a 1 MiB body and an empty body', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('big');
        const c = collector();
        await sub.subscribe(topic, c.handler);
        const big = new Uint8Array(randomBytes(1024 * 1024));
        big[0] = 0x00;
        big[big.length - 1] = 0xff;
        await pub.publish(topic, { header: {}, body: big });
        await pub.publish(topic, { header: {}, body: new Uint8Array(0) });
        await waitFor(() => c.got.length === 2, 10_000);
        const bodies = c.got.map((r) => r.message.body).sort((a, b) => b.length - a.length);
        assert.equal(bodies[0]!.length, big.length);
        assert.equal(Buffer.compare(Buffer.from(bodies[0]!), Buffer.from(big)), 0);
        assert.equal(bodies[1]!.length, 0);
      }));

    it('resolves a publish with no subscribers', () =>
      withBrokers(async (pub) => {
        await pub.publish(freshTopic('nobody'), { header: {}, body: bytes('into the void') });
      }));

    it('fans out to every subscriber without a queue', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('fanout');
        const cs = [collector(), collector(), collector()];
        await sub.subscribe(topic, cs[0]!.handler);
        await sub.subscribe(topic, cs[1]!.handler);
        await pub.subscribe(topic, cs[2]!.handler);
        for (let i = 0; i < 3; i++) await pub.publish(topic, { header: { n: String(i) }, body: bytes(`m${i}`) });
        await waitFor(() => cs.every((c) => c.got.length >= 3));
        await flushed(pub, topic, cs);
        for (const c of cs) {
          assert.equal(real(c).length, 3);
          assert.deepEqual(real(c).map((r) => text(r.message)).sort(), ['m0', 'm1', 'm2']);
        }
      }));

    it('gives each message to one member of a queue group and all to a plain subscriber', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('queue');
        const q1 = collector();
        const q2 = collector();
        const plain = collector();
        const s1 = await sub.subscribe(topic, q1.handler, { queue: 'workers' });
        assert.equal(s1.queue, 'workers');
        await pub.subscribe(topic, q2.handler, { queue: 'workers' });
        await sub.subscribe(topic, plain.handler);
        const n = 100;
        for (let i = 0; i < n; i++) await pub.publish(topic, { header: {}, body: bytes(`m${i}`) });
        await waitFor(() => plain.got.length >= n && q1.got.length + q2.got.length >= n, 10_000);
        await flushed(pub, topic, [q1, q2, plain]);
        assert.equal(real(plain).length, n);
        assert.equal(new Set(real(plain).map((r) => text(r.message))).size, n);
        const queued = [...real(q1), ...real(q2)].map((r) => text(r.message));
        assert.equal(queued.length, n, 'the queue group got each message exactly once');
        assert.equal(new Set(queued).size, n, 'no message twice within the group');
        assert.ok(real(q1).length > 0 && real(q2).length > 0, `both members got some (${real(q1).length}/${real(q2).length})`);
      }));

    it('keeps separate queue groups separate', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('groups');
        const a = collector();
        const b = collector();
        await sub.subscribe(topic, a.handler, { queue: 'a' });
        await sub.subscribe(topic, b.handler, { queue: 'b' });
        for (let i = 0; i < 5; i++) await pub.publish(topic, { header: {}, body: bytes(`m${i}`) });
        await waitFor(() => a.got.length >= 5 && b.got.length >= 5);
        await flushed(pub, topic, [a, b]);
        assert.equal(real(a).length, 5);
        assert.equal(real(b).length, 5);
      }));

    it('stops delivery after unsubscribe', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('unsub');
        const gone = collector();
        const stays = collector();
        const s = await sub.subscribe(topic, gone.handler);
        await sub.subscribe(topic, stays.handler);
        await pub.publish(topic, { header: {}, body: bytes('before') });
        await waitFor(() => gone.got.length === 1 && stays.got.length === 1);
        await s.unsubscribe();
        await s.unsubscribe(); // idempotent
        await pub.publish(topic, { header: {}, body: bytes('after') });
        await waitFor(() => stays.got.length === 2);
        // the same subscriber process: once stays has the marker, gone would have had 'after' too
        await flushed(pub, topic, [stays]);
        assert.deepEqual(real(gone).map((r) => text(r.message)), ['before']);
        assert.deepEqual(real(stays).map((r) => text(r.message)), ['before', 'after']);
      }));

    it('keeps delivering after a handler throws or rejects', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('throws');
        const seen: string[] = [];
        await sub.subscribe(topic, async (m) => {
          const t = text(m);
          seen.push(t);
          if (t === 'sync') throw new Error('handler failed on purpose');
          if (t === 'async') {
            await new Promise((r) => setImmediate(r)); // rejects after an await, not synchronously
            throw new Error('handler rejected on purpose');
          }
        });
        await sub.subscribe(
          topic,
          (m) => {
            if (text(m) === 'sync') throw new Error('plain function throws on purpose');
          },
        );
        await pub.publish(topic, { header: {}, body: bytes('sync') });
        await waitFor(() => seen.length === 1);
        await pub.publish(topic, { header: {}, body: bytes('async') });
        await waitFor(() => seen.length === 2);
        await pub.publish(topic, { header: {}, body: bytes('fine') });
        await waitFor(() => seen.length === 3);
        assert.deepEqual(seen, ['sync', 'async', 'fine']);
      }));

    it('rejects an invalid topic', () =>
      withBrokers(async (pub, sub) => {
        await assert.rejects(pub.publish('', { header: {}, body: bytes('x') }));
        await assert.rejects(sub.subscribe('', () => undefined));
      }));
  });
}
