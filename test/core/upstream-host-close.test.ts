/**
 * What a host closes with it (src/core/upstream/host.ts onClose): a gRPC channel made for the host is
 * closed once when the host leaves its cluster; one closed some other way is forgotten; a host
 * already closed keeps nothing. And connections reported from outside the pool count in cx_*.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Host, type HostSpec } from '../../src/core/upstream/host.js';

const spec: HostSpec = { address: '127.0.0.1', port: 9, nodeId: 'n', hostname: 'n', metadata: {}, weight: 1, zone: '', region: '', canary: false };
const pool = { connections: 1, connectTimeoutMs: 1000, keepAliveTimeoutMs: 1000 };

describe('Host.onClose and reported connections', () => {
  it('runs each kept hook once at close, not a forgotten one; after close keeps nothing', async () => {
    const host = new Host(spec, pool);
    const ran: string[] = [];
    assert.equal(typeof host.onClose(() => ran.push('a')), 'function');
    const forget = host.onClose(() => ran.push('b'))!;
    forget();
    await host.close();
    await host.close();
    assert.deepEqual(ran, ['a']);
    assert.equal(host.onClose(() => ran.push('c')), undefined);
    assert.deepEqual(ran, ['a']);
  });

  it('connectionOpened/Closed/Failed count in cx_* and reach the listener', () => {
    const events: string[] = [];
    const host = new Host(spec, pool, { connect: () => events.push('connect'), disconnect: () => events.push('disconnect'), connectFailure: () => events.push('fail') });
    host.connectionOpened();
    host.connectionClosed();
    host.connectionClosed();
    host.connectionFailed();
    assert.deepEqual({ total: host.stats.cx_total, active: host.stats.cx_active, fail: host.stats.cx_connect_fail }, { total: 1, active: 0, fail: 1 });
    assert.deepEqual(events, ['connect', 'disconnect', 'disconnect', 'fail']);
  });
});
