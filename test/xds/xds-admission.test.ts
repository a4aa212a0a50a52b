/**
 * Who may talk to mesh's xDS server, and what a client's text costs its log (docs/xds.md,
 * Admitting only your clients; Limits). In process: a memory registry, the server on port 0, real
 * grpc-js ADS streams.
 *
 * - A NACK's error is cut and escaped: 20 streams each NACKing with 900 KB add about 20 KB of log,
 *   not 18 MB, and no raw control character.
 * - With a token, a stream without it or with another one ends UNAUTHENTICATED; with node ids, a
 *   node not listed (or one that changes its id) ends PERMISSION_DENIED. Refusals are counted, and
 *   logged once in 10 s however many clients retry.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { XdsControlPlane } from '../../src/xds/control-plane.js';
import { TYPE_URLS } from '../../src/xds/resources.js';
import { resolveSettings } from '../../src/core/upstream/config.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { clientText } from '../../src/base/util/text.js';
import { AdsProbe } from '../fixtures/xds-clients.js';
import { waitFor } from '../helpers.js';

function plane(admission?: { token?: string; nodeIds?: string[] }) {
  const registry = new MemoryRegistry();
  const stats = new StatsStore();
  const lines: string[] = [];
  const logging = new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never });
  const cp = new XdsControlPlane({ registry, settings: resolveSettings(undefined, undefined, 'round_robin', true), stats, log: logging.get('server'), admission });
  const stat = (name: string) => stats.list().find((s) => s.name === name)?.value ?? 0;
  return { registry, cp, lines, stat };
}

const bearer = (token: string) => {
  const m = new grpc.Metadata();
  m.set('authorization', `Bearer ${token}`);
  return m;
};

describe('client text in the log lines of mesh xds', () => {
  it('cut to a bound first, then escaped, with what was left out counted', () => {
    assert.equal(clientText('plain'), 'plain');
    assert.equal(clientText('a\u001b[31mb\nc'), 'a\\x1b[31mb\\x0ac');
    assert.equal(clientText('x'.repeat(300)), `${'x'.repeat(256)}…(+44)`);
    assert.equal(clientText('\n'.repeat(10_000), 4), `${'\\x0a'.repeat(4)}…(+9996)`);
    // Never half of a surrogate pair.
    assert.equal(clientText(`${'a'.repeat(3)}😀tail`, 4), 'aaa…(+6)');
  });

  it('20 streams each NACKing with 900 KB: about 1 KB of log each, escaped', async () => {
    const { registry, cp, lines, stat } = plane();
    await registry.register({ name: 'alpha', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a1', address: '127.0.0.1', port: 1001, metadata: {} }] });
    const address = `127.0.0.1:${await cp.start('127.0.0.1', 0)}`;
    const probes = Array.from({ length: 20 }, (_, i) => new AdsProbe(address, `nack-${i}\u001b[2J`));
    try {
      const huge = `bad\u001b]0;owned\u0007${'\n'.repeat(10)}${'y'.repeat(900 * 1024)}`;
      const before = lines.join('').length;
      await Promise.all(probes.map((p) => p.request(TYPE_URLS.cluster)));
      for (const p of probes) p.send(TYPE_URLS.cluster, [], undefined, huge);
      await waitFor(() => stat('xds.nacks') === 20);
      await waitFor(() => lines.filter((l) => l.includes('rejected cluster')).length === 20);
      const grown = lines.join('').length - before;
      assert.ok(grown < 20 * 4096, `the log grew by ${grown} bytes`);
      const entry = JSON.parse(lines.find((l) => l.includes('rejected cluster'))!) as { error: string; node: string; msg: string };
      assert.ok(entry.error.startsWith('bad\\x1b]0;owned\\x07\\x0a'), entry.error);
      assert.match(entry.error, /…\(\+\d+\)$/);
      assert.match(entry.node, /^nack-\d+\\x1b\[2J$/);
      assert.ok(!/[\u0000-\u001f]/.test(entry.msg));
    } finally {
      for (const p of probes) p.close();
      await cp.close();
      await registry.close();
    }
  });
});

describe('admitting only the clients of mesh xds', () => {
  const TOKEN = 'xds-token-0123456789abcdef';
  const { registry, cp, lines, stat } = plane({ token: TOKEN, nodeIds: ['edge-*', 'greeter-client'] });
  let address = '';
  before(async () => {
    await registry.register({ name: 'alpha', version: '1', metadata: {}, endpoints: [], nodes: [{ id: 'a1', address: '127.0.0.1', port: 1001, metadata: {} }] });
    address = `127.0.0.1:${await cp.start('127.0.0.1', 0)}`;
  });
  after(async () => {
    await cp.close();
    await registry.close();
  });

  const refused = async (probe: AdsProbe) => {
    try {
      probe.send(TYPE_URLS.cluster, []);
      return await probe.status;
    } finally {
      probe.close();
    }
  };

  it('the token and an admitted node id: served', async () => {
    for (const id of ['edge-1', 'greeter-client']) {
      const probe = new AdsProbe(address, id, undefined, '', bearer(TOKEN));
      try {
        assert.equal((await probe.request(TYPE_URLS.cluster)).resources.length, 1);
      } finally {
        probe.close();
      }
    }
    assert.equal(stat('xds.streams_refused'), 0);
  });

  it('no token, another token: UNAUTHENTICATED; a node id not listed, or one that changes: PERMISSION_DENIED; counted, logged once', async () => {
    const noToken = await refused(new AdsProbe(address, 'edge-1'));
    assert.equal(noToken.code, grpc.status.UNAUTHENTICATED);
    const wrong = await refused(new AdsProbe(address, 'edge-1', undefined, '', bearer(`${TOKEN}x`)));
    assert.equal(wrong.code, grpc.status.UNAUTHENTICATED);
    const basic = new grpc.Metadata();
    basic.set('authorization', `Basic ${Buffer.from(`u:${TOKEN}`).toString('base64')}`);
    assert.equal((await refused(new AdsProbe(address, 'edge-1', undefined, '', basic))).code, grpc.status.UNAUTHENTICATED);
    const stranger = await refused(new AdsProbe(address, `intruder\n${'z'.repeat(5000)}`, undefined, '', bearer(TOKEN)));
    assert.equal(stranger.code, grpc.status.PERMISSION_DENIED);
    assert.equal((await refused(new AdsProbe(address, '', undefined, '', bearer(TOKEN)))).code, grpc.status.PERMISSION_DENIED);

    // Admitted, then its node id changes to one not listed.
    const turncoat = new AdsProbe(address, 'edge-2', undefined, '', bearer(TOKEN));
    try {
      await turncoat.request(TYPE_URLS.cluster);
      turncoat.nodeId = 'edge-3';
      turncoat.send(TYPE_URLS.endpoint, ['alpha']);
      assert.equal((await turncoat.status).code, grpc.status.PERMISSION_DENIED);
    } finally {
      turncoat.close();
    }
    await waitFor(() => stat('xds.streams_refused') === 6);
    await waitFor(() => stat('xds.clients_connected') === 0);
    // The first refusal is logged (its reason, cut and escaped); the ones within 10 s are only counted.
    const logged = lines.filter((l) => l.includes('a stream was refused'));
    assert.equal(logged.length, 1, logged.join('\n'));
    const entry = JSON.parse(logged[0]!) as { level: string; msg: string };
    assert.equal(entry.level, 'warning');
    assert.equal(entry.msg, 'xDS: a stream was refused (UNAUTHENTICATED): no bearer token in its metadata');
    assert.ok(!lines.join('').includes(TOKEN));
  });
});
