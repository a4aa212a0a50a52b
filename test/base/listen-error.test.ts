/** listenFailure and portHolder (src/base/util/listen-error.ts) on a port this process holds. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { listenFailure, portHolder } from '../../src/base/util/listen-error.js';

const errno = (code: string, message = code): NodeJS.ErrnoException => Object.assign(new Error(message), { code });

describe('listenFailure', { skip: process.platform !== 'linux' && 'reads /proc' }, () => {
  it('an address in use names the process that listens on the port, and the flag', async () => {
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as { port: number }).port;
    try {
      assert.deepEqual(portHolder(port), { pid: process.pid, command: 'node' });
      assert.equal(listenFailure(errno('EADDRINUSE'), `127.0.0.1:${port}`, '--admin_address'), `address already in use: node (pid ${process.pid}) listens on port ${port}; stop it, or give another --admin_address`);
    } finally {
      server.close();
    }
  });

  it('a port nobody listens on (the holder gone, or not visible): another process; no flag: none named', () => {
    assert.equal(portHolder(1), undefined);
    assert.equal(listenFailure(errno('EADDRINUSE'), '127.0.0.1:1'), 'address already in use: another process listens there; stop it');
  });

  it('other reasons', () => {
    assert.equal(listenFailure(errno('EADDRNOTAVAIL'), '10.9.9.9:80', '--address'), 'address not available (no interface of this machine has it): give another --address');
    assert.equal(listenFailure(errno('EACCES'), '0.0.0.0:80', '--address'), 'permission denied (a port below 1024 needs privileges): give another --address');
    assert.equal(listenFailure(errno('EMFILE', 'too many open files'), '127.0.0.1:8080', '--address'), 'too many open files');
  });
});
