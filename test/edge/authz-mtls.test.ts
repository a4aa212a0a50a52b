/**
 * Who may call whom, end to end over mutual TLS (docs/security.md, "Authorization between
 * services"): one RPC server on loopback terminating mTLS with its workload certificate, the
 * rules of --authz_rules, and callers holding different identities (certificates from a CA of
 * the test's own, test/fixtures/pki.ts, made with openssl): a rule denies one caller and allows
 * another, the handler sees each caller's SPIFFE ID in ctx.peer, and in permissive mode a plain
 * caller is `unauthenticated`. The callers are the mesh client (each with its own workload
 * certificate) and undici with a client certificate (for the exact bytes of the answers).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import pino from 'pino';
import { StatsStore } from '../../src/base/stats/store.js';
import { Logging } from '../../src/base/util/log.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { ClusterManager } from '../../src/core/upstream/cluster-manager.js';
import { Client } from '../../src/core/client/client.js';
import { RpcServer } from '../../src/framework/server/rpc-server.js';
import { MTLS_METADATA_KEY, type MtlsMode } from '../../src/base/mtls/workload-tls.js';
import { MeshError } from '../../src/base/errors.js';
import { readAuthzSetup, ServiceAuthz } from '../../src/edge/auth/authz.js';
import { makePki, testWorkloadTls, TEST_TRUST_DOMAIN, type Leaf, type Pki, type TestCa } from '../fixtures/pki.js';
import { tempDir } from '../helpers.js';

const PAYMENTS = 'go.mesh.srv.payments';
const ORDERS = 'go.mesh.api.orders';
const SHOP = 'go.mesh.api.shop';
const LIMITS = { maxConnections: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, drainTimeoutMs: 1000 };
const RULES = `rules:
  - name: refunds come from the orders API only
    caller: ${ORDERS}
    service: ${PAYMENTS}
    endpoint: Payments.*
    action: allow
  - caller: unauthenticated
    endpoint: Payments.Status
    action: allow
  - service: ${PAYMENTS}
    endpoint: Payments.*
    action: deny
`;

let pki: Pki;
let root: TestCa;
const leaves: Record<string, Leaf> = {};
const dir = tempDir('mesh-authz-mtls-');
const closers: Array<() => Promise<unknown> | void> = [];

before(() => {
  pki = makePki();
  root = pki.ca('mesh-root');
  for (const name of [PAYMENTS, ORDERS, SHOP]) leaves[name] = root.leaf(name);
});
after(async () => {
  for (const close of closers.reverse()) await close();
  pki.cleanup();
  dir.cleanup();
});

/** The payments service: an RPC server terminating mTLS (`mode`), with the rules; its handlers answer who called. */
async function payments(mode: MtlsMode) {
  const file = join(dir.path, `rules-${mode}.yaml`);
  writeFileSync(file, RULES);
  const stats = new StatsStore();
  const authz = new ServiceAuthz(readAuthzSetup({ authz_rules: file, authz_default: 'allow', trust_domain: TEST_TRUST_DOMAIN })!, { stats, log: pino({ level: 'silent' }) });
  const server = new RpcServer({ service: PAYMENTS, maxBodyBytes: 1 << 20, limits: LIMITS, stats, workloadTls: testWorkloadTls(mode, leaves[PAYMENTS]!, [root.cert]), authz });
  let ran = 0;
  const answer = (_req: unknown, ctx: { peer?: string }) => {
    ran++;
    return { peer: ctx.peer ?? null };
  };
  server.handle({ name: 'Payments.Refund', handler: answer });
  server.handle({ name: 'Payments.Status', handler: answer });
  const { port } = await server.listen('127.0.0.1', 0);
  closers.push(() => server.close());
  return { port, stats, ran: () => ran };
}

