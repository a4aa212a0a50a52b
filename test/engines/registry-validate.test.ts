/**
 * The registry rules themselves (src/engines/registry/validate.ts) beyond the contract: every address the
 * rules accept makes a plain http://host:port URL (no path, port or login smuggled in), stored
 * records are cut down piece by piece, and text output never carries a raw control character.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  MAX_NODES_PER_SERVICE,
  addressProblem,
  sanitizeStoredService,
  serviceNameProblem,
  type InvalidRecordReport,
} from '../../src/engines/registry/validate.js';
import { hostKey } from '../../src/core/upstream/host.js';
import { hasControlChars, printable } from '../../src/base/util/text.js';
import { formatService } from '../../src/cli/commands.js';
import { renderClustersText } from '../../src/admin/clusters.js';
import type { ClusterSnapshot } from '../../src/core/upstream/types.js';
import type { Service } from '../../src/engines/registry/registry.js';

describe('registry rules', () => {
  it('every accepted address is exactly the host of http://host:port', () => {
    const hostish = fc.string({ unit: fc.constantFrom(...'abz09.-_:[]/@% \n#?x'.split('')), maxLength: 24 });
    const ipv6 = fc.ipV6();
    const ipv4 = fc.ipV4Extended();
    fc.assert(
      fc.property(fc.oneof(hostish, ipv6, ipv4, fc.domain(), fc.string()), (address) => {
        if (addressProblem(address) !== undefined) return;
        const url = new URL(`http://${hostKey(address, 8080)}`);
        assert.equal(url.port, '8080', address);
        assert.equal(url.pathname, '/', address);
        assert.equal(url.username + url.password + url.search + url.hash, '', address);
      }),
      { numRuns: 3000 },
    );
  });

  it('address: IPv4, IPv6 without brackets, host names; nothing else', () => {
    for (const ok of ['127.0.0.1', '0.0.0.0', '255.255.255.255', '::1', '::', '2001:db8::8a2e:370:7334', '::ffff:10.0.0.1', 'localhost', 'a', 'my_svc', 'a-b.example.com', 'x1.y2'])
      assert.equal(addressProblem(ok), undefined, ok);
    for (const bad of ['', ' ', '127.0.0.1 x', 'h:80', '[::1]', '::1%lo', '1.2.3', '01.2.3.4', '256.0.0.1', '0x7f.1', 'a.1', 'h/', 'http://h', 'user@h', '-a', 'a-', 'a..b', '.a', 'a.', `${'a'.repeat(64)}`, `${'a.'.repeat(127)}a`, 'é.com'])
      assert.notEqual(addressProblem(bad), undefined, bad);
  });

  it('service names: the allowed characters, never a path escape, a URL or the admin separator', () => {
    for (const ok of ['go.mesh.srv.greeter', 'topic:orders', 'a/b', 'A-1_b', 'x'.repeat(200)]) assert.equal(serviceNameProblem(ok), undefined, ok);
    for (const bad of ['', '.a', '_a', 'a b', 'a\tb', 'a\nb', 'a\u0000', 'a/../b', '../a', 'http://x', 'a::b', 'ä', 'x'.repeat(201), 'a%2e%2e'])
      assert.notEqual(serviceNameProblem(bad), undefined, bad);
  });

  it('a stored service keeps its good nodes, drops bad pieces, and stops at the per-service cap', () => {
    const reports: InvalidRecordReport[] = [];
    const sink = (r: InvalidRecordReport) => reports.push(r);
    const v1: Service = {
      name: 'shop',
      version: '1',
      metadata: { ok: 'yes', bad: 'a\nb' },
      endpoints: [{ name: 'Shop.Buy', metadata: {} }, { name: 'bad name', metadata: {} }],
      nodes: [
        { id: 'good', address: '127.0.0.1', port: 1, metadata: {} },
        { id: 'bad', address: '127.0.0.1 x', port: 1, metadata: {} },
      ],
    };
    const [one] = sanitizeStoredService('local', 'shop', [v1], sink);
    assert.deepEqual(one, { ...v1, metadata: { ok: 'yes' }, endpoints: [{ name: 'Shop.Buy', metadata: {} }], nodes: [v1.nodes[0]] });
    assert.equal(reports.length, 1);
    assert.equal(reports[0]!.dropped, 3);
    assert.equal(reports[0]!.problem, 'Metadata.bad: has a control character');

    reports.length = 0;
    const nodes = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ id: `n${from + i}`, address: '10.0.0.1', port: 1, metadata: {} }));
    const big = sanitizeStoredService('etcd', 'big', [
      { ...v1, metadata: {}, endpoints: [], nodes: nodes(0, 6000) },
      { ...v1, version: '2', metadata: {}, endpoints: [], nodes: nodes(6000, 6000) },
    ], sink);
    assert.deepEqual(big.map((v) => v.nodes.length), [6000, MAX_NODES_PER_SERVICE - 6000]);
    assert.equal(reports[0]!.dropped, 12000 - MAX_NODES_PER_SERVICE);

    reports.length = 0;
    assert.deepEqual(sanitizeStoredService('local', 'x\ny', [{ ...v1, name: 'x\ny' }], sink), []);
    assert.equal(reports[0]!.service, '"x\\ny"');
    assert.match(reports[0]!.problem, /^Name: /);
  });
});

describe('text output never holds a raw control character', () => {
  it('printable escapes C0, DEL, C1, line separators and bidi controls, and nothing else', () => {
    assert.equal(printable('plain text, ünïcode ✓'), 'plain text, ünïcode ✓');
    assert.equal(printable('a\nb\r\u0000\u001b[31m\u007f\u0085\u2028\u202e'), 'a\\x0ab\\x0d\\x00\\x1b[31m\\x7f\\x85\\u2028\\u202e');
    fc.assert(fc.property(fc.string({ unit: 'binary' }), (s) => assert.equal(hasControlChars(printable(s)), false)));
  });

  it('mesh get service and admin /clusters print stored strings escaped, one line per fact', () => {
    const text = formatService([{
      name: 'a\nservice  forged',
      version: '1\r',
      metadata: {},
      endpoints: [{ name: 'E\n', metadata: { k: 'v\n' } }],
      nodes: [{ id: 'n\n1', address: '127.0.0.1', port: 1, metadata: { z: '\u001b[2J' } }],
    }]);
    assert.equal(hasControlChars(text.replace(/[\n\t]/g, '')), false);
    assert.equal(text.split('\n').length, 'service  x\n\nversion x\n\nID\tAddress\tPort\tMetadata\nrow\n\nEndpoint: x\nMetadata: x\n'.split('\n').length);
    assert.match(text, /^service {2}a\\x0aservice {2}forged\n/);

    const cluster: ClusterSnapshot = {
      name: 'c\nforged::line',
      addedViaApi: true,
      circuitBreakers: {
        default: { maxConnections: 1, maxPendingRequests: 1, maxRequests: 1, maxRetries: 1 },
        high: { maxConnections: 1, maxPendingRequests: 1, maxRequests: 1, maxRetries: 1 },
      },
      hosts: [
        {
          address: '127.0.0.1',
          port: 1,
          hostname: 'h\nx',
          stats: { cx_active: 0, cx_connect_fail: 0, cx_total: 0, rq_active: 0, rq_error: 0, rq_success: 0, rq_timeout: 0, rq_total: 0 },
          failedActiveHc: false,
          failedOutlierCheck: false,
          weight: 1,
          region: 'r\n',
          zone: 'z\u0000',
          canary: false,
          successRate: -1,
          version: 'v\n1',
        },
      ],
    };
    const admin = renderClustersText({ versionInfo: () => '7', clusters: () => [cluster] }).toString();
    for (const line of admin.trimEnd().split('\n')) assert.match(line, /^(?:version_info::7|c\\x0aforged::line::\S)/, line);
  });
});

describe('the framework Service', () => {
  it('refuses to start under a name or address the registry would refuse, naming the field, and registers nothing', async () => {
    const { Runtime } = await import('../../src/process/runtime.js');
    const { parseArgs } = await import('../../src/cli/flags.js');
    const { optionsFromFlags } = await import('../../src/cli/options.js');
    const { Service: FrameworkService } = await import('../../src/framework/server/service.js');
    const { RegistryValidationError } = await import('../../src/engines/registry/validate.js');
    const runtime = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--admin_address=off', '--log_level=off']).config), { role: 'test' });
    try {
      await assert.rejects(new FrameworkService(runtime, { name: 'greeter\nforged' }).start(), (err: unknown) => {
        assert.ok(err instanceof RegistryValidationError);
        assert.match(err.message, /^Name: "greeter\\nforged" is not a valid service name/);
        return true;
      });
      await assert.rejects(new FrameworkService(runtime, { name: 'greeter', advertise: 'bad host' }).start(), /invalid advertise address "bad host": no spaces/);
      assert.deepEqual(await runtime.registry.listServices(), []);
      const ok = await new FrameworkService(runtime, { name: 'greeter' }).start();
      assert.equal(ok.name, 'greeter');
    } finally {
      await runtime.shutdown();
    }
  });
});
