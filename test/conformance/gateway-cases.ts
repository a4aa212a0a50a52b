/**
 * The upstream HTTPRoute conformance cases that need Gateway listeners (ports, hostnames, HTTPS
 * with SNI, parentRefs with sectionName and port, allowedRoutes kinds), replayed on a `mesh api`
 * started per case with the case's Gateway documents (cases.ts explains the adaptation). The
 * Gateways of the upstream base manifests the cases use are written out here; an HTTPS listener's
 * certificate Secret becomes its files (`CERT_FILE`, `KEY_FILE`, replaced by the runner), and
 * `namespace` and a backend's `port`, which mesh ignores, are left out.
 */
import type { ConformanceCase, Exchange } from './cases.js';
import { V1, V2, V3 } from './cases.js';

const GATEWAY = 'apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n';
const ROUTE = 'apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n';
const gateway = (name: string, listeners: string) => `${GATEWAY}metadata: {name: ${name}}\nspec:\n  gatewayClassName: mesh\n  listeners:\n${listeners}`;
const route = (name: string, spec: string) => `${ROUTE}metadata: {name: ${name}}\nspec:\n${spec}`;
const docs = (...d: string[]) => d.join('---\n');

const http = (name: string, port: number, hostname?: string, extra = '') => `    - {name: ${name}, port: ${port}, protocol: HTTP${hostname ? `, hostname: "${hostname}"` : ''}${extra}}\n`;
const https = (name: string, hostname?: string) =>
  `    - name: ${name}\n      port: 443\n      protocol: HTTPS\n${hostname ? `      hostname: "${hostname}"\n` : ''}      tls: {options: {mesh-platform.dev/cert-file: CERT_FILE, mesh-platform.dev/key-file: KEY_FILE}}\n`;

/** The base manifests' Gateways. */
const SAME_NAMESPACE = gateway('same-namespace', http('http', 80));
const WITH_HTTPS = gateway('same-namespace-with-https-listener', https('https') + https('https-with-hostname', 'second-example.org') + https('https-with-wildcard-hostname', '*.wildcard.org') + https('https-with-hostname-matching-wildcard', 'fourth-example.wildcard.org'));

const to = (host: string, path: string, backend: string, port?: number): Exchange => ({ request: { host, path, ...(port ? { port } : {}) }, backend });
const notFound = (host: string, path: string, port?: number): Exchange => ({ request: { host, path, ...(port ? { port } : {}) }, response: { status: 404 } });
const tls = (serverName: string, host: string, status: number, backend?: string, path = '/detect-misdirected-requests'): Exchange => ({
  request: { port: 443, serverName, host, path },
  response: { status },
  ...(backend ? { backend } : {}),
});
const redirect = (port: number, path: string, scheme: string, redirectPort?: string): Exchange => ({
  request: { port, path },
  response: { status: 302 },
  redirect: { scheme, host: 'example.org', ...(redirectPort ? { port: redirectPort } : {}) },
});

const backendTo = (service: string) => `  rules:\n  - backendRefs: [{name: ${service}}]\n`;
const prefixTo = (prefix: string, service: string) => `    - matches: [{path: {type: PathPrefix, value: ${prefix}}}]\n      backendRefs: [{name: ${service}}]\n`;
const redirectRule = (prefix: string, r: string) => `    - matches: [{path: {type: PathPrefix, value: ${prefix}}}]\n      filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org${r}}}]\n`;

