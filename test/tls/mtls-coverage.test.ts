/**
 * The mTLS coverage of a cluster: cluster.<name>.membership_mtls counts the hosts whose node
 * serves mutual TLS (says mtls=true), beside membership_total, in admin /stats and in the
 * Prometheus format (mesh_cluster_membership_mtls beside mesh_cluster_membership).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { http, waitFor } from '../helpers.js';
import { Runtime } from '../../src/process/runtime.js';
import { parseArgs } from '../../src/cli/flags.js';
import { optionsFromFlags } from '../../src/cli/options.js';
import type { Node } from '../../src/engines/registry/registry.js';

const SERVICE = 'go.mesh.srv.coverage';
const node = (id: string, port: number, metadata: Record<string, string>): Node => ({ id, address: '127.0.0.1', port, metadata });

it('one mTLS node and one plain node: 1 of 2, in /stats and Prometheus; the plain node restarted with mtls=true: 2 of 2', async () => {
  const rt = new Runtime(optionsFromFlags(parseArgs(['--registry=memory', '--broker=memory', '--log_level=off', '--drain_delay=0s']).config), { role: 'test' });
  try {
    const admin = await rt.startAdmin('127.0.0.1:0');
    const base = `http://127.0.0.1:${admin!.port}`;
    const register = (bMetadata: Record<string, string>) =>
      rt.registry.register({ name: SERVICE, version: 'latest', metadata: {}, endpoints: [], nodes: [node('a', 1, { mtls: 'true' }), node('b', 2, bMetadata)] });
    await register({});
    // The cluster is made by the first call for the service (no connection is opened here).
    (await rt.clusters.acquire(SERVICE)).release({ kind: 'cancelled' }, 0);
    await waitFor(() => rt.clusters.cluster(SERVICE)?.hosts().length === 2);

    const text = await http('GET', `${base}/stats?filter=^cluster\\.go\\.mesh\\.srv\\.coverage\\.membership_(total|mtls)$`);
    assert.equal(text.text, `cluster.${SERVICE}.membership_mtls: 1\ncluster.${SERVICE}.membership_total: 2\n`);
    const prom = await http('GET', `${base}/stats?format=prometheus&filter=membership_(total|mtls)$`);
    assert.equal(
      prom.text,
      [
        '# HELP mesh_cluster_membership Hosts in the cluster',
        '# TYPE mesh_cluster_membership gauge',
        `mesh_cluster_membership{cluster_name="${SERVICE}"} 2`,
        '# HELP mesh_cluster_membership_mtls Hosts in the cluster whose node serves mutual TLS (mtls=true)',
        '# TYPE mesh_cluster_membership_mtls gauge',
        `mesh_cluster_membership_mtls{cluster_name="${SERVICE}"} 1`,
        '',
      ].join('\n'),
    );

    await register({ mtls: 'true' });
    await waitFor(() => rt.stats.gauge(`cluster.${SERVICE}.membership_mtls`).value === 2);
    assert.equal(rt.stats.gauge(`cluster.${SERVICE}.membership_total`).value, 2);
  } finally {
    await rt.shutdown();
  }
});
