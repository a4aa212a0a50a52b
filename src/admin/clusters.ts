/**
 * admin /clusters: the cluster manager's clusters and hosts, in Envoy's text layout (one
 * `::`-separated line per fact) and as JSON (`?format=json`). See docs/admin.md.
 */
import { ChunkedText } from '../base/stats/render.js';
import { printable } from '../base/util/text.js';
import { formatAddress } from '../base/util/address.js';
import type { CircuitBreakerThresholds, ClusterManagerView, ClusterSnapshot, HostSnapshot, HostStatsSnapshot } from '../core/upstream/types.js';

/** Host stats in the order Envoy prints them (counters and gauges merged, sorted by name). */
const HOST_STATS: ReadonlyArray<keyof HostStatsSnapshot> = [
  'cx_active',
  'cx_connect_fail',
  'cx_total',
  'rq_active',
  'rq_error',
  'rq_success',
  'rq_timeout',
  'rq_total',
];
const HOST_COUNTERS: ReadonlyArray<keyof HostStatsSnapshot> = ['cx_connect_fail', 'cx_total', 'rq_error', 'rq_success', 'rq_timeout', 'rq_total'];
const HOST_GAUGES: ReadonlyArray<keyof HostStatsSnapshot> = ['cx_active', 'rq_active'];

/** `-1` for anything not a finite number (too little data). */
function num(value: number): string {
  return Number.isFinite(value) ? String(value) : '-1';
}

/** `host:port`, with brackets around an IPv6 address. */
export function hostKey(host: Pick<HostSnapshot, 'address' | 'port'>): string {
  return formatAddress(host.address, host.port);
}

/** `healthy`, or `/failed_active_hc` and `/failed_outlier_check` concatenated in that order. */
export function healthFlags(host: Pick<HostSnapshot, 'failedActiveHc' | 'failedOutlierCheck'>): string {
  if (!host.failedActiveHc && !host.failedOutlierCheck) return 'healthy';
  return (host.failedActiveHc ? '/failed_active_hc' : '') + (host.failedOutlierCheck ? '/failed_outlier_check' : '');
}

function thresholdLines(prefix: string, t: CircuitBreakerThresholds): string {
  return (
    `${prefix}max_connections::${t.maxConnections}\n` +
    `${prefix}max_pending_requests::${t.maxPendingRequests}\n` +
    `${prefix}max_requests::${t.maxRequests}\n` +
    `${prefix}max_retries::${t.maxRetries}\n`
  );
}

function clusterText(c: ClusterSnapshot, out: ChunkedText): void {
  const p = `${printable(c.name)}::`;
  let head = '';
  if (c.outlier) {
    head += `${p}outlier::success_rate_average::${num(c.outlier.successRateAverage)}\n`;
    head += `${p}outlier::success_rate_ejection_threshold::${num(c.outlier.successRateEjectionThreshold)}\n`;
  }
  head += thresholdLines(`${p}default_priority::`, c.circuitBreakers.default);
  head += thresholdLines(`${p}high_priority::`, c.circuitBreakers.high);
  head += `${p}added_via_api::${c.addedViaApi}\n`;
  out.add(head);
  for (const h of c.hosts) {
    const hp = `${p}${printable(hostKey(h))}::`;
    const s = h.stats;
    let lines = '';
    for (const name of HOST_STATS) lines += `${hp}${name}::${s[name]}\n`;
    lines +=
      `${hp}hostname::${printable(h.hostname)}\n` +
      `${hp}health_flags::${healthFlags(h)}\n` +
      `${hp}weight::${h.weight}\n` +
      `${hp}region::${printable(h.region)}\n` +
      `${hp}zone::${printable(h.zone)}\n` +
      `${hp}canary::${h.canary}\n` +
      `${hp}success_rate::${num(h.successRate)}\n` +
      `${hp}version::${printable(h.version ?? '')}\n`;
    out.add(lines);
  }
}

/**
 * The text form: `version_info::<v>` first, then per cluster: outlier lines (only with outlier
 * detection), the four thresholds of `default_priority` then `high_priority`, `added_via_api`,
 * then per host its stats sorted by name, hostname, health_flags, weight, region, zone, canary,
 * success_rate, and last mesh's own `version` (the registry Version the host serves, empty for a
 * static host): after Envoy's lines, in their form, so a reader of Envoy's layout is not disturbed. Every line ends with `\n`; names and host fields never hold a raw control
 * character (printable escapes them), so no value can forge a line.
 */
export function renderClustersText(view: ClusterManagerView | undefined): Buffer {
  const out = new ChunkedText();
  out.add(`version_info::${printable(view ? view.versionInfo() : 'static')}\n`);
  if (view) for (const c of view.clusters()) clusterText(c, out);
  return out.toBuffer();
}

