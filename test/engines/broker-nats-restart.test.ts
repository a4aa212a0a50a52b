/**
 * NATS across a server restart: the test runs its own nats-server on a free port, kills it and
 * starts it again on the same port. While it is down a publish must reject (no silent buffering);
 * once it is back the subscriptions resume. Needs the nats-server binary (apt: nats-server).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { BrokerUnavailableError, type Message } from '../../src/engines/broker/broker.js';
import { NatsBroker } from '../../src/engines/broker/nats.js';
import { createServer, type Socket } from 'node:net';
import { once } from 'node:events';
import { freePort, waitFor } from '../helpers.js';
import { natsServerOrSkip, startNatsServer } from '../nats-server.js';

const silent = pino({ level: 'silent' });
const { binary, reason } = natsServerOrSkip();
const startServer = (port: number) => startNatsServer(binary!, port);

const text = (m: Message) => Buffer.from(m.body).toString();

/** A listener on the stopped server's port that closes every connection at once, counting them. */
async function closingDoor(port: number): Promise<{ attempts: () => number; close: () => Promise<void> }> {
  let attempts = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    attempts++;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.destroy();
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return {
    attempts: () => attempts,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe('nats broker across a server restart', { skip: !binary && reason }, () => {
  it('rejects publish while the server is down and resumes subscriptions after it is back', async () => {
    const port = await freePort();
    let server = await startServer(port);
    const address = `127.0.0.1:${port}`;
    const pub = new NatsBroker({ address, reconnectTimeWaitMs: 100, logger: silent });
    const sub = new NatsBroker({ address, reconnectTimeWaitMs: 100, logger: silent });
    const plain: string[] = [];
    const queued: string[] = [];
    try {
      await sub.subscribe('restart.t', (m) => void plain.push(text(m)));
      await sub.subscribe('restart.t', (m) => void queued.push(text(m)), { queue: 'workers' });
      await pub.publish('restart.t', { header: {}, body: new Uint8Array(Buffer.from('before')) });
      await waitFor(() => plain.length === 1 && queued.length === 1);

      await server.stop();
      await waitFor(() => !pub.connected && !sub.connected, 5000);
      await assert.rejects(
        pub.publish('restart.t', { header: {}, body: new Uint8Array(Buffer.from('while-down')) }),
        BrokerUnavailableError,
      );
      // Still down after the client has tried to reconnect: the port answers with a plain socket
      // that closes at once (no nats-server), and counts the attempts.
      const door = await closingDoor(port);
      try {
        await waitFor(() => door.attempts() >= 3, 10_000);
        await assert.rejects(
          pub.publish('restart.t', { header: {}, body: new Uint8Array(Buffer.from('while-reconnecting')) }),
          BrokerUnavailableError,
        );
      } finally {
        await door.close();
      }

      server = await startServer(port);
      await waitFor(() => pub.connected && sub.connected, 10_000);
      // The subscriber re-sends its subscriptions on reconnect; publish until they are back.
      let n = 0;
      await waitFor(async () => {
        await pub.publish('restart.t', { header: {}, body: new Uint8Array(Buffer.from(`after-${n++}`)) });
        return plain.some((t) => t.startsWith('after-')) && queued.some((t) => t.startsWith('after-'));
      }, 10_000, 50);
      // A marker last: NATS delivers in order, so once both have it, a rejected publish that had
      // been buffered and sent on reconnect would be in already.
      await pub.publish('restart.t', { header: {}, body: new Uint8Array(Buffer.from('marker')) });
      await waitFor(() => plain.includes('marker') && queued.includes('marker'));
      for (const got of [plain, queued]) {
        assert.equal(got[0], 'before');
        assert.ok(!got.includes('while-down'), 'a rejected publish is never delivered later');
        assert.ok(!got.includes('while-reconnecting'), 'a rejected publish is never delivered later');
      }
    } finally {
      await pub.close();
      await sub.close();
      await server.stop();
    }
  });
});
