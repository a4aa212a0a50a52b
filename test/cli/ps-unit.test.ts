/** The process records and `mesh ps`'s table, without processes: the record's round trip, what is skipped, the uptime and the columns. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { newProcessId, processOfNode, processService, type ProcessRecord } from '../../src/engines/registry/processes.js';
import { PROCESS_SERVICE, validateService } from '../../src/engines/registry/validate.js';
import { formatProcesses, formatUptime, processesNamed } from '../../src/cli/ps.js';

const RECORD: ProcessRecord = {
  id: 'vm-4242-0a1b2c',
  kind: 'sidecar',
  name: 'go.mesh.srv.orders',
  pid: 4242,
  host: 'vm',
  admin: { address: '127.0.0.1', port: 9902 },
  startedMs: 1_795_000_000_000,
  mtls: 'strict',
  listeners: ['admin=127.0.0.1:9902', 'sidecar=127.0.0.1:8081'],
  version: '0.1.0',
};

describe('process records', () => {
  it('a record is a valid node of the reserved service and reads back the same', () => {
    const service = processService(RECORD);
    assert.equal(service.name, PROCESS_SERVICE);
    validateService(service);
    assert.deepEqual(processOfNode(service.nodes[0]!), RECORD);
  });

  it('a node whose kind, pid or start does not parse is skipped, naming the field', () => {
    const node = processService(RECORD).nodes[0]!;
    const bad = (metadata: Record<string, string>) => processOfNode({ ...node, metadata: { ...node.metadata, ...metadata } });
    assert.deepEqual(bad({ pid: '0' }), { skipped: 'process record vm-4242-0a1b2c: pid "0" is not a process id' });
    assert.deepEqual(bad({ kind: 'Sidecar; rm -rf' }), { skipped: 'process record vm-4242-0a1b2c: kind "Sidecar; rm -rf" is not a command name' });
    assert.deepEqual(bad({ started: '-1' }), { skipped: 'process record vm-4242-0a1b2c: started "-1" is not epoch milliseconds' });
  });

  it('an id is the host, the pid and 6 hex digits, and a valid node id whatever the host name', () => {
    assert.match(newProcessId(7, 'build box_1'), /^build-box-1-7-[0-9a-f]{6}$/);
    assert.notEqual(newProcessId(7, 'a'), newProcessId(7, 'a'));
    for (const host of ['-x', 'a..b', '', '__']) validateService(processService({ ...RECORD, id: newProcessId(7, host) }));
  });
});

describe('mesh ps', () => {
  it('uptime: seconds, minutes, hours, days', () => {
    assert.deepEqual([0, 9_999, 192_000, 4 * 3600_000 + 5 * 60_000, 2 * 86400_000 + 3 * 3600_000, -5].map(formatUptime), ['0s', '9s', '3m12s', '4h05m', '2d3h', '0s']);
  });

  it('the table: columns padded to the widest cell, - for an empty one', () => {
    const other: ProcessRecord = { ...RECORD, id: 'vm-1-ffffff', kind: 'api', name: '', pid: 1, mtls: 'off', listeners: [] };
    assert.equal(
      formatProcesses([other, RECORD], RECORD.startedMs + 61_000),
      'ID              KIND     NAME                PID   HOST  ADMIN           UPTIME  MTLS    LISTENERS\n' +
        'vm-1-ffffff     api      -                   1     vm    127.0.0.1:9902  1m01s   off     -\n' +
        'vm-4242-0a1b2c  sidecar  go.mesh.srv.orders  4242  vm    127.0.0.1:9902  1m01s   strict  admin=127.0.0.1:9902,sidecar=127.0.0.1:8081\n',
    );
  });

  it('a target names the process of that id, else every one of that name, kind or pid', () => {
    const api: ProcessRecord = { ...RECORD, id: 'vm-1-ffffff', kind: 'api', name: '', pid: 1 };
    assert.deepEqual(processesNamed([api, RECORD], 'vm-4242-0a1b2c'), [RECORD]);
    assert.deepEqual(processesNamed([api, RECORD], 'go.mesh.srv.orders'), [RECORD]);
    assert.deepEqual(processesNamed([api, RECORD], 'api'), [api]);
    assert.deepEqual(processesNamed([api, RECORD], '4242'), [RECORD]);
    assert.deepEqual(processesNamed([api, RECORD], 'nope'), []);
  });
});
