/**
 * src/base/http/reuse-port.ts: which Node versions listen with reusePort, the shared-port list a
 * worker is given, and (where Node has reusePort) two servers of one process sharing a port
 * given as 0 through the list the first one reports. The workers of --concurrency with real
 * processes are in test/cli/concurrency.test.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { parseSharedPorts, probeListen, ReusePortListening, reusePortSupported } from '../../src/base/http/reuse-port.js';

const close = (s: Server) => new Promise<void>((resolve) => s.close(() => resolve()));

describe('reusePortSupported', () => {
  test('Linux with Node 22.12+, 23.1+ or 24+', () => {
    assert.equal(reusePortSupported('linux', '20.18.1'), false);
    assert.equal(reusePortSupported('linux', '22.11.0'), false);
    assert.equal(reusePortSupported('linux', '22.12.0'), true);
    assert.equal(reusePortSupported('linux', '23.0.0'), false);
    assert.equal(reusePortSupported('linux', '23.1.0'), true);
    assert.equal(reusePortSupported('linux', '24.21.0'), true);
    assert.equal(reusePortSupported('darwin', '24.21.0'), false);
    assert.equal(reusePortSupported('win32', '24.21.0'), false);
  });
});

describe('parseSharedPorts', () => {
  test('a JSON list of {host, port}; anything else throws', () => {
    assert.deepEqual(parseSharedPorts('[{"host":"127.0.0.1","port":8080}]'), [{ host: '127.0.0.1', port: 8080 }]);
    assert.deepEqual(parseSharedPorts('[]'), []);
    assert.throws(() => parseSharedPorts('{}'), /not a list of \{host, port\}/);
    assert.throws(() => parseSharedPorts('[{"host":"h","port":70000}]'), /not a list/);
    assert.throws(() => parseSharedPorts('nope'), SyntaxError);
  });
});

describe('ReusePortListening', { skip: reusePortSupported() ? false : `reusePort needs Linux and Node 22.12+ (this is ${process.platform} ${process.version})` }, () => {
  test('a second listener given the first one\'s ports binds the same port 0 gave; an explicit port is kept', async () => {
    const first = new ReusePortListening([]);
    const a1 = createServer();
    const a2 = createServer();
    const b1 = createServer();
    const b2 = createServer();
    try {
      const p1 = (await first.listen(a1, '127.0.0.1', 0)).port;
      const p2 = (await first.listen(a2, '127.0.0.1', 0)).port;
      assert.notEqual(p1, p2);
      assert.deepEqual(first.ports(), [
        { host: '127.0.0.1', port: p1 },
        { host: '127.0.0.1', port: p2 },
      ]);
      const second = new ReusePortListening(first.ports());
      // Without reusePort on both sockets the second bind would fail with EADDRINUSE.
      assert.equal((await second.listen(b1, '127.0.0.1', 0)).port, p1);
      assert.equal((await second.listen(b2, '127.0.0.1', p2)).port, p2);
      assert.deepEqual(second.ports(), [{ host: '127.0.0.1', port: p1 }]);
    } finally {
      await Promise.all([a1, a2, b1, b2].filter((s) => s.listening).map(close));
    }
  });
});

describe('probeListen', () => {
  test('a port another server holds (with reusePort where Node has it): EADDRINUSE; once it is closed: free', async () => {
    const holder = createServer();
    await new ReusePortListening([]).listen(holder, '127.0.0.1', 0);
    const port = (holder.address() as { port: number }).port;
    try {
      assert.equal((await probeListen('127.0.0.1', port))?.code, 'EADDRINUSE');
    } finally {
      await close(holder);
    }
    assert.equal(await probeListen('127.0.0.1', port), undefined);
  });
});
