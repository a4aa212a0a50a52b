/**
 * Who may call whom (--authz_rules, src/edge/auth/authz.ts): the engine (first match, globs, the
 * default, `unauthenticated`, bare service names), every kind of error in a rules file (naming the
 * file, the line and the rule), and the framework's RPC server enforcing the rules for a plain
 * caller: 403 error JSON naming the caller, counted, logged once per caller, and ctx.peer.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { request } from 'undici';
import { AuthzSetupError, decideAuthz, loadAuthzRules, MAX_LOGGED_CALLERS, parseAuthzRules, readAuthzSetup, ServiceAuthz, type AuthzAction } from '../../src/edge/auth/authz.js';
import { parseRules } from '../../src/edge/auth/rules.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { Mesh } from '../../src/framework/mesh.js';
import { tempDir } from '../helpers.js';

const TD = 'mesh.local';
const id = (name: string) => `spiffe://${TD}/svc/${name}`;

function engine(yaml: string, defaultAction: AuthzAction = 'allow') {
  const rules = parseAuthzRules(yaml, false, TD);
  return (caller: string | undefined, service: string, endpoint?: string) => decideAuthz(rules, defaultAction, caller, service, endpoint);
}

describe('authz engine', () => {
  it('the first matching rule decides; none: the default', () => {
    const decide = engine(`
rules:
  - caller: go.mesh.api.orders
    service: go.mesh.srv.payments
    endpoint: Payments.Refund
    action: deny
  - caller: go.mesh.api.orders
    service: go.mesh.srv.payments
    action: allow
  - service: go.mesh.srv.payments
    action: deny
`);
    assert.deepEqual(decide(id('go.mesh.api.orders'), 'go.mesh.srv.payments', 'Payments.Refund'), { allowed: false, rule: 1 });
    assert.deepEqual(decide(id('go.mesh.api.orders'), 'go.mesh.srv.payments', 'Payments.Charge'), { allowed: true, rule: 2 });
    assert.deepEqual(decide(id('go.mesh.api.shop'), 'go.mesh.srv.payments', 'Payments.Charge'), { allowed: false, rule: 3 });
    assert.deepEqual(decide(id('go.mesh.api.shop'), 'go.mesh.srv.greeter', 'Say.Hello'), { allowed: true });
    const strict = engine('- { caller: mesh.api, action: allow }', 'deny');
    assert.deepEqual(strict(id('mesh.api'), 'go.mesh.srv.greeter', 'Say.Hello'), { allowed: true, rule: 1 });
    assert.deepEqual(strict(id('mesh.cli'), 'go.mesh.srv.greeter', 'Say.Hello'), { allowed: false });
  });

  it('globs: * any run of characters (dots and slashes included), ? one; over callers, services and endpoints', () => {
    const decide = engine(`
- { caller: "go.mesh.api.*", service: "go.mesh.srv.*", endpoint: "Payments.*", action: allow }
- { caller: "spiffe://partner.example/*", service: "go.mesh.srv.pay?", action: allow }
- { service: "*", action: deny }
`);
    assert.equal(decide(id('go.mesh.api.orders'), 'go.mesh.srv.payments', 'Payments.Charge').rule, 1);
    assert.equal(decide(id('go.mesh.api.orders.v2'), 'go.mesh.srv.a.b', 'Payments.X').rule, 1);
    assert.equal(decide(id('go.mesh.api.orders'), 'go.mesh.srv.payments', 'Refunds.Make').rule, 3);
    assert.equal(decide(id('go.mesh.apix'), 'go.mesh.srv.payments', 'Payments.Charge').rule, 3);
    assert.equal(decide('spiffe://partner.example/svc/billing', 'go.mesh.srv.pays', 'Any.Thing').rule, 2);
    assert.equal(decide('spiffe://partner.example/svc/billing', 'go.mesh.srv.payments', 'Any.Thing').rule, 3);
    // A bare name is a service of this trust domain only.
    assert.equal(decide('spiffe://other.example/svc/go.mesh.api.orders', 'go.mesh.srv.payments', 'Payments.Charge').rule, 3);
  });

  it('a bare caller name is spiffe://<trust_domain>/svc/<name>; a spiffe:// caller is the whole ID', () => {
    const rules = parseAuthzRules('- { caller: [billing, "spiffe://mesh.local/svc/audit"], action: deny }', false, 'prod.example');
    assert.deepEqual(rules[0]!.callers, ['billing', 'spiffe://mesh.local/svc/audit']);
    assert.equal(decideAuthz(rules, 'allow', 'spiffe://prod.example/svc/billing', 's', 'A.B').rule, 1);
    assert.equal(decideAuthz(rules, 'allow', 'spiffe://mesh.local/svc/billing', 's', 'A.B').rule, undefined);
    assert.equal(decideAuthz(rules, 'allow', 'spiffe://mesh.local/svc/audit', 's', 'A.B').rule, 1);
  });

  it('unauthenticated names the callers without a certificate, and only them; no glob matches them', () => {
    const decide = engine(`
- { caller: "*", endpoint: "Admin.*", action: allow }
- { caller: unauthenticated, endpoint: "Admin.*", action: deny }
- { caller: "spiffe://*", endpoint: "Debug.*", action: deny }
`);
    assert.deepEqual(decide(undefined, 'go.mesh.srv.a', 'Admin.Reset'), { allowed: false, rule: 2 });
    assert.deepEqual(decide(id('x'), 'go.mesh.srv.a', 'Admin.Reset'), { allowed: true, rule: 1 });
    assert.deepEqual(decide(undefined, 'go.mesh.srv.a', 'Debug.Health'), { allowed: true });
    assert.deepEqual(decide(id('x'), 'go.mesh.srv.a', 'Debug.Health'), { allowed: false, rule: 3 });
    // A rule without caller matches every caller, plain ones included.
    assert.deepEqual(engine('- { service: go.mesh.srv.a, action: deny }')(undefined, 'go.mesh.srv.a', 'X.Y'), { allowed: false, rule: 1 });
  });

  it('JSON files are read too, as a list or {rules: [...]}', () => {
    const rules = parseAuthzRules('{"rules": [{"caller": "mesh.api", "service": "go.mesh.srv.*", "action": "allow", "name": "the gateway"}]}', true, TD);
    assert.equal(rules.length, 1);
    assert.equal(rules[0]!.name, 'the gateway');
    assert.deepEqual(parseAuthzRules('', false, TD), []);
  });
});

describe('authz rules file errors: exit-2 messages naming the file, the line and the rule', () => {
  const dir = tempDir();
  after(() => dir.cleanup());
  const refused = (name: string, text: string, why: string) => {
    const file = join(dir.path, name);
    writeFileSync(file, text);
    assert.throws(
      () => loadAuthzRules(file, TD),
      (err: unknown) => {
        assert.ok(err instanceof AuthzSetupError);
        assert.equal(err.format('flag'), `invalid value "${file}" for flag --authz_rules: ${why}`);
        return true;
      },
    );
  };

  it('an unknown field', () => {
    refused('a.yaml', '- caller: mesh.api\n  acton: allow\n', 'line 2: rule 1: unknown field "acton" (use caller, service, endpoint, action, name)');
    refused('b.yaml', 'rulez: []\n', 'line 1: unknown field "rulez" (the file is a list of rules, or {rules: [...]})');
  });

  it('a bad glob: service, endpoint, caller', () => {
    refused('c.yaml', '- { service: "go mesh", action: deny }\n', 'line 1: rule 1: service "go mesh" is not a service name glob (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)');
    refused('d.yaml', '- { action: allow, service: a }\n- { endpoint: "Pay(*)", action: deny }\n', 'line 2: rule 2: endpoint "Pay(*)" is not an endpoint name glob like Say.* (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)');
    refused('e.yaml', '- caller: [mesh.api, "spiffe://"]\n  action: allow\n', 'line 1: rule 1: caller "spiffe://": not a SPIFFE ID glob like spiffe://mesh.local/svc/go.mesh.srv.* (a trust domain, then a path; the wildcards * and ?)');
    refused('f.yaml', '- caller: https://mesh.api\n  action: allow\n', 'line 1: rule 1: caller "https://mesh.api": a caller is a service name glob, a spiffe:// ID glob or unauthenticated');
    refused('g.yaml', '- caller: "mesh api"\n  action: allow\n', 'line 1: rule 1: caller "mesh api": not a service name glob (letters, digits, ".", "-", "_", ":", "/" and the wildcards * and ?)');
    refused('h.yaml', '- caller: []\n  action: allow\n', 'line 1: rule 1: caller must be a caller glob or a non-empty list of them');
    refused('i.yaml', '- { service: "", action: deny }\n', 'line 1: rule 1: service must be a non-empty string');
  });

  it('a bad or missing action, a rule that names no call', () => {
    refused('j.yaml', '- service: a\n  action: permit\n', 'line 2: rule 1: action "permit" is not allow or deny');
    refused('k.yaml', '- service: a\n', 'line 1: rule 1: needs action (allow or deny)');
    refused('l.yaml', '- name: everything\n  action: deny\n', 'line 1: rule 1: names no call (give caller, service or endpoint; a call no rule matches gets --authz_default)');
    refused('m.yaml', '- deny\n', 'line 1: rule 1: must be a mapping (caller, service, endpoint and action)');
  });

  it('syntax: YAML and strict JSON; a file that cannot be read', () => {
    refused('n.yaml', '- service: a\n  action: deny\n  action: allow\n', 'line 3: Map keys must be unique');
    // The reader is --auth_rules' too: its YAML errors name their line as well.
    assert.throws(() => parseRules('- path: /\n  access: public\n  access: deny\n', false), /^RulesError: line 3: Map keys must be unique$/);
    refused('o.json', '[{"service": "a", "action": "deny",}]', 'line 1: not valid JSON: Expected double-quoted property name');
    assert.throws(() => loadAuthzRules(join(dir.path, 'absent.yaml'), TD), /^AuthzSetupError: invalid option authzRules: cannot read: ENOENT/);
  });

  it('--authz_default=deny without rules is refused; allow without rules is no authorization at all', () => {
    assert.equal(readAuthzSetup({ authz_rules: undefined, authz_default: 'allow', trust_domain: TD }), undefined);
    assert.throws(() => readAuthzSetup({ authz_rules: undefined, authz_default: 'deny', trust_domain: TD }), (err: unknown) => {
      assert.ok(err instanceof AuthzSetupError);
      assert.equal(err.format('flag'), 'invalid value "deny" for flag --authz_default: needs --authz_rules (without rules every call would be denied)');
      return true;
    });
  });
});

/** A logger whose lines the test reads. */
function capturedLog(): { log: pino.Logger; lines: () => Array<Record<string, unknown>> } {
  const out: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      out.push(...chunk.toString().split('\n').filter((l) => l !== ''));
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines: () => out.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe('ServiceAuthz: counted, logged once per caller with a bounded memory, reloaded', () => {
  const dir = tempDir();
  after(() => dir.cleanup());

  it('counts each decision and logs a denied caller once; the set of callers logged is capped', () => {
    const file = join(dir.path, 'rules.yaml');
    writeFileSync(file, '- { caller: "spiffe://mesh.local/svc/bad.*", action: deny }\n- { caller: unauthenticated, action: deny }\n');
    const stats = new StatsStore();
    const { log, lines } = capturedLog();
    const authz = new ServiceAuthz(readAuthzSetup({ authz_rules: file, authz_default: 'allow', trust_domain: TD })!, { stats, log });
    assert.equal(authz.check(id('good'), 'go.mesh.srv.a', 'A.B'), undefined);
    const denied = authz.check(id('bad.one'), 'go.mesh.srv.a', 'A.B')!;
    assert.equal(denied.toBody(), '{"id":"go.mesh.authz","code":403,"detail":"caller spiffe://mesh.local/svc/bad.one may not call go.mesh.srv.a A.B (denied by rule 1)","status":"Forbidden"}');
    authz.check(id('bad.one'), 'go.mesh.srv.a', 'C.D');
    assert.equal(authz.check(undefined, 'go.mesh.srv.a', 'A.B')!.detail, 'caller unauthenticated may not call go.mesh.srv.a A.B (denied by rule 2)');
    assert.equal(stats.counter('authz.allowed').value, 1);
    assert.equal(stats.counter('authz.denied').value, 3);
    const denials = lines().filter((l) => String(l.msg).startsWith('call denied'));
    assert.deepEqual(
      denials.map((l) => [l.caller, l.endpoint, l.rule]),
      [
        [id('bad.one'), 'A.B', 1],
        ['unauthenticated', 'A.B', 2],
      ],
    );
    // Past the cap the oldest caller is forgotten: logged again when denied again.
    for (let i = 0; i < MAX_LOGGED_CALLERS; i++) authz.check(id(`bad.${i}`), 'go.mesh.srv.a', 'A.B');
    const before = lines().length;
    authz.check(id('bad.one'), 'go.mesh.srv.a', 'A.B');
    assert.equal(lines().length, before + 1);
    authz.check(id(`bad.${MAX_LOGGED_CALLERS - 1}`), 'go.mesh.srv.a', 'A.B');
    assert.equal(lines().length, before + 1);
    // The endpoint is the caller's text: logged cut to 256 characters, then escaped.
    authz.check(id('bad.long'), 'go.mesh.srv.a', `E.\u001b${'x'.repeat(5000)}`);
    assert.equal(lines().at(-1)!.endpoint, `E.\\x1b${'x'.repeat(253)}…(+4747)`);
  });

  it('reload: a good file replaces the rules; a bad one keeps them, logged and kept in the dump', async () => {
    const file = join(dir.path, 'reload.yaml');
    writeFileSync(file, '- { caller: unauthenticated, action: deny }\n');
    const stats = new StatsStore();
    const { log, lines } = capturedLog();
    const authz = new ServiceAuthz(readAuthzSetup({ authz_rules: file, authz_default: 'allow', trust_domain: TD })!, { stats, log });
    assert.equal(authz.decide(undefined, 's', 'A.B').allowed, false);
    writeFileSync(file, '- { caller: unauthenticated, action: allow }\n');
    assert.equal(await authz.reload(), true);
    assert.equal(authz.decide(undefined, 's', 'A.B').allowed, true);
    writeFileSync(file, '- { caller: unauthenticated, action: maybe }\n');
    assert.equal(await authz.reload(), false);
    assert.equal(authz.decide(undefined, 's', 'A.B').allowed, true);
    assert.equal(stats.counter('authz.rules.update_success').value, 1);
    assert.equal(stats.counter('authz.rules.update_failure').value, 1);
    const why = `invalid value "${file}" for flag --authz_rules: line 1: rule 1: action "maybe" is not allow or deny`;
    assert.equal(authz.dump().last_reload_error, why);
    assert.ok(lines().some((l) => l.err === why && l.msg === 'authorization rules reload failed: the previous rules stay'));
  });
});

describe('the framework RPC server enforces the rules where a call arrives', () => {
  const dir = tempDir();
  let mesh: Mesh;
  let base: string;

  before(async () => {
    const file = join(dir.path, 'rules.yaml');
    writeFileSync(file, ['- caller: unauthenticated', '  service: go.mesh.srv.ledger', '  endpoint: Ledger.Write*', '  action: deny', ''].join('\n'));
    mesh = new Mesh({ registry: 'memory', broker: 'memory', logLevel: 'off', adminAddress: 'off', authzRules: file });
    const svc = mesh.service({ name: 'go.mesh.srv.ledger' });
    svc.handle('Ledger.Read', (_req: unknown, ctx) => ({ peer: ctx.peer ?? null }));
    svc.handle('Ledger.Write', () => ({ written: true }));
    svc.stream('Ledger.WriteMany', async function* () {
      yield { written: true };
    }, { kind: 'server' });
    const { services } = await mesh.start();
    const node = services[0]!.nodes[0]!;
    base = `http://${node.address}:${node.port}/`;
  });
  after(async () => {
    await mesh.close();
    dir.cleanup();
  });

  const call = async (endpoint: string, extra: Record<string, string> = {}) => {
    const res = await request(base, { method: 'POST', headers: { 'content-type': 'application/json', 'mesh-service': 'go.mesh.srv.ledger', 'mesh-endpoint': endpoint, ...extra }, body: '{}' });
    return { status: res.statusCode, body: await res.body.text() };
  };

  it('a plain caller is `unauthenticated`: 403 error JSON naming it, before the handler runs; allowed calls see ctx.peer undefined', async () => {
    assert.deepEqual(await call('Ledger.Write'), {
      status: 403,
      body: '{"id":"go.mesh.authz","code":403,"detail":"caller unauthenticated may not call go.mesh.srv.ledger Ledger.Write (denied by rule 1)","status":"Forbidden"}',
    });
    // Streams and unknown endpoints are decided the same way, before anything else.
    assert.equal((await call('Ledger.WriteMany', { 'mesh-stream': 'server' })).status, 403);
    assert.equal((await call('Ledger.WriteNothing')).status, 403);
    assert.deepEqual(await call('Ledger.Read'), { status: 200, body: '{"peer":null}' });
    const stats = mesh.runtime.stats;
    assert.equal(stats.counter('authz.denied').value, 3);
    assert.equal(stats.counter('authz.allowed').value, 1);
  });
});
