/**
 * src/base/util/address.ts, the one parser and formatter of addresses: every accepted form and its
 * meaning, every refused form and its message, format round trips, the wildcard test, the
 * advertised address; then the call sites that used to disagree, end to end on loopback.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import {
  AddressError,
  advertisedAddress,
  firstExternalIPv4,
  formatAddress,
  formatHost,
  isLoopback,
  isWildcard,
  parseAddress,
  parseAdvertise,
  type HostPort,
  type ParseAddressOptions,
} from '../../src/base/util/address.js';
import { parseChallengeAddress } from '../../src/tls/acme/challenge-server.js';
import { SchemaOptionError } from '../../src/base/util/option-error.js';
import { parseAppAddress, AppFlagError } from '../../src/fronts/sidecar/health-checker.js';
import { AdminServer } from '../../src/admin/server.js';
import { ServerState } from '../../src/admin/context.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { FAKE_VIEW } from '../admin-fixtures.js';
import { resolveOptions, OptionsError } from '../../src/process/options.js';
import { waitFor } from '../helpers.js';

const LISTEN: ParseAddressOptions = {};
const TARGET: ParseAddressOptions = { target: true };
const WITH_DEFAULT: ParseAddressOptions = { defaultPort: 7 };
const PORT_FLAG: ParseAddressOptions = { barePort: true };

describe('parseAddress: accepted forms', () => {
  const cases: Array<[string, ParseAddressOptions, HostPort]> = [
    ['127.0.0.1:8080', LISTEN, { host: '127.0.0.1', port: 8080 }],
    ['10.0.0.2:0', LISTEN, { host: '10.0.0.2', port: 0 }],
    ['localhost:80', LISTEN, { host: 'localhost', port: 80 }],
    ['api.example.com:443', LISTEN, { host: 'api.example.com', port: 443 }],
    ['  127.0.0.1:1  ', LISTEN, { host: '127.0.0.1', port: 1 }],
    // `:PORT` means every interface, in every flag
    [':8080', LISTEN, { host: '0.0.0.0', port: 8080 }],
    [':0', LISTEN, { host: '0.0.0.0', port: 0 }],
    ['0.0.0.0:9901', LISTEN, { host: '0.0.0.0', port: 9901 }],
    ['[::1]:9901', LISTEN, { host: '::1', port: 9901 }],
    ['[::]:80', LISTEN, { host: '::', port: 80 }],
    ['[2001:db8::1]:65535', LISTEN, { host: '2001:db8::1', port: 65535 }],
    ['[::ffff:10.0.0.1]:80', LISTEN, { host: '::ffff:10.0.0.1', port: 80 }],
    // targets: a host and a port 1..65535
    ['127.0.0.1:1', TARGET, { host: '127.0.0.1', port: 1 }],
    ['[::1]:80', TARGET, { host: '::1', port: 80 }],
    ['app.internal:8080', TARGET, { host: 'app.internal', port: 8080 }],
    // forms without a port where a default port is given (--broker_address, --advertise)
    ['localhost', WITH_DEFAULT, { host: 'localhost', port: 7 }],
    ['10.0.0.2', WITH_DEFAULT, { host: '10.0.0.2', port: 7 }],
    ['[::1]', WITH_DEFAULT, { host: '::1', port: 7 }],
    ['::1', WITH_DEFAULT, { host: '::1', port: 7 }],
    ['2001:db8::1', WITH_DEFAULT, { host: '2001:db8::1', port: 7 }],
    ['localhost:9', WITH_DEFAULT, { host: 'localhost', port: 9 }],
    ['[::1]:8080', WITH_DEFAULT, { host: '::1', port: 8080 }],
    // a bare port only for a flag whose name says port (--acme_http_port): every interface
    ['80', PORT_FLAG, { host: '0.0.0.0', port: 80 }],
    ['127.0.0.1:5002', PORT_FLAG, { host: '127.0.0.1', port: 5002 }],
  ];
  for (const [text, options, want] of cases) {
    it(`${JSON.stringify(text)} ${JSON.stringify(options)} → ${formatAddress(want.host, want.port)}`, () => {
      assert.deepEqual(parseAddress(text, options), want);
    });
  }
});

describe('parseAddress: refused forms, each with a message saying what to write', () => {
  const cases: Array<[string, ParseAddressOptions, string]> = [
    ['::1:9901', LISTEN, 'invalid address "::1:9901": an IPv6 address with a port needs brackets: use [::1]:9901'],
    ['fe80::1:80', TARGET, 'invalid address "fe80::1:80": an IPv6 address with a port needs brackets: use [fe80::1]:80'],
    ['2001:db8::1', LISTEN, 'invalid address "2001:db8::1": no port (use [2001:db8::1]:port)'],
    ['host:', LISTEN, 'invalid address "host:": no port after ":" (use host:port)'],
    ['host:99999', LISTEN, 'invalid address "host:99999": port out of range (0 to 65535)'],
    ['host:65536', TARGET, 'invalid address "host:65536": port out of range (1 to 65535)'],
    ['127.0.0.1:0', TARGET, 'invalid address "127.0.0.1:0": port out of range (1 to 65535)'],
    ['host:http', LISTEN, 'invalid address "host:http": "http" is not a port (use host:port)'],
    ['host:-1', LISTEN, 'invalid address "host:-1": "-1" is not a port (use host:port)'],
    ['host:123456', LISTEN, 'invalid address "host:123456": "123456" is not a port (use host:port)'],
    ['[::1]', LISTEN, 'invalid address "[::1]": no port (use [::1]:port)'],
    ['[::1]:', LISTEN, 'invalid address "[::1]:": no port after ":" (use host:port)'],
    ['[localhost]:80', LISTEN, 'invalid address "[localhost]:80": brackets hold an IPv6 address: use [v6]:port'],
    ['[::1]80', LISTEN, 'invalid address "[::1]80": brackets hold an IPv6 address: use [v6]:port'],
    ['my host:80', LISTEN, 'invalid address "my host:80": no spaces (use host:port)'],
    ['127.0.0.1 :80', LISTEN, 'invalid address "127.0.0.1 :80": no spaces (use host:port)'],
    ['http://x:1', LISTEN, 'invalid address "http://x:1": not a URL or path (use host:port, no scheme)'],
    ['x:1/path', LISTEN, 'invalid address "x:1/path": not a URL or path (use host:port, no scheme)'],
    ['user@x:1', LISTEN, 'invalid address "user@x:1": not a URL or path (use host:port, no scheme)'],
    ['', LISTEN, 'invalid address "": empty (use host:port)'],
    ['   ', LISTEN, 'invalid address "   ": empty (use host:port)'],
    ['8080', LISTEN, 'invalid address "8080": use host:port (or :port for every interface)'],
    ['8080', TARGET, 'invalid address "8080" (use host:port)'],
    ['nowhere', LISTEN, 'invalid address "nowhere" (use host:port)'],
    [':80', TARGET, 'invalid address ":80": no host (use host:port)'],
    ['a:b:c', LISTEN, 'invalid address "a:b:c": an IPv6 address goes in brackets: use [v6]:port'],
    ['-x:80', LISTEN, 'invalid address "-x:80": "-x" is not a host name or IP address (use host:port)'],
    ['a*b:80', LISTEN, 'invalid address "a*b:80": "a*b" is not a host name or IP address (use host:port)'],
    ['99999', PORT_FLAG, 'invalid address "99999": port out of range (0 to 65535)'],
  ];
  for (const [text, options, message] of cases) {
    it(`${JSON.stringify(text)} ${JSON.stringify(options)}`, () => {
      assert.throws(() => parseAddress(text, options), (err: unknown) => {
        assert.ok(err instanceof AddressError);
        assert.equal(err.message, message);
        return true;
      });
    });
  }

  it('names what the address is when told', () => {
    assert.throws(() => parseAddress('::1:9901', { what: 'admin address' }), /^AddressError: invalid admin address "::1:9901": an IPv6 address with a port needs brackets: use \[::1\]:9901$/);
  });
});

describe('formatAddress / formatHost', () => {
  const cases: Array<[string, number, string]> = [
    ['127.0.0.1', 80, '127.0.0.1:80'],
    ['localhost', 9901, 'localhost:9901'],
    ['::1', 9901, '[::1]:9901'],
    ['[::1]', 9901, '[::1]:9901'],
    ['2001:db8::1', 0, '[2001:db8::1]:0'],
    ['0.0.0.0', 8080, '0.0.0.0:8080'],
    ['::', 443, '[::]:443'],
  ];
  for (const [host, port, text] of cases) {
    it(`${host} ${port} ⇄ ${text}`, () => {
      assert.equal(formatAddress(host, port), text);
      assert.deepEqual(parseAddress(text), { host: host.replace(/^\[(.*)\]$/, '$1'), port });
    });
  }
  it('formats a host alone for a URL', () => {
    assert.equal(formatHost('::1'), '[::1]');
    assert.equal(formatHost('[::1]'), '[::1]');
    assert.equal(formatHost('10.0.0.1'), '10.0.0.1');
    assert.equal(formatHost('example.com'), 'example.com');
  });
});

describe('isWildcard / isLoopback', () => {
  const wildcard = ['0.0.0.0', '::', '[::]', '', ' ', '0:0:0:0:0:0:0:0', '::0', '::ffff:0.0.0.0', '::ffff:0:0', '[::ffff:0.0.0.0]'];
  const notWildcard = ['127.0.0.1', '::1', '[::1]', 'localhost', '10.0.0.1', '0.0.0.1', '::ffff:10.0.0.1', 'example.com'];
  for (const h of wildcard) it(`${JSON.stringify(h)} is a wildcard`, () => assert.equal(isWildcard(h), true));
  for (const h of notWildcard) it(`${JSON.stringify(h)} is not a wildcard`, () => assert.equal(isWildcard(h), false));
  it('loopback hosts', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', 'LOCALHOST', '::ffff:127.0.0.1']) assert.equal(isLoopback(h), true, h);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', 'localhost.example', '128.0.0.1']) assert.equal(isLoopback(h), false, h);
  });
});

describe('advertisedAddress (--advertise)', () => {
  const external = firstExternalIPv4();
  const cases: Array<[HostPort, string | undefined, HostPort]> = [
    [{ host: '10.0.0.5', port: 8080 }, undefined, { host: '10.0.0.5', port: 8080 }],
    [{ host: '10.0.0.5', port: 8080 }, '  ', { host: '10.0.0.5', port: 8080 }],
    [{ host: '0.0.0.0', port: 8080 }, undefined, { host: external, port: 8080 }],
    [{ host: '::', port: 8080 }, undefined, { host: external, port: 8080 }],
    [{ host: '0.0.0.0', port: 8080 }, '2001:db8::1', { host: '2001:db8::1', port: 8080 }],
    [{ host: '0.0.0.0', port: 8080 }, '[2001:db8::1]', { host: '2001:db8::1', port: 8080 }],
    [{ host: '0.0.0.0', port: 8080 }, '[2001:db8::1]:9000', { host: '2001:db8::1', port: 9000 }],
    [{ host: '0.0.0.0', port: 8080 }, '10.0.0.2', { host: '10.0.0.2', port: 8080 }],
    [{ host: '0.0.0.0', port: 8080 }, '10.0.0.2:9000', { host: '10.0.0.2', port: 9000 }],
    [{ host: '0.0.0.0', port: 8080 }, 'mesh.example:0', { host: 'mesh.example', port: 8080 }],
    [{ host: '127.0.0.1', port: 8080 }, 'mesh.example', { host: 'mesh.example', port: 8080 }],
  ];
  for (const [listen, advertise, want] of cases) {
    it(`${formatAddress(listen.host, listen.port)} + ${JSON.stringify(advertise)} → ${formatAddress(want.host, want.port)}`, () => {
      assert.deepEqual(advertisedAddress(listen, advertise), want);
    });
  }
  it('the first external IPv4 is an IPv4 address', () => {
    assert.match(external, /^\d+\.\d+\.\d+\.\d+$/);
  });
  const refused: Array<[string, RegExp]> = [
    [':9000', /^invalid advertise address ":9000": no host/],
    ['9000', /^invalid advertise address "9000": no host/],
    ['0.0.0.0', /^invalid advertise address "0.0.0.0": 0\.0\.0\.0 is a wildcard/],
    ['[::]:80', /^invalid advertise address "\[::\]:80": :: is a wildcard/],
    ['bad host', /^invalid advertise address "bad host": no spaces/],
    ['http://x', /^invalid advertise address "http:\/\/x": not a URL/],
    ['x:99999', /^invalid advertise address "x:99999": port out of range/],
  ];
  for (const [text, re] of refused) {
    it(`refuses ${JSON.stringify(text)}`, () => assert.throws(() => parseAdvertise(text), (err: Error) => err instanceof AddressError && re.test(err.message)));
  }
});

describe('call sites', () => {
  it('--acme_http_port: PORT and :PORT are every interface', () => {
    assert.deepEqual(parseChallengeAddress('80'), { host: '0.0.0.0', port: 80 });
    assert.deepEqual(parseChallengeAddress(':80'), { host: '0.0.0.0', port: 80 });
    assert.throws(() => parseChallengeAddress('::1:80'), (e: unknown) => e instanceof SchemaOptionError && e.key === 'acme_http_port' && /--acme_http_port.*use \[::1\]:80/.test(e.format('flag')));
  });

  it('--server_address (sidecar app): a reachable host, never a wildcard', () => {
    assert.deepEqual(parseAppAddress('[::1]:8080'), { host: '::1', port: 8080 });
    for (const bad of ['[::]:80', '0.0.0.0:80', ':80', '::1:80']) {
      assert.throws(() => parseAppAddress(bad), (err: unknown) => err instanceof AppFlagError && err.key === 'server_address' && /--server_address/.test(err.format('flag')), bad);
    }
  });

  it('options: address, adminAddress and advertise are checked with the same rules, naming the option', () => {
    const refused = (options: Record<string, unknown>, option: string, re: RegExp) =>
      assert.throws(() => resolveOptions(options), (err: unknown) => err instanceof OptionsError && err.option === option && re.test(err.message));
    refused({ address: '::1:9901' }, 'address', /use \[::1\]:9901/);
    refused({ adminAddress: '::1:9901' }, 'adminAddress', /invalid admin address "::1:9901".*use \[::1\]:9901/);
    refused({ adminAddress: '9901' }, 'adminAddress', /or :port for every interface/);
    refused({ advertise: '0.0.0.0' }, 'advertise', /wildcard/);
    assert.equal(resolveOptions({ adminAddress: 'off' }).adminAddress, 'off');
    assert.equal(resolveOptions({ advertise: '2001:db8::1' }).advertise, '2001:db8::1');
  });
});

describe('admin: `:PORT` listens on every interface and warns without a token', () => {
  async function admin(address: string, token?: string) {
    const lines: Array<Record<string, unknown>> = [];
    const logging = new Logging({ level: 'info', format: 'json', destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) } });
    const server = new AdminServer({
      stats: new StatsStore(),
      logging,
      clusters: FAKE_VIEW,
      server: new ServerState({ sha: '0'.repeat(40), version: '1', status: 'Clean', buildType: 'RELEASE', startedAt: Date.now(), firstStartedAt: Date.now() }),
      quit: async () => undefined,
      ...(token ? { token } : {}),
    });
    const bound = await server.listen(address);
    return { server, bound, lines };
  }
  const warned = (lines: Array<Record<string, unknown>>) => lines.some((l) => l.level === 'warning' && /without --admin_token/.test(String(l.msg)));

  it(':0 binds 0.0.0.0, is reachable over loopback, and logs a warning', async () => {
    const a = await admin(':0');
    try {
      assert.equal(a.bound.host, '0.0.0.0');
      const res = await request(`http://127.0.0.1:${a.bound.port}/ready`);
      assert.equal(res.statusCode, 200);
      await res.body.text();
      await waitFor(() => warned(a.lines));
    } finally {
      await a.server.close();
    }
  });

  it('no warning on loopback, nor on every interface with --admin_token', async () => {
    const a = await admin('127.0.0.1:0');
    const b = await admin(':0', 'secret');
    try {
      await waitFor(() => a.lines.some((l) => l.msg === 'admin listening') && b.lines.some((l) => l.msg === 'admin listening'));
      assert.equal(warned(a.lines), false);
      assert.equal(warned(b.lines), false);
    } finally {
      await a.server.close();
      await b.server.close();
    }
  });

  it('::1:9901 is refused before anything listens, with the form to use', async () => {
    await assert.rejects(admin('::1:9901'), /invalid admin address "::1:9901": an IPv6 address with a port needs brackets: use \[::1\]:9901/);
  });
});

describe('--advertise=2001:db8::1: the whole address for the broker and for service registration', () => {
  it('a framework service and the http broker of the same runtime register 2001:db8::1', async () => {
    const { Runtime } = await import('../../src/process/runtime.js');
    const { parseArgs } = await import('../../src/cli/flags.js');
    const { optionsFromFlags } = await import('../../src/cli/options.js');
    const { Service: FrameworkService } = await import('../../src/framework/server/service.js');
    const runtime = new Runtime(
      optionsFromFlags(parseArgs(['--registry=memory', '--broker=http', '--admin_address=off', '--log_level=off', '--advertise=2001:db8::1']).config),
      { role: 'test' },
    );
    try {
      const record = await new FrameworkService(runtime, { name: 'greeter' }).start();
      assert.equal(record.nodes[0]!.address, '2001:db8::1');
      assert.ok(record.nodes[0]!.port > 0);
      await runtime.broker.subscribe('adv', () => undefined);
      const [topic] = await runtime.registry.getService('topic:adv');
      assert.equal(topic!.nodes[0]!.address, '2001:db8::1', 'not 2001:db8: (the broker used to cut at the last colon)');
      assert.ok(topic!.nodes[0]!.port > 0);
      assert.notEqual(topic!.nodes[0]!.port, record.nodes[0]!.port, 'each listener keeps its own bound port');
    } finally {
      await runtime.shutdown();
    }
  });

  it('[2001:db8::1]:9000: the service registers port 9000, the broker the host with its own port', async () => {
    const { Runtime } = await import('../../src/process/runtime.js');
    const { parseArgs } = await import('../../src/cli/flags.js');
    const { optionsFromFlags } = await import('../../src/cli/options.js');
    const { Service: FrameworkService } = await import('../../src/framework/server/service.js');
    const runtime = new Runtime(
      optionsFromFlags(parseArgs(['--registry=memory', '--broker=http', '--admin_address=off', '--log_level=off', '--advertise=[2001:db8::1]:9000']).config),
      { role: 'test' },
    );
    try {
      const record = await new FrameworkService(runtime, { name: 'greeter' }).start();
      assert.deepEqual({ address: record.nodes[0]!.address, port: record.nodes[0]!.port }, { address: '2001:db8::1', port: 9000 });
      await runtime.broker.subscribe('adv', () => undefined);
      const [topic] = await runtime.registry.getService('topic:adv');
      assert.equal(topic!.nodes[0]!.address, '2001:db8::1');
      assert.notEqual(topic!.nodes[0]!.port, 9000);
    } finally {
      await runtime.shutdown();
    }
  });
});
