/**
 * The configuration file of `mesh proxy` (src/fronts/proxy/config.ts): what a valid file becomes, and
 * that every kind of mistake is an error naming the file, the line and the field.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseProxyConfig, ProxyConfigError, type ProxyConfig } from '../../src/fronts/proxy/config.js';
import { rewriteUrl } from '../../src/fronts/proxy/server.js';
import { MAX_REGEX_PATH_LENGTH } from '../../src/base/util/regex.js';

const FULL = `
admin: { address: 127.0.0.1:9903 }
listeners:
  - name: ingress
    address: 127.0.0.1:10000
    routes:
      - match: { prefix: /api/ }
        cluster: backend
        prefix_rewrite: /
      - match: { path: /exact }
        cluster: backend
        prefix_rewrite: /other
      - match: { regex: '^/v[0-9]+/.*' }
        cluster: backend
      - match: { prefix: / }
        service: go.mesh.srv.web
clusters:
  - name: backend
    lb_policy: least_request
    hosts: [127.0.0.1:9001, { address: 127.0.0.1, port: 9002, weight: 3, zone: z1, region: r1, canary: true }, '[::1]:9003']
    circuit_breakers: { default: { max_requests: 100 }, high: { max_connections: 5, max_retries: 0 } }
    outlier_detection: { consecutive_5xx: 3, interval: 1m30s, base_ejection_time: 300ms, success_rate_stdev_factor: 1.5, max_ejection_percent: 50 }
    health_check: { path: /healthz, interval: 5s, timeout: 1s, unhealthy_threshold: 2, healthy_threshold: 1, expected_statuses: [200, 204] }
    panic_threshold: 0
    connect_timeout: 250ms
  - name: plain
    hosts: [localhost:80]
    outlier_detection: false
    health_check: false
`;

function parse(text: string, file = 'proxy.yaml'): ProxyConfig {
  return parseProxyConfig(text, file);
}

/** Asserts that text is refused with a message matching re (and names the file). */
function refused(text: string, re: RegExp, file = 'bad.yaml'): ProxyConfigError {
  let caught: unknown;
  try {
    parse(text, file);
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof ProxyConfigError, `expected a ProxyConfigError for:\n${text}\ngot ${String(caught)}`);
  assert.match(caught.message, re);
  assert.ok(caught.message.startsWith(`proxy config ${file}`), caught.message);
  return caught;
}

const MIN_CLUSTER = `
clusters:
  - name: backend
    hosts: [127.0.0.1:9001]
`;

/** A one-listener file with the given route lines (indented 6) and the backend cluster. */
function withRoute(route: string, clusters = MIN_CLUSTER): string {
  return `listeners:\n  - name: l\n    address: 127.0.0.1:10000\n    routes:\n${route}\n${clusters}`;
}

