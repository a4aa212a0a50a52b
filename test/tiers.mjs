/**
 * The unit tier: the test files that spawn no process (no CLI, no engine, no openssl) and talk to
 * nothing but servers of their own on loopback. `npm run test:unit` runs these, each with
 * test/unit-guard.mjs loaded (a child_process call fails the test) and without the engines'
 * MESH_TEST_* addresses; `npm test` runs every file, these included, once. A new in-process test
 * belongs here; a file missing from the list only runs with the full suite. No timings either:
 * router-regex-timing.test.ts, in process but a measurement (a bound that catches a backtracking
 * regex engine), runs with the full suite only.
 */
export const UNIT = [
  'test/address.test.ts',
  'test/admin-host.test.ts',
  'test/admin.test.ts',
  'test/api-handler.test.ts',
  'test/authz.test.ts',
  'test/client-budget.test.ts',
  'test/client-hung-nodes.test.ts',
  'test/duration.test.ts',
  'test/edge-cors-rpc.test.ts',
  'test/error-catalogue.test.ts',
  'test/flags.test.ts',
  'test/front-context.test.ts',
  'test/front-phases.test.ts',
  'test/fuzz/broker.test.ts',
  'test/fuzz/duration.test.ts',
  'test/fuzz/flags.test.ts',
  'test/fuzz/headers.test.ts',
  'test/fuzz/json.test.ts',
  'test/fuzz/proxy-config.test.ts',
  'test/fuzz/resolve.test.ts',
  'test/fuzz/router.test.ts',
  'test/grpc-stream-client.test.ts',
  'test/grpc-stream-limits.test.ts',
  'test/headers.test.ts',
  'test/json-codec.test.ts',
  'test/layers.test.ts',
  'test/lifecycle-inflight.test.ts',
  'test/module-homes.test.ts',
  'test/mtls-coverage.test.ts',
  'test/mtls-mesh.test.ts',
  'test/proxy-config.test.ts',
  'test/regex-escape.test.ts',
  'test/registry-create.test.ts',
  'test/registry-validate.test.ts',
  'test/resolve.test.ts',
  'test/rpc.test.ts',
  'test/security/path-property.test.ts',
  'test/sidecar-stream.test.ts',
  'test/stream.test.ts',
  'test/trace-context.test.ts',
  'test/upstream-cluster-manager.test.ts',
  'test/upstream-health-check.test.ts',
  'test/upstream-host-close.test.ts',
  'test/upstream-lb.test.ts',
  'test/upstream-outlier.test.ts',
  'test/workload-tls.test.ts',
];
