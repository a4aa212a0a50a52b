/**
 * How `mesh run` chooses its apps' ports (src/cli/run-app.ts holdAppPorts): each is held by a
 * listener on 127.0.0.1 until the sidecars have bound theirs, so a sidecar's port 0 cannot be an
 * app's port; an `auto` port is never one another app has or got.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { holdAppPorts, holdLoopbackPort, type HeldPort } from '../../src/cli/run-app.js';

/** Listens on host:port and closes again: the error code, or 'ok'. */
async function tryListen(port: number, host: string): Promise<string> {
  const server = createServer();
  server.listen({ port, host });
  try {
    await Promise.race([once(server, 'listening'), once(server, 'error').then(([err]) => Promise.reject(err as Error))]);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? String(err);
  }
  await new Promise<void>((r) => server.close(() => r()));
  return 'ok';
}

describe('mesh run: the apps\' ports', () => {
  it('a port source that first returns a port another app has: skipped; every chosen port held until released, the skipped ones released at once', async () => {
    const events: string[] = [];
    const fromZero = [3000, 4000, 4000, 4001];
    const hold = async (port: number): Promise<HeldPort> => {
      const p = port === 0 ? fromZero.shift()! : port;
      events.push(`hold ${p}`);
      return { port: p, release: async () => void events.push(`release ${p}`) };
    };
    const { ports, held } = await holdAppPorts([3000, 'auto', 'auto'], hold);
    assert.deepEqual(ports, [3000, 4000, 4001]);
    assert.deepEqual(events, ['hold 3000', 'hold 3000', 'hold 4000', 'hold 4000', 'hold 4001', 'release 3000', 'release 4000']);
    assert.deepEqual(held.map((h) => h.port), [3000, 4000, 4001]);
    await Promise.all(held.map((h) => h.release()));
    assert.deepEqual(events.slice(7), ['release 3000', 'release 4000', 'release 4001']);
  });

  it('a fixed port in use is not held but still the app\'s; a source with no port left is an error, the ports held so far released', async () => {
    const released: number[] = [];
    const hold = async (port: number): Promise<HeldPort | undefined> => (port === 0 ? undefined : port === 80 ? undefined : { port, release: async () => void released.push(port) });
    const fixed = await holdAppPorts([80, 8000], hold);
    assert.deepEqual(fixed.ports, [80, 8000]);
    assert.deepEqual(fixed.held.map((h) => h.port), [8000]);
    await assert.rejects(holdAppPorts([8001, 'auto'], hold), /no free port on 127\.0\.0\.1/);
    assert.deepEqual(released, [8001]);
  });

  it('while held, a port cannot be had by another listener (127.0.0.1 or every address); once released it can', async () => {
    const { ports, held } = await holdAppPorts(['auto']);
    const port = ports[0]!;
    assert.equal(await tryListen(port, '127.0.0.1'), 'EADDRINUSE');
    assert.equal(await tryListen(port, '0.0.0.0'), 'EADDRINUSE');
    await Promise.all(held.map((h) => h.release()));
    assert.equal(await tryListen(port, '127.0.0.1'), 'ok');
  });

  it('holdLoopbackPort of a port in use: undefined', async () => {
    const h = (await holdLoopbackPort())!;
    try {
      assert.equal(await holdLoopbackPort(h.port), undefined);
    } finally {
      await h.release();
    }
  });
});
