/**
 * The broker contract: every backend (memory, http, nats) passes these cases. The factory gives two
 * brokers sharing one backend (the same instance is fine for memory); messages are published on
 * the first and subscribed on the second unless a case says otherwise.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Broker, Message } from '../src/engines/broker/broker.js';
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

/**
 * The durable contract (backends with durable subscriptions: nats on JetStream, http with its
 * SQLite outbox): acks, nacks and redelivery with a delivery count and a stable id, the
 * dead-letter topic after maxDeliver, messages kept while no subscriber of the name runs, a name
 * shared by several subscribers, redelivery after the ack wait.
 */
export function durableContract(name: string, factory: BrokerFactory, options: { skip?: string | false } = {}): void {
  async function withBrokers(fn: (pub: Broker, sub: Broker) => Promise<void>): Promise<void> {
    const { brokers, cleanup } = await factory();
    try {
      await fn(brokers[0], brokers[1]);
    } finally {
      await cleanup();
    }
  }

  describe(`broker durable contract: ${name}`, { skip: options.skip }, () => {
    it('acknowledges a handler that returns: one delivery, with an id and a delivery count of 1', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('ack');
        const got: Message[] = [];
        const s = await sub.subscribe(topic, (m) => void got.push(m), { durable: 'acker' });
        assert.equal(s.durable, 'acker');
        await pub.publish(topic, { header: { 'X-A': '1' }, body: bytes('one') });
        await pub.publish(topic, { header: { 'Mesh-Id': 'given-id' }, body: bytes('two') });
        await waitFor(() => got.length >= 2, 10_000);
        // a third message last: once it is in, a redelivery of the first two would be too (they were acked long before)
        await pub.publish(topic, { header: {}, body: bytes('three') });
        await waitFor(() => got.some((m) => text(m) === 'three'), 10_000);
        assert.deepEqual(got.map(text).sort(), ['one', 'three', 'two']);
        const one = got.find((m) => text(m) === 'one')!;
        assert.equal(one.deliveryCount, 1);
        assert.equal(one.header['X-A'], '1');
        assert.ok(one.id && one.id === one.header['Mesh-Id'], 'the id is the Mesh-Id header the publisher set');
        assert.equal(got.find((m) => text(m) === 'two')!.id, 'given-id');
      }));

    it('redelivers a message whose handler throws, with the same id and a growing delivery count', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('nack');
        const seen: Array<{ id?: string; n?: number }> = [];
        await sub.subscribe(
          topic,
          async (m) => {
            seen.push({ id: m.id, n: m.deliveryCount });
            if (seen.length === 1) throw new Error('first attempt fails');
            if (seen.length === 2) {
              await new Promise((r) => setImmediate(r));
              throw new Error('second attempt rejects');
            }
          },
          { durable: 'retrier', maxDeliver: 5 },
        );
        await pub.publish(topic, { header: {}, body: bytes('again') });
        await waitFor(() => seen.length >= 3, 10_000);
        assert.deepEqual(seen.map((s) => s.n), [1, 2, 3]);
        assert.equal(new Set(seen.map((s) => s.id)).size, 1);
      }));

    it('moves a message to <topic>.dlq after maxDeliver failed attempts', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('dlq');
        let attempts = 0;
        await sub.subscribe(topic, () => {
          attempts++;
          throw new Error('always fails');
        }, { durable: 'doomed', maxDeliver: 3 });
        const dead: Message[] = [];
        await pub.subscribe(`${topic}.dlq`, (m) => void dead.push(m), { durable: 'dlq-reader' });
        await pub.publish(topic, { header: { 'X-Keep': 'kept' }, body: bytes('poison') });
        await waitFor(() => dead.length === 1, 15_000);
        assert.equal(attempts, 3);
        const [d] = dead;
        assert.equal(text(d!), 'poison');
        assert.equal(d!.header['X-Keep'], 'kept');
        assert.equal(d!.header['Mesh-Dlq-Topic'], topic);
        assert.equal(d!.header['Mesh-Dlq-Consumer'], 'doomed');
        assert.equal(d!.header['Mesh-Dlq-Deliveries'], '3');
        assert.equal(d!.header['Mesh-Dlq-Error'], 'always fails');
      }));

    it('keeps messages published while no subscriber of the name runs', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('keep');
        const first: string[] = [];
        // A short ack wait: what the stopped subscriber had asked for but not handled comes again soon.
        const s = await sub.subscribe(topic, (m) => void first.push(text(m)), { durable: 'keeper', ackWaitMs: 1000 });
        await pub.publish(topic, { header: {}, body: bytes('m0') });
        await waitFor(() => first.length === 1, 10_000);
        await s.unsubscribe();
        for (let i = 1; i <= 5; i++) await pub.publish(topic, { header: {}, body: bytes(`m${i}`) });
        const later: string[] = [];
        await pub.subscribe(topic, (m) => void later.push(text(m)), { durable: 'keeper', ackWaitMs: 1000 });
        await waitFor(() => later.length >= 5, 10_000);
        assert.deepEqual(first, ['m0']);
        assert.deepEqual([...later].sort(), ['m1', 'm2', 'm3', 'm4', 'm5']);
      }));

    it('shares a name among subscribers (each message to one) and keeps other names separate', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('shared');
        const a: string[] = [];
        const b: string[] = [];
        const other: string[] = [];
        await sub.subscribe(topic, (m) => void a.push(text(m)), { durable: 'workers' });
        await pub.subscribe(topic, (m) => void b.push(text(m)), { durable: 'workers' });
        await sub.subscribe(topic, (m) => void other.push(text(m)), { durable: 'audit' });
        const n = 50;
        for (let i = 0; i < n; i++) await pub.publish(topic, { header: {}, body: bytes(`m${i}`) });
        await waitFor(() => a.length + b.length >= n && other.length >= n, 15_000);
        assert.equal(new Set([...a, ...b]).size, n);
        assert.equal(new Set(other).size, n);
      }));

    it('redelivers a message not acknowledged within the ack wait', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('ackwait');
        const counts: number[] = [];
        await sub.subscribe(
          topic,
          (m) => {
            counts.push(m.deliveryCount ?? 0);
            if (counts.length === 1) return new Promise<void>(() => undefined); // hangs: never acks
          },
          { durable: 'slow', ackWaitMs: 500 },
        );
        await pub.publish(topic, { header: {}, body: bytes('x') });
        await waitFor(() => counts.length >= 2, 15_000);
        assert.deepEqual(counts.slice(0, 2), [1, 2]);
      }));

    it('lists the dead letters of a topic and replays them to it, with the same id', () =>
      withBrokers(async (pub, sub) => {
        const topic = freshTopic('replay');
        let failing = true;
        const ok: Message[] = [];
        let attempts = 0;
        await sub.subscribe(topic, (m) => {
          attempts++;
          if (failing) throw new Error('down for now');
          ok.push(m);
        }, { durable: 'replayed', maxDeliver: 2 });
        await pub.publish(topic, { header: { 'X-K': 'v' }, body: bytes('later') });
        const list = () => pub.listDeadLetters!(topic, 100);
        await waitFor(async () => (await list()).length === 1, 15_000);
        assert.equal(attempts, 2);
        const [dead] = await list();
        assert.equal(text(dead!), 'later');
        assert.equal(dead!.header['Mesh-Dlq-Consumer'], 'replayed');
        failing = false;
        assert.equal(await pub.replayDeadLetters!(topic, 100), 1);
        await waitFor(() => ok.length === 1, 15_000);
        assert.equal(ok[0]!.id, dead!.id, 'a replay keeps the Mesh-Id');
        assert.equal(ok[0]!.header['X-K'], 'v');
        assert.equal(ok[0]!.header['Mesh-Dlq-Topic'], undefined);
        assert.equal(ok[0]!.deliveryCount, 1);
        assert.deepEqual(await list(), []);
      }));

    it('rejects bad durable options with a clear error', () =>
      withBrokers(async (_pub, sub) => {
        await assert.rejects(sub.subscribe(freshTopic('bad'), () => undefined, { durable: 'has space' }), /durable/);
        await assert.rejects(sub.subscribe(freshTopic('bad'), () => undefined, { durable: 'x', maxDeliver: 0 }), /maxDeliver/);
        await assert.rejects(sub.subscribe(freshTopic('bad'), () => undefined, { maxDeliver: 3 }), /durable/);
      }));
  });
}
