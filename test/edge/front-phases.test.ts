/**
 * The request pipeline of the front ends (docs/architecture.md, "A request's phases"): a request
 * passes accept → target → edge → route → auth → handle → respond → log, in that order; its target
 * is parsed once (every phase reads the same RequestTarget) and its route decided once (the
 * registry router matched once, with the auth step enforcing: the auth rules read the route the
 * handler gets). Upgrades pass accept → target → edge → route → handle.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import { Runtime } from '../../src/process/runtime.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import { parseArgs } from '../../src/cli/flags.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { Gateway } from '../../src/fronts/gateway/server.js';
import { FRONT_PHASES, type FrontPhase } from '../../src/edge/front-server.js';
import { targetOf, type RequestTarget } from '../../src/base/http/target.js';
import { EdgeAuth, type AuthFlags } from '../../src/edge/auth/edge.js';
import { registerPlain, startPlainApp, type PlainApp } from '../fixtures/gateway-helpers.js';
import { http, waitFor } from '../helpers.js';

interface Seen {
  phases: FrontPhase[];
  targets: RequestTarget[];
}

describe('front server: the phases of a request', () => {
  let app: PlainApp;
  before(async () => {
    app = await startPlainApp('plain');
  });
  after(() => app.close());

  /** A gateway (registry router, auth rules enforcing) that records each request's phases and counts router matches. */
  async function gateway() {
    const registry = new MemoryRegistry();
    await registerPlain(registry, 'go.mesh.api.plain', app.port, [
      { name: 'Plain.Echo', metadata: { handler: 'rpc', method: 'POST', path: '/hello' } },
      { name: 'Plain.Web', metadata: { handler: 'proxy', path: '/web/*' } },
    ]);
    const flags = ['--broker=memory', '--log_level=off', '--drain_delay=0', '--admin_address=off', '--client_retries=0'];
    const runtime = new Runtime(optionsFromFlags(parseArgs(flags, {}).config, { registry }), { role: 'api' });
    const authFlags = { auth: 'off', auth_issuer: [], auth_audience: [], auth_clock_skew: 0, auth_jwks_timeout: 0, auth_jwks_cooldown: 0, auth_jwks_refresh: 0 } satisfies AuthFlags;
    const auth = new EdgeAuth({ flags: authFlags, rules: [], defaultAccess: 'public' }, { stats: runtime.stats, log: runtime.logging.get('auth') });
    const seen = new Map<IncomingMessage, Seen>();
    const gw = new Gateway(runtime, {
      address: '127.0.0.1:0',
      auth,
      onPhase: (phase, req) => {
        let s = seen.get(req);
        if (!s) seen.set(req, (s = { phases: [], targets: [] }));
        s.phases.push(phase);
        if (phase !== 'accept') s.targets.push(targetOf(req));
      },
    });
    const router = gw.router!;
    const match = router.match.bind(router);
    let matches = 0;
    router.match = (...args: Parameters<typeof match>) => {
      matches++;
      return match(...args);
    };
    const bound = await gw.start();
    return { runtime, seen, matches: () => matches, url: `http://127.0.0.1:${bound.port}`, port: bound.port };
  }

  /** The one request recorded. */
  function only(seen: Map<IncomingMessage, Seen>): Seen {
    assert.equal(seen.size, 1, 'one request recorded');
    return [...seen.values()][0]!;
  }

  function assertOnce(s: Seen, expected: readonly FrontPhase[]): void {
    assert.deepEqual(s.phases, expected);
    assert.ok(s.targets.length > 0);
    for (const t of s.targets) assert.equal(t, s.targets[0], 'every phase reads the one target parsed');
  }

  it('a registry-routed request: every phase in order, the route matched once, the target parsed once', async () => {
    const gw = await gateway();
    try {
      const r = await http('POST', `${gw.url}/hello?x=1`, { headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(r.status, 200, r.text);
      await waitLogged(gw.seen);
      assertOnce(only(gw.seen), FRONT_PHASES);
      assert.equal(gw.matches(), 1, 'the registry router matched once (the auth step and the handler share the route)');
      const t = (only(gw.seen)).targets[0]!;
      assert.deepEqual({ path: t.path, query: t.query }, { path: '/hello', query: 'x=1' });
    } finally {
      await gw.runtime.shutdown();
    }
  });

  it('POST /rpc: every phase in order, no router match, the target parsed once', async () => {
    const gw = await gateway();
    try {
      const body = JSON.stringify({ service: 'go.mesh.api.plain', method: 'Plain.Echo', request: {} });
      const r = await http('POST', `${gw.url}/rpc`, { headers: { 'content-type': 'application/json' }, body });
      assert.equal(r.status, 200, r.text);
      await waitLogged(gw.seen);
      assertOnce(only(gw.seen), FRONT_PHASES);
      assert.equal(gw.matches(), 0, '/rpc is the gateway\'s own route');
    } finally {
      await gw.runtime.shutdown();
    }
  });

  it('an upgrade: accept, target, edge, route, handle; the route matched once', async () => {
    const gw = await gateway();
    try {
      // A proxy route: the plain app does not answer the upgrade with 101, so the gateway passes its answer on.
      const answer = await rawExchange(gw.port, 'GET /web/socket HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
      assert.match(answer, /^HTTP\/1\.1 \d{3} /);
      const s = only(gw.seen);
      assertOnce(s, ['accept', 'target', 'edge', 'route', 'handle']);
      assert.equal(gw.matches(), 1);
    } finally {
      await gw.runtime.shutdown();
    }
  });
});

/** Resolves once every recorded request reached its log phase (the response's close). */
async function waitLogged(seen: Map<IncomingMessage, Seen>): Promise<void> {
  await waitFor(() => seen.size > 0 && [...seen.values()].every((s) => s.phases.includes('log')));
}

/** Sends raw bytes and resolves with what came back until the server closed the connection. */
function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(bytes));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => {
      text += d;
      // The first answer's head is enough: the tunnel may stay open.
      if (text.includes('\r\n\r\n')) socket.destroy();
    });
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
}