// ---------------------------------------------------------------- JSON
//
// Written by hand in exactly the layout of JSON.stringify(document, null, 1) (a test checks it):
// building objects per host and pretty-printing them generically is several times slower.

const q = (s: string): string => JSON.stringify(s);
/** A JSON number; non-finite values (NaN) are -1, "too little data", as in the text form. */
const rate = (n: number): string => (Number.isFinite(n) ? String(n) : '-1');
const int = (n: number): string => (Number.isFinite(n) ? String(n) : 'null');

function thresholdsJson(priority: 'DEFAULT' | 'HIGH', t: CircuitBreakerThresholds): string {
  return (
    '     {\n' +
    `      "priority": "${priority}",\n` +
    `      "max_connections": ${int(t.maxConnections)},\n` +
    `      "max_pending_requests": ${int(t.maxPendingRequests)},\n` +
    `      "max_requests": ${int(t.maxRequests)},\n` +
    `      "max_retries": ${int(t.maxRetries)}\n` +
    '     }'
  );
}

function hostStatJson(name: string, value: number, type: 'COUNTER' | 'GAUGE'): string {
  return `      {\n       "name": "${name}",\n       "value": "${int(value)}",\n       "type": "${type}"\n      }`;
}

function hostJson(h: HostSnapshot): string {
  let stats = '';
  for (const name of HOST_COUNTERS) stats += (stats ? ',\n' : '') + hostStatJson(name, h.stats[name], 'COUNTER');
  for (const name of HOST_GAUGES) stats += ',\n' + hostStatJson(name, h.stats[name], 'GAUGE');
  return (
    '    {\n' +
    '     "address": {\n' +
    '      "socket_address": {\n' +
    '       "protocol": "TCP",\n' +
    `       "address": ${q(h.address)},\n` +
    `       "port_value": ${int(h.port)}\n` +
    '      }\n' +
    '     },\n' +
    '     "stats": [\n' +
    stats +
    '\n     ],\n' +
    '     "health_status": {\n' +
    `      "failed_active_health_check": ${h.failedActiveHc},\n` +
    `      "failed_outlier_check": ${h.failedOutlierCheck},\n` +
    '      "eds_health_status": "HEALTHY"\n' +
    '     },\n' +
    '     "success_rate": {\n' +
    `      "value": ${rate(h.successRate)}\n` +
    '     },\n' +
    `     "weight": ${int(h.weight)},\n` +
    `     "hostname": ${q(h.hostname)},\n` +
    '     "locality": {\n' +
    `      "region": ${q(h.region)},\n` +
    `      "zone": ${q(h.zone)}\n` +
    '     },\n' +
    `     "canary": ${h.canary},\n` +
    `     "version": ${q(h.version ?? '')}\n` +
    '    }'
  );
}

function clusterJson(c: ClusterSnapshot, out: ChunkedText): void {
  let head = '  {\n' + `   "name": ${q(c.name)},\n` + `   "added_via_api": ${c.addedViaApi},\n`;
  if (c.outlier) {
    head +=
      `   "success_rate_average": {\n    "value": ${rate(c.outlier.successRateAverage)}\n   },\n` +
      `   "success_rate_ejection_threshold": {\n    "value": ${rate(c.outlier.successRateEjectionThreshold)}\n   },\n`;
  }
  head +=
    '   "circuit_breakers": {\n' +
    '    "thresholds": [\n' +
    thresholdsJson('DEFAULT', c.circuitBreakers.default) +
    ',\n' +
    thresholdsJson('HIGH', c.circuitBreakers.high) +
    '\n    ]\n' +
    '   },\n';
  if (c.hosts.length === 0) {
    out.add(head + '   "host_statuses": []\n  }');
    return;
  }
  out.add(head + '   "host_statuses": [\n');
  for (let i = 0; i < c.hosts.length; i++) out.add((i > 0 ? ',\n' : '') + hostJson(c.hosts[i]!));
  out.add('\n   ]\n  }');
}

/**
 * The JSON form, shaped like Envoy's `Clusters` proto (`cluster_statuses`, `host_statuses`,
 * 64-bit stat values as strings, enums as names) plus `version_info`, the outlier
 * `success_rate_average`, host `canary` and `version`, and every field printed even when it has its default
 * value (`-1` success rates included); 1-space indent and a trailing newline, as Envoy prints
 * protobuf JSON.
 */
export function renderClustersJson(view: ClusterManagerView | undefined): Buffer {
  const out = new ChunkedText();
  const clusters = view ? view.clusters() : [];
  out.add(`{\n "version_info": ${q(view ? view.versionInfo() : 'static')},\n "cluster_statuses": [`);
  if (clusters.length === 0) out.add(']\n}\n');
  else {
    for (let i = 0; i < clusters.length; i++) {
      out.add(i === 0 ? '\n' : ',\n');
      clusterJson(clusters[i]!, out);
    }
    out.add('\n ]\n}\n');
  }
  return out.toBuffer();
}