/** undici over TLS with `leaf` as the client certificate (none: a TLS caller without one); plain http without `tls`. */
async function call(port: number, endpoint: string, leaf: Leaf | undefined, tls = true): Promise<{ status: number; body: string }> {
  const dispatcher = tls ? new Agent({ connect: { ca: root.cert, cert: leaf?.cert, key: leaf?.key, checkServerIdentity: () => undefined } }) : undefined;
  try {
    const res = await request(`${tls ? 'https' : 'http'}://127.0.0.1:${port}/`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'mesh-service': PAYMENTS, 'mesh-endpoint': endpoint },
      body: '{}',
      ...(dispatcher ? { dispatcher } : {}),
    });
    return { status: res.statusCode, body: await res.body.text() };
  } finally {
    await dispatcher?.close();
  }
}

const denial = (caller: string, endpoint: string, rule: number) =>
  `{"id":"go.mesh.authz","code":403,"detail":"caller ${caller} may not call ${PAYMENTS} ${endpoint} (denied by rule ${rule})","status":"Forbidden"}`;

describe('authz over mutual TLS: a rule denies one caller and allows another', () => {
  it('strict: the orders API may refund, the shop may not (403 naming it); ctx.peer is the SPIFFE ID', async () => {
    const svc = await payments('strict');
    const orders = leaves[ORDERS]!.spiffeId;
    const shop = leaves[SHOP]!.spiffeId;
    assert.deepEqual(await call(svc.port, 'Payments.Refund', leaves[ORDERS]), { status: 200, body: JSON.stringify({ peer: orders }) });
    assert.deepEqual(await call(svc.port, 'Payments.Refund', leaves[SHOP]), { status: 403, body: denial(shop, 'Payments.Refund', 3) });
    assert.deepEqual(await call(svc.port, 'Payments.Status', leaves[SHOP]), { status: 403, body: denial(shop, 'Payments.Status', 3) });
    assert.equal(svc.ran(), 1, 'a denied call never reaches the handler');
    assert.equal(svc.stats.counter('authz.allowed').value, 1);
    assert.equal(svc.stats.counter('authz.denied').value, 2);
  });

  it('the mesh client with two workload identities against one service', async () => {
    const svc = await payments('strict');
    const registry = new MemoryRegistry();
    closers.push(() => registry.close());
    await registry.register({
      name: PAYMENTS,
      version: 'v1',
      metadata: {},
      endpoints: [],
      nodes: [{ id: 'payments-1', address: '127.0.0.1', port: svc.port, metadata: { protocol: 'mesh', [MTLS_METADATA_KEY]: 'true' } }],
    });
    const clientOf = (leaf: Leaf) => {
      const stats = new StatsStore();
      const workload = testWorkloadTls('strict', leaf, [root.cert]);
      const cm = new ClusterManager({ registry, stats, logging: new Logging('off'), lbPolicy: 'round_robin', workloadTls: () => workload });
      closers.push(() => cm.close());
      return new Client({ selector: cm, requestTimeoutMs: 5000, retries: 0, stats });
    };
    const orders = clientOf(leaves[ORDERS]!);
    const shop = clientOf(leaves[SHOP]!);
    assert.deepEqual(await orders.callValue(PAYMENTS, 'Payments.Refund', {}), { peer: leaves[ORDERS]!.spiffeId });
    await assert.rejects(shop.callValue(PAYMENTS, 'Payments.Refund', {}), (err: unknown) => {
      assert.ok(err instanceof MeshError);
      assert.equal(err.toBody(), denial(leaves[SHOP]!.spiffeId, 'Payments.Refund', 3));
      return true;
    });
  });

  it('permissive: a plain caller is `unauthenticated`; a caller with a certificate is still known by it', async () => {
    const svc = await payments('permissive');
    assert.deepEqual(await call(svc.port, 'Payments.Status', undefined, false), { status: 200, body: '{"peer":null}' });
    assert.deepEqual(await call(svc.port, 'Payments.Refund', undefined, false), { status: 403, body: denial('unauthenticated', 'Payments.Refund', 3) });
    assert.deepEqual(await call(svc.port, 'Payments.Refund', leaves[ORDERS]), { status: 200, body: JSON.stringify({ peer: leaves[ORDERS]!.spiffeId }) });
  });
});