export const GATEWAY_CASES: ConformanceCase[] = [
  // ---- Core ----
  {
    name: 'HTTPRouteListenerHostnameMatching',
    manifest: 'httproute-listener-hostname-matching.yaml',
    features: [],
    gateways: gateway('httproute-listener-hostname-matching', http('listener-1', 80, 'bar.com') + http('listener-2', 80, 'foo.bar.com') + http('listener-3', 80, '*.bar.com') + http('listener-4', 80, '*.foo.com')),
    routes: docs(
      route('backend-v1', `  parentRefs: [{name: httproute-listener-hostname-matching, sectionName: listener-1}]\n${backendTo(V1)}`),
      route('backend-v2', `  parentRefs: [{name: httproute-listener-hostname-matching, sectionName: listener-2}]\n${backendTo(V2)}`),
      route('backend-v3', `  parentRefs:\n  - {name: httproute-listener-hostname-matching, sectionName: listener-3}\n  - {name: httproute-listener-hostname-matching, sectionName: listener-4}\n${backendTo(V3)}`),
    ),
    exchanges: [
      to('bar.com', '/', V1),
      to('foo.bar.com', '/', V2),
      to('baz.bar.com', '/', V3),
      to('boo.bar.com', '/', V3),
      to('multiple.prefixes.bar.com', '/', V3),
      to('multiple.prefixes.foo.com', '/', V3),
      notFound('foo.com', '/'),
      notFound('no.matching.host', '/'),
    ],
  },
  {
    name: 'HTTPRouteHostnameIntersection',
    manifest: 'httproute-hostname-intersection.yaml',
    features: [],
    gateways: docs(
      gateway('httproute-hostname-intersection', http('listener-1', 80, 'very.specific.com') + http('listener-2', 80, '*.wildcard.io') + http('listener-3', 80, '*.anotherwildcard.io')),
      gateway('httproute-hostname-intersection-all', http('listener-1', 80)),
    ),
    routes: docs(
      route('specific-host-matches-listener-specific-host', `  parentRefs: [{name: httproute-hostname-intersection}]\n  hostnames: [non.matching.com, "*.nonmatchingwildcard.io", very.specific.com]\n  rules:\n${prefixTo('/s1', V1)}`),
      route('specific-host-matches-listener-wildcard-host', `  parentRefs: [{name: httproute-hostname-intersection}]\n  hostnames: [non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io]\n  rules:\n${prefixTo('/s2', V2)}`),
      route('wildcard-host-matches-listener-specific-host', `  parentRefs: [{name: httproute-hostname-intersection}]\n  hostnames: [non.matching.com, "*.specific.com"]\n  rules:\n${prefixTo('/s3', V3)}`),
      route('wildcard-host-matches-listener-wildcard-host', `  parentRefs: [{name: httproute-hostname-intersection}]\n  hostnames: ["*.anotherwildcard.io"]\n  rules:\n${prefixTo('/s4', V1)}`),
      route('no-intersecting-hosts', `  parentRefs: [{name: httproute-hostname-intersection}]\n  hostnames: [specific.but.wrong.com, wildcard.io]\n  rules:\n${prefixTo('/s5', V2)}`),
      route('httproute-hostname-intersection-all', `  parentRefs: [{name: httproute-hostname-intersection-all}]\n  hostnames: [first.com, sub.first.com, second.com, sub.second.com]\n${backendTo(V2)}`),
    ),
    accepted: { 'no-intersecting-hosts': { status: 'False', reason: 'NoMatchingListenerHostname' } },
    exchanges: [
      to('very.specific.com', '/s1', V1),
      to('very.specific.com:1234', '/s1', V1),
      notFound('non.matching.com', '/s1'),
      notFound('foo.nonmatchingwildcard.io', '/s1'),
      notFound('foo.wildcard.io', '/s1'),
      notFound('very.specific.com', '/non-matching-prefix'),
      to('foo.wildcard.io', '/s2', V2),
      to('bar.wildcard.io', '/s2', V2),
      to('foo.bar.wildcard.io', '/s2', V2),
      notFound('non.matching.com', '/s2'),
      notFound('wildcard.io', '/s2'),
      notFound('very.specific.com', '/s2'),
      notFound('foo.wildcard.io', '/non-matching-prefix'),
      to('very.specific.com', '/s3', V3),
      notFound('non.matching.com', '/s3'),
      notFound('foo.specific.com', '/s3'),
      notFound('foo.wildcard.io', '/s3'),
      notFound('very.specific.com', '/non-matching-prefix'),
      to('foo.anotherwildcard.io', '/s4', V1),
      to('bar.anotherwildcard.io', '/s4', V1),
      to('foo.bar.anotherwildcard.io', '/s4', V1),
      notFound('anotherwildcard.io', '/s4'),
      notFound('foo.wildcard.io', '/s4'),
      notFound('very.specific.com', '/s4'),
      notFound('foo.anotherwildcard.io', '/non-matching-prefix'),
      notFound('specific.but.wrong.com', '/s5'),
      notFound('wildcard.io', '/s5'),
      to('first.com', '/', V2),
      to('sub.first.com', '/', V2),
      to('second.com', '/', V2),
      to('sub.second.com', '/', V2),
    ],
  },
  {
    name: 'HTTPRouteHTTPSListener',
    manifest: 'httproute-https-listener.yaml',
    features: [],
    gateways: WITH_HTTPS,
    routes: docs(
      route('httproute-https-test', `  parentRefs: [{name: same-namespace-with-https-listener}]\n  hostnames: [example.org]\n${backendTo(V1)}`),
      route('httproute-https-test-no-hostname', `  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]\n${backendTo(V2)}`),
    ),
    exchanges: [tls('example.org', 'example.org', 200, V1, '/'), tls('unknown-example.org', 'unknown-example.org', 404, undefined, '/'), tls('second-example.org', 'second-example.org', 200, V2, '/')],
  },
  {
    name: 'HTTPRouteDisallowedKind',
    manifest: 'httproute-disallowed-kind.yaml',
    features: [],
    // Upstream's listener is a TLS passthrough one, which mesh does not serve: an HTTP listener that allows only TLSRoutes says the same.
    gateways: gateway('tlsroutes-only', http('tls', 80, undefined, ', allowedRoutes: {kinds: [{kind: TLSRoute}]}')),
    routes: route('disallowed-kind', `  parentRefs: [{name: tlsroutes-only}]\n${backendTo(V1)}`),
    accepted: { 'disallowed-kind': { status: 'False', reason: 'NotAllowedByListeners' } },
    exchanges: [notFound('example.com', '/')],
  },
  {
    name: 'HTTPRouteInvalidParentRefNotMatchingSectionName',
    manifest: 'httproute-invalid-parentref-not-matching-section-name.yaml',
    features: [],
    gateways: SAME_NAMESPACE,
    routes: route('httproute-listener-not-matching-section-name', `  parentRefs: [{name: same-namespace, port: 80, sectionName: http1}]\n${backendTo(V1)}`),
    accepted: { 'httproute-listener-not-matching-section-name': { status: 'False', reason: 'NoMatchingParent' } },
    exchanges: [notFound('example.com', '/')],
  },
  {
    name: 'HTTPRouteMultipleGateways',
    manifest: 'httproute-multiple-gateways.yaml',
    features: [],
    // Upstream each Gateway has an address of its own, both on port 80; mesh api listens on one host, so the second is on 8080.
    gateways: docs(SAME_NAMESPACE, gateway('all-namespaces', http('http', 8080))),
    routes: docs(
      route('multiple-gateways-shared-route', `  parentRefs: [{name: same-namespace}, {name: all-namespaces}]\n  rules:\n${prefixTo('/shared', V1)}`),
      route('same-namespace-dedicated-route', `  parentRefs: [{name: same-namespace}]\n  rules:\n${prefixTo('/', V2)}`),
      route('all-namespaces-dedicated-route', `  parentRefs: [{name: all-namespaces}]\n  rules:\n${prefixTo('/', V3)}`),
    ),
    exchanges: [to('example.com', '/shared', V1), to('example.com', '/', V2), to('example.com', '/shared', V1, 8080), to('example.com', '/', V3, 8080)],
  },
  // ---- Extended ----
  {
    name: 'HTTPRouteListenerPortMatching',
    manifest: 'httproute-listener-port-matching.yaml',
    features: ['HTTPRouteParentRefPort'],
    gateways: gateway('httproute-listener-port-matching', http('listener-1', 80, 'foo.com') + http('listener-2', 8080, 'foo.com') + http('listener-3', 8080, 'bar.com') + http('listener-4', 8090, 'foo.com') + http('listener-5', 8090, 'bar.com')),
    routes: docs(
      route('backend-v1', `  parentRefs: [{name: httproute-listener-port-matching, port: 80}]\n${backendTo(V1)}`),
      route('backend-v2', `  parentRefs: [{name: httproute-listener-port-matching, port: 8080}]\n${backendTo(V2)}`),
      route('backend-v3', `  parentRefs: [{name: httproute-listener-port-matching, port: 8090, sectionName: listener-4}]\n${backendTo(V3)}`),
    ),
    exchanges: [to('foo.com', '/', V1), to('foo.com:8080', '/', V2, 8080), to('bar.com:8080', '/', V2, 8080), to('foo.com:8090', '/', V3, 8090), notFound('bar.com:8090', '/', 8090)],
  },
  {
    name: 'HTTPRouteInvalidParentRefNotMatchingListenerPort',
    manifest: 'httproute-invalid-parentref-not-matching-listener-port.yaml',
    features: ['HTTPRouteDestinationPortMatching'],
    gateways: SAME_NAMESPACE,
    routes: route('httproute-listener-not-matching-route-port', `  parentRefs: [{name: same-namespace, port: 81}]\n${backendTo(V1)}`),
    accepted: { 'httproute-listener-not-matching-route-port': { status: 'False', reason: 'NoMatchingParent' } },
    exchanges: [notFound('example.com', '/')],
  },
  {
    name: 'HTTPRouteInvalidParentRefSectionNameNotMatchingPort',
    manifest: 'httproute-invalid-parentref-section-name-not-matching-port.yaml',
    features: ['HTTPRouteParentRefPort'],
    gateways: gateway('gateway-with-one-not-matching-port-and-section-name-route', http('http', 80, undefined, ', allowedRoutes: {kinds: [{kind: HTTPRoute}]}')),
    routes: route('httproute-listener-section-name-not-matching-port', `  parentRefs: [{name: gateway-with-one-not-matching-port-and-section-name-route, sectionName: http, port: 81}]\n${backendTo(V1)}`),
    accepted: { 'httproute-listener-section-name-not-matching-port': { status: 'False', reason: 'NoMatchingParent' } },
    exchanges: [notFound('example.com', '/')],
  },
  {
    name: 'HTTPRouteRedirectPortAndScheme',
    manifest: 'httproute-redirect-port-and-scheme.yaml',
    features: ['HTTPRoutePortRedirect'],
    gateways: docs(SAME_NAMESPACE, gateway('same-namespace-with-http-listener-on-8080', http('http', 8080)), WITH_HTTPS),
    routes: docs(
      route(
        'http-route-for-listener-on-port-80',
        `  parentRefs: [{name: same-namespace}]\n  rules:\n${redirectRule('/scheme-nil-and-port-nil', '')}${redirectRule('/scheme-nil-and-port-80', ', port: 80')}${redirectRule('/scheme-nil-and-port-8080', ', port: 8080')}${redirectRule('/scheme-https-and-port-nil', ', scheme: https')}${redirectRule('/scheme-https-and-port-443', ', scheme: https, port: 443')}${redirectRule('/scheme-https-and-port-8443', ', scheme: https, port: 8443')}`,
      ),
      route(
        'http-route-for-listener-on-port-8080',
        `  parentRefs: [{name: same-namespace-with-http-listener-on-8080}]\n  rules:\n${redirectRule('/scheme-nil-and-port-nil', '')}${redirectRule('/scheme-nil-and-port-80', ', port: 80')}${redirectRule('/scheme-https-and-port-nil', ', scheme: https')}`,
      ),
      route(
        'http-route-for-listener-on-port-443',
        `  parentRefs: [{name: same-namespace-with-https-listener}]\n  rules:\n${redirectRule('/scheme-nil-and-port-nil', '')}${redirectRule('/scheme-nil-and-port-443', ', port: 443')}${redirectRule('/scheme-nil-and-port-8443', ', port: 8443')}${redirectRule('/scheme-http-and-port-nil', ', scheme: http')}${redirectRule('/scheme-http-and-port-80', ', scheme: http, port: 80')}${redirectRule('/scheme-http-and-port-8080', ', scheme: http, port: 8080')}`,
      ),
    ),
    exchanges: [
      redirect(80, '/scheme-nil-and-port-nil', 'http'),
      redirect(80, '/scheme-nil-and-port-80', 'http'),
      redirect(80, '/scheme-nil-and-port-8080', 'http', '8080'),
      redirect(80, '/scheme-https-and-port-nil', 'https'),
      redirect(80, '/scheme-https-and-port-443', 'https'),
      redirect(80, '/scheme-https-and-port-8443', 'https', '8443'),
      redirect(8080, '/scheme-nil-and-port-nil', 'http', '8080'),
      redirect(8080, '/scheme-nil-and-port-80', 'http'),
      redirect(8080, '/scheme-https-and-port-nil', 'https'),
      redirect(443, '/scheme-nil-and-port-nil', 'https'),
      redirect(443, '/scheme-nil-and-port-443', 'https'),
      redirect(443, '/scheme-nil-and-port-8443', 'https', '8443'),
      redirect(443, '/scheme-http-and-port-nil', 'http'),
      redirect(443, '/scheme-http-and-port-80', 'http'),
      redirect(443, '/scheme-http-and-port-8080', 'http', '8080'),
    ],
  },
  {
    name: 'HTTPRouteHTTPSListenerDetectMisdirectedRequests',
    manifest: 'httproute-https-listener-detect-misdirected-requests.yaml',
    features: ['GatewayHTTPSListenerDetectMisdirectedRequests'],
    gateways: WITH_HTTPS,
    routes: docs(
      route('https-listener-detect-misdirected-requests-test-1', `  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https}]\n  hostnames: [example.org]\n  rules:\n${prefixTo('/detect-misdirected-requests', V1)}`),
      route('https-listener-detect-misdirected-requests-test-2', `  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]\n  rules:\n${prefixTo('/detect-misdirected-requests', V2)}`),
      route('https-listener-detect-misdirected-requests-test-3', `  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-wildcard-hostname}]\n  rules:\n${prefixTo('/detect-misdirected-requests', V3)}`),
      route('https-listener-detect-misdirected-requests-test-4', `  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname-matching-wildcard}]\n  rules:\n${prefixTo('/detect-misdirected-requests', V1)}`),
    ),
    exchanges: [
      tls('example.org', 'example.org', 200, V1),
      tls('example.org', 'second-example.org', 421),
      tls('example.org', 'unknown-example.org', 404),
      tls('second-example.org', 'second-example.org', 200, V2),
      tls('second-example.org', 'example.org', 421),
      tls('second-example.org', 'unknown-example.org', 421),
      tls('third-example.wildcard.org', 'third-example.wildcard.org', 200, V3),
      tls('third-example.wildcard.org', 'fith-example.wildcard.org', 200, V3),
      tls('third-example.wildcard.org', 'fourth-example.wildcard.org', 421),
      tls('third-example.wildcard.org', 'second-example.org', 421),
      tls('third-example.wildcard.org', 'unknown-example.org', 421),
      tls('fourth-example.wildcard.org', 'fourth-example.wildcard.org', 200, V1),
      tls('fourth-example.wildcard.org', 'fith-example.wildcard.org', 421),
      tls('unknown-example.org', 'example.org', 200, V1),
      tls('unknown-example.org', 'unknown-example.org', 404),
    ],
  },
];
