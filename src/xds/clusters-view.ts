/**
 * Admin `/clusters` of `mesh xds`: the clusters it serves, as the admin renders mesh's own
 * (src/admin/clusters.ts). Read from the snapshot being served; a control plane sends no traffic,
 * so every host's counters are 0; version_info is the version of the clusters served.
 */
import type { ClusterManagerView, ClusterSnapshot, HostSnapshot } from '../core/upstream/types.js';
import type { ResolvedClusterSettings } from '../core/upstream/config.js';
import { retryLimit } from '../core/upstream/circuit-breaker.js';
import { RetryBudget } from '../core/upstream/retry-budget.js';
import type { XdsSource } from './source.js';

interface LbEndpointMessage {
  endpoint: { address: { socket_address: { address: string; port_value: number } }; hostname: string };
  health_status: string;
  load_balancing_weight: { value: number };
}
interface LocalityMessage {
  locality: { region: string; zone: string };
  lb_endpoints: LbEndpointMessage[];
}

export function xdsClustersView(source: XdsSource, settings: ResolvedClusterSettings): ClusterManagerView {
  // No traffic: max_retries is what a cluster with nothing in flight allows (the retry budget's minimum, under max_retries).
  const idle = (p: 'default' | 'high') => ({ ...settings.circuitBreakers[p], maxRetries: retryLimit(settings.circuitBreakers[p].maxRetries, new RetryBudget(settings.retryBudgets[p]), 0) });
  const circuitBreakers = { default: idle('default'), high: idle('high') };
  return {
    versionInfo: () => source.snapshot?.versions.cluster ?? '',
    clusters: (): ClusterSnapshot[] => {
      const snapshot = source.snapshot;
      if (!snapshot) return [];
      return [...snapshot.messages.endpoints].map(([name, cla]) => ({
        name,
        addedViaApi: false,
        circuitBreakers,
        hosts: (cla.endpoints as LocalityMessage[]).flatMap((l) => l.lb_endpoints.map((e) => host(l, e))),
      }));
    },
  };
}

function host(l: LocalityMessage, e: LbEndpointMessage): HostSnapshot {
  const a = e.endpoint.address.socket_address;
  return {
    address: a.address,
    port: a.port_value,
    hostname: e.endpoint.hostname,
    stats: { cx_active: 0, cx_connect_fail: 0, cx_total: 0, rq_active: 0, rq_error: 0, rq_success: 0, rq_timeout: 0, rq_total: 0 },
    failedActiveHc: e.health_status === 'UNHEALTHY',
    failedOutlierCheck: false,
    weight: e.load_balancing_weight.value,
    region: l.locality.region,
    zone: l.locality.zone,
    canary: false,
    successRate: -1,
  };
}
