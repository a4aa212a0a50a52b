/**
 * Benchmark (not a test): admin /stats (text, json, prometheus) and /clusters (text, json)
 * rendering with 1,000 clusters of 10 hosts. Run: node --import tsx bench/admin-render.ts [clusters] [hosts]
 * Prints milliseconds per render (median wall and CPU time, worst wall time of the timed runs; CPU
 * time is the steadier figure on a busy machine) and the output size, then the process's memory.
 */
import { StatsStore } from '../src/base/stats/store.js';
import { renderJson, renderPrometheus, renderText } from '../src/base/stats/render.js';
import { renderClustersJson, renderClustersText } from '../src/admin/clusters.js';
import type { ClusterManagerView, ClusterSnapshot, HostSnapshot } from '../src/core/upstream/types.js';

const CLUSTERS = Number(process.argv[2] ?? 1000);
const HOSTS = Number(process.argv[3] ?? 10);
const RUNS = 20;

const CLUSTER_COUNTERS = [
  'upstream_rq_total',
  'upstream_rq_2xx',
  'upstream_rq_4xx',
  'upstream_rq_5xx',
  'upstream_rq_timeout',
  'upstream_rq_retry',
  'upstream_rq_pending_overflow',
  'upstream_cx_total',
  'upstream_cx_connect_fail',
  'outlier_detection.ejections_total',
  'health_check.attempt',
  'health_check.success',
  'health_check.failure',
];
const CLUSTER_GAUGES = ['upstream_cx_active', 'upstream_rq_active', 'membership_total', 'membership_healthy', 'outlier_detection.ejections_active'];

const store = new StatsStore();
const clusters: ClusterSnapshot[] = [];
for (let c = 0; c < CLUSTERS; c++) {
  const name = `go.mesh.srv.service${String(c).padStart(4, '0')}`;
  for (const s of CLUSTER_COUNTERS) store.counter(`cluster.${name}.${s}`).inc(c + 1);
  for (const s of CLUSTER_GAUGES) store.gauge(`cluster.${name}.${s}`).set(c % 7);
  const hosts: HostSnapshot[] = [];
  for (let h = 0; h < HOSTS; h++) {
    hosts.push({
      address: `10.${(c >> 8) & 255}.${c & 255}.${h + 1}`,
      port: 8080,
      hostname: `node-${c}-${h}`,
      stats: { cx_active: 1, cx_connect_fail: 0, cx_total: 10 + h, rq_active: 0, rq_error: h, rq_success: 100 * h, rq_timeout: 0, rq_total: 101 * h },
      failedActiveHc: h === 3,
      failedOutlierCheck: h === 4,
      weight: 1 + (h % 5),
      region: 'eu-west',
      zone: `eu-west-${h % 3}`,
      canary: h === 9,
      successRate: h === 0 ? -1 : 99.5,
    });
  }
  clusters.push({
    name,
    addedViaApi: true,
    outlier: { successRateAverage: 97.25, successRateEjectionThreshold: -1 },
    circuitBreakers: {
      default: { maxConnections: 1024, maxPendingRequests: 1024, maxRequests: 1024, maxRetries: 3 },
      high: { maxConnections: 1024, maxPendingRequests: 1024, maxRequests: 1024, maxRetries: 3 },
    },
    hosts,
  });
}
for (const p of ['ingress', 'admin']) {
  for (const s of ['downstream_rq_total', 'downstream_rq_2xx', 'downstream_rq_4xx', 'downstream_rq_5xx']) store.counter(`http.${p}.${s}`).inc();
  store.gauge(`http.${p}.downstream_cx_active`).set(2);
}
const view: ClusterManagerView = { versionInfo: () => '1234', clusters: () => clusters };

function bench(label: string, fn: () => { length: number }): void {
  let size = fn().length; // warm-up (and caches)
  fn();
  const times: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const c0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    size = fn().length;
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
  }
  const mid = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)]!;
  const worst = Math.max(...times);
  console.log(
    `${label.padEnd(22)} median ${mid(times).toFixed(2).padStart(7)} ms (cpu ${mid(cpu).toFixed(2).padStart(7)} ms)   worst ${worst.toFixed(2).padStart(7)} ms   ${(size / 1024).toFixed(0).padStart(6)} KiB`,
  );
}

console.log(`${CLUSTERS} clusters x ${HOSTS} hosts; ${store.list().length} stats; ${RUNS} timed runs each`);
bench('/stats', () => renderText(store.list()));
bench('/stats?format=json', () => renderJson(store.list()));
bench('/stats/prometheus', () => renderPrometheus(store, store.list()));
bench('/stats?usedonly&filter', () => renderText(store.list({ usedOnly: true, filter: /upstream_rq/ })));
bench('/clusters', () => renderClustersText(view));
bench('/clusters?format=json', () => renderClustersJson(view));
const m = process.memoryUsage();
const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
console.log(`memory: rss ${mib(m.rss)}, heap used ${mib(m.heapUsed)} of ${mib(m.heapTotal)}, external ${mib(m.external)}`);