describe('proxy config: a valid file', () => {
  it('becomes listeners, routes and static clusters in the cluster manager shape', () => {
    const c = parse(FULL);
    assert.equal(c.file, 'proxy.yaml');
    assert.equal(c.adminAddress, '127.0.0.1:9903');
    assert.equal(c.usesRegistry, true);
    assert.equal(c.listeners.length, 1);
    const l = c.listeners[0]!;
    assert.equal(l.name, 'ingress');
    assert.equal(l.address, '127.0.0.1:10000');
    assert.equal(l.usesRegistry, true);
    assert.deepEqual(
      l.routes.map((r) => r.dump),
      [
        { match: { prefix: '/api/' }, cluster: 'backend', prefix_rewrite: '/' },
        { match: { path: '/exact' }, cluster: 'backend', prefix_rewrite: '/other' },
        { match: { regex: '^/v[0-9]+/.*' }, cluster: 'backend' },
        { match: { prefix: '/' }, service: 'go.mesh.srv.web' },
      ],
    );
    assert.deepEqual(c.clusters[0], {
      name: 'backend',
      hosts: ['127.0.0.1:9001', { address: '127.0.0.1', port: 9002, weight: 3, zone: 'z1', region: 'r1', canary: true }, '[::1]:9003'],
      lbPolicy: 'least_request',
      circuitBreakers: { default: { maxRequests: 100 }, high: { maxConnections: 5, maxRetries: 0 } },
      outlierDetection: { intervalMs: 90_000, baseEjectionTimeMs: 300, maxEjectionPercent: 50, consecutive5xx: 3, successRateStdevFactor: 1.5 },
      healthCheck: { path: '/healthz', intervalMs: 5000, timeoutMs: 1000, unhealthyThreshold: 2, healthyThreshold: 1, expectedStatuses: [[200, 201], [204, 205]] },
      panicThresholdPercent: 0,
      connectTimeoutMs: 250,
    });
    assert.deepEqual(c.clusters[1], { name: 'plain', hosts: ['localhost:80'], outlierDetection: false, healthCheck: false });
  });

  it('matches prefix, exact path and whole-path regex against the path; rewrites the prefix and keeps the query', () => {
    const [api, exact, re, all] = parse(FULL).listeners[0]!.routes;
    assert.ok(api!.matches('/api/users') && api!.matches('/api/') && !api!.matches('/api') && !api!.matches('/API/x'));
    assert.ok(exact!.matches('/exact') && !exact!.matches('/exact/') && !exact!.matches('/exactly'));
    assert.ok(re!.matches('/v1/x') && re!.matches('/v22/') && !re!.matches('/v1') && !re!.matches('/x/v1/y'));
    assert.ok(all!.matches('/anything'));
    assert.equal(rewriteUrl(api!, '/api/users/7?x=1&y=2'), '/users/7?x=1&y=2');
    assert.equal(rewriteUrl(api!, '/api/'), '/');
    assert.equal(rewriteUrl(exact!, '/exact?q'), '/other?q');
    assert.equal(rewriteUrl(re!, '/v1/x?q'), '/v1/x?q');
  });

  it('JSON is accepted (YAML 1.2 is a superset); only static clusters: usesRegistry false', () => {
    const c = parse(
      JSON.stringify({
        listeners: [{ name: 'a', address: ':10000', routes: [{ match: { prefix: '/' }, cluster: 'b' }] }],
        clusters: [{ name: 'b', hosts: ['127.0.0.1:1'] }],
      }),
      'proxy.json',
    );
    assert.equal(c.usesRegistry, false);
    assert.equal(c.listeners[0]!.usesRegistry, false);
    assert.equal(c.adminAddress, undefined);
    assert.deepEqual(c.clusters, [{ name: 'b', hosts: ['127.0.0.1:1'] }]);
  });

  it('outlier_detection with no value turns detection on with the defaults', () => {
    const c = parse(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}    outlier_detection:\n`));
    assert.deepEqual(c.clusters[0]!.outlierDetection, {});
  });

  it('circuit_breakers: a retry budget per priority in Envoy\'s shape', () => {
    const breakers = '    circuit_breakers:\n      default: { max_retries: 50, retry_budget: { budget_percent: 12.5, min_retry_concurrency: 1 } }\n      high: { retry_budget: { budget_percent: 0 } }\n';
    const c = parse(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}${breakers}`));
    assert.deepEqual(c.clusters[0]!.circuitBreakers, { default: { maxRetries: 50, retryBudget: { percent: 12.5, minConcurrency: 1 } }, high: { retryBudget: { percent: 0 } } });
  });

  it('outlier_detection: consecutive gateway and local-origin failures, split_external_local_origin_errors', () => {
    const od = [
      '    outlier_detection:',
      '      consecutive_gateway_failure: 3',
      '      enforcing_consecutive_gateway_failure: 50',
      '      split_external_local_origin_errors: true',
      '      consecutive_local_origin_failure: 2',
      '      enforcing_consecutive_local_origin_failure: 100',
      '',
    ].join('\n');
    const c = parse(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}${od}`));
    assert.deepEqual(c.clusters[0]!.outlierDetection, {
      consecutiveGatewayFailure: 3,
      enforcingConsecutiveGatewayFailure: 50,
      consecutiveLocalOriginFailure: 2,
      enforcingConsecutiveLocalOriginFailure: 100,
      splitExternalLocalOriginErrors: true,
    });
    assert.throws(
      () => parse(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}    outlier_detection:\n      split_external_local_origin_errors: maybe\n`)),
      /split_external_local_origin_errors/,
    );
    assert.throws(
      () => parse(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}    outlier_detection:\n      enforcing_consecutive_gateway_failure: 101\n`)),
      /enforcing_consecutive_gateway_failure/,
    );
  });
});

describe('proxy config: mistakes are start-up errors naming file, line and field', () => {
  it('YAML syntax errors and duplicate keys give the line', () => {
    refused('listeners: [\n', /^proxy config bad\.yaml:\d+:\d+: invalid YAML: /);
    refused('listeners: []\nlisteners: []\n', /^proxy config bad\.yaml:2:1: invalid YAML: Map keys must be unique/);
    refused('{"listeners": [], "listeners": []}', /invalid YAML: Map keys must be unique/);
  });

  it('an empty file, a missing or empty listeners list', () => {
    refused('', /bad\.yaml: the file is empty: listeners is required/);
    refused('clusters: []\n', /bad\.yaml:1:1: listeners: required/);
    refused('listeners: []\n', /bad\.yaml:1:12: listeners: must not be empty/);
    refused('- a\n', /bad\.yaml:1:1: must be a map, not a list/);
  });

  it('unknown keys anywhere', () => {
    refused('listners: []\n', /bad\.yaml:1:1: listners: unknown field \(allowed: admin, listeners, clusters\)/);
    refused(withRoute('      - match: { prefix: / }\n        cluster: backend\n        timeout: 5s'), /:7:9: listeners\[0\]\.routes\[0\]\.timeout: unknown field/);
    refused(withRoute('      - match: { prefix: /, method: GET }\n        cluster: backend'), /listeners\[0\]\.routes\[0\]\.match\.method: unknown field \(allowed: prefix, path, regex\)/);
    refused(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}    circuit_breakers: { default: { max_request: 1 } }\n`), /clusters\[0\]\.circuit_breakers\.default\.max_request: unknown field/);
    refused(withRoute('      - match: { prefix: / }\n        cluster: backend', `${MIN_CLUSTER}    health_check: { path: /h, intervall: 1s }\n`), /clusters\[0\]\.health_check\.intervall: unknown field/);
    refused('admin: { adress: x }\nlisteners: []\n', /admin\.adress: unknown field \(allowed: address\)/);
  });

  it('bad types and values', () => {
    refused('listeners:\n  - name: l\n    address: 10000\n    routes: []\n', /:3:14: listeners\[0\]\.address: must be a string, not number 10000/);
    refused('listeners:\n  - name: l\n    address: "10000"\n    routes: [x]\n', /listeners\[0\]\.address: invalid address "10000": use host:port \(or :port for every interface\)/);
    refused('listeners:\n  - name: l\n    address: 127.0.0.1:99999\n    routes: [x]\n', /listeners\[0\]\.address: invalid address .*port out of range/);
    refused('listeners:\n  - name: a.b\n    address: :1\n    routes: [x]\n', /listeners\[0\]\.name: "a\.b": use letters, digits, _ and -/);
    refused('listeners:\n  - name: l\n    address: :1\n    routes: x\n', /listeners\[0\]\.routes: must be a list, not the string "x"/);
    refused('listeners:\n  - name: l\n    address: :1\n    routes: [x]\n', /listeners\[0\]\.routes\[0\]: must be a map, not the string "x"/);
    refused('admin: { address: nowhere }\nlisteners: []\n', /admin\.address: invalid admin address "nowhere"/);
    const route = '      - match: { prefix: / }\n        cluster: backend';
    const cluster = (extra: string) => withRoute(route, `clusters:\n  - name: backend\n${extra}`);
    refused(cluster('    hosts: [127.0.0.1]\n'), /clusters\[0\]\.hosts\[0\]: "127\.0\.0\.1" is not host:port/);
    refused(cluster('    hosts: []\n'), /clusters\[0\]\.hosts: must not be empty/);
    refused(cluster('    hosts: [{ address: 127.0.0.1, port: "80" }]\n'), /clusters\[0\]\.hosts\[0\]\.port: must be an integer, not the string "80"/);
    refused(cluster('    hosts: [{ address: 127.0.0.1, port: 80, weight: 101 }]\n'), /clusters\[0\]\.hosts\[0\]\.weight: must be from 1 to 100, not 101/);
    refused(cluster('    hosts: [{ address: 127.0.0.1, port: 80, canary: "yes" }]\n'), /clusters\[0\]\.hosts\[0\]\.canary: must be true or false/);
    refused(cluster('    hosts: [127.0.0.1:80, { address: 127.0.0.1, port: 80 }]\n'), /clusters\[0\]\.hosts\[1\]: 127\.0\.0\.1:80 is listed twice/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    lb_policy: fastest\n'), /clusters\[0\]\.lb_policy: "fastest": use round_robin, random, least_request/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    panic_threshold: 150\n'), /clusters\[0\]\.panic_threshold: must be from 0 to 100/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    circuit_breakers: { default: { max_connections: 0 } }\n'), /circuit_breakers\.default\.max_connections: must be from 1/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    circuit_breakers: { default: { retry_budget: { budget_percent: 101 } } }\n'), /circuit_breakers\.default\.retry_budget\.budget_percent: must be from 0 to 100, not 101/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    circuit_breakers: { high: { retry_budget: { min_retry_concurrency: -1 } } }\n'), /circuit_breakers\.high\.retry_budget\.min_retry_concurrency: must be from 0 to/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    circuit_breakers: { default: { retry_budget: { percent: 20 } } }\n'), /circuit_breakers\.default\.retry_budget.*percent/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    health_check: { interval: 1s }\n'), /clusters\[0\]\.health_check\.path: required/);
    refused(cluster('    hosts: [127.0.0.1:80]\n    health_check: { path: healthz }\n'), /clusters\[0\]\.health_check\.path: "healthz": must start with \//);
  });

  it('durations use Go syntax', () => {
    const route = '      - match: { prefix: / }\n        cluster: backend';
    const hc = (v: string) => withRoute(route, `${MIN_CLUSTER}    health_check: { path: /h, interval: ${v} }\n`);
    refused(hc('5'), /:11:41: clusters\[0\]\.health_check\.interval: must be a duration like "5s" or "300ms", not number 5/);
    refused(hc('5x'), /clusters\[0\]\.health_check\.interval: invalid duration "5x" \(use Go syntax/);
    refused(hc('0s'), /clusters\[0\]\.health_check\.interval: must be above 0/);
    refused(withRoute(route, `${MIN_CLUSTER}    connect_timeout: 1 minute\n`), /clusters\[0\]\.connect_timeout: invalid duration "1 minute"/);
  });

  it('duplicate names and addresses', () => {
    const listener = (name: string, port: number) => `  - name: ${name}\n    address: 127.0.0.1:${port}\n    routes: [{ match: { prefix: / }, cluster: backend }]\n`;
    refused(`listeners:\n${listener('a', 1)}${listener('a', 2)}${MIN_CLUSTER}`, /:5:11: listeners\[1\]\.name: listener "a" is defined twice/);
    refused(`listeners:\n${listener('a', 1)}${listener('b', 1)}${MIN_CLUSTER}`, /listeners\[1\]\.address: 127\.0\.0\.1:1 is also the address of listener "a"/);
    refused(`listeners:\n${listener('a', 1)}${MIN_CLUSTER}  - name: backend\n    hosts: [127.0.0.1:2]\n`, /:9:11: clusters\[1\]\.name: cluster "backend" is defined twice/);
  });

  it('routes: unknown clusters, one target, one match kind, a registry name that is a static cluster', () => {
    refused(withRoute('      - match: { prefix: / }\n        cluster: nope'), /:6:18: listeners\[0\]\.routes\[0\]\.cluster: unknown cluster "nope" \(clusters: backend\)/);
    refused(withRoute('      - match: { prefix: / }\n        cluster: nope', ''), /unknown cluster "nope" \(the file defines no clusters\)/);
    refused(withRoute('      - match: { prefix: / }'), /listeners\[0\]\.routes\[0\]: needs exactly one of cluster \(a static cluster\) and service/);
    refused(withRoute('      - match: { prefix: / }\n        cluster: backend\n        service: x'), /listeners\[0\]\.routes\[0\]: needs exactly one of cluster/);
    refused(withRoute('      - match: { prefix: /, path: /x }\n        cluster: backend'), /listeners\[0\]\.routes\[0\]\.match: needs exactly one of prefix, path, regex/);
    refused(withRoute('      - match: {}\n        cluster: backend'), /listeners\[0\]\.routes\[0\]\.match: needs exactly one of prefix, path, regex/);
    refused(withRoute('      - cluster: backend'), /listeners\[0\]\.routes\[0\]\.match: required/);
    refused(withRoute('      - match: { prefix: api }\n        cluster: backend'), /listeners\[0\]\.routes\[0\]\.match\.prefix: "api": must start with \//);
    refused(withRoute('      - match: { path: "/a?b" }\n        cluster: backend'), /match\.path: "\/a\?b": no white space, \? or #/);
    refused(withRoute('      - match: { prefix: / }\n        service: backend'), /listeners\[0\]\.routes\[0\]\.service: "backend" is a static cluster of this file: use cluster: backend/);
    refused(withRoute('      - match: { regex: /a }\n        cluster: backend\n        prefix_rewrite: /b'), /listeners\[0\]\.routes\[0\]\.prefix_rewrite: needs a prefix or path match, not regex/);
    refused(withRoute('      - match: { prefix: /a }\n        cluster: backend\n        prefix_rewrite: b'), /prefix_rewrite: "b": must start with \//);
  });

  it('regexes are RE2: compiled at load, what RE2 cannot match in linear time is refused', () => {
    refused(withRoute("      - match: { regex: '^/(' }\n        cluster: backend"), /:5:25: listeners\[0\]\.routes\[0\]\.match\.regex: invalid regex "\^\/\(": missing closing \)/);
    refused(withRoute("      - match: { regex: '^/(a)\\1' }\n        cluster: backend"), /match\.regex: invalid regex "\^\/\(a\)\\\\1": invalid escape sequence: `\\1` \(RE2 syntax: no backreferences, lookahead or lookbehind\)/);
    refused(withRoute("      - match: { regex: '^/a(?=b)' }\n        cluster: backend"), /match\.regex: invalid regex "\^\/a\(\?=b\)": .*\(RE2 syntax: no backreferences, lookahead or lookbehind\)/);
    refused(withRoute("      - match: { regex: '^/(?<=a)b' }\n        cluster: backend"), /match\.regex: invalid regex .*RE2 syntax/);
    refused(withRoute(`      - match: { regex: '/${'a'.repeat(1100)}' }\n        cluster: backend`), /match\.regex: regex "\/a+\.\.\." is longer than 1024 characters/);
    refused(withRoute("      - match: { regex: '^/[a-z]{1000}' }\n        cluster: backend"), /match\.regex: regex "\^\/\[a-z\]\{1000\}" is too complex: about \d+ instructions once repetitions are expanded \(at most 400\)/);
    // Nested and adjacent quantifiers are fine: RE2 matches them in linear time.
    const config = parseProxyConfig(withRoute("      - match: { regex: '^/(a+)+$' }\n        cluster: backend\n      - match: { regex: '^/\\d+\\d+\\d+\\d+$' }\n        cluster: backend"), 'nested.yaml');
    const [nested, adjacent] = config.listeners[0]!.routes;
    assert.ok(nested!.matches('/aaa') && !nested!.matches('/aab'));
    assert.ok(adjacent!.matches('/1234') && !adjacent!.matches('/123'));
    assert.ok(!nested!.matches('/' + 'a'.repeat(MAX_REGEX_PATH_LENGTH)), 'a path longer than the cap does not match');
    assert.ok(nested!.matches('/' + 'a'.repeat(MAX_REGEX_PATH_LENGTH - 1)));
  });
});
