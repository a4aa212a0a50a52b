/**
 * deploy/ checked without a cluster or a container engine: every Kubernetes manifest against the
 * Kubernetes schemas (kubernetes-models, offline) and against what a schema cannot see (probes on
 * declared ports, a preStop drain, the drain within the grace period, a read-only root, selectors
 * that match); the Dockerfile parsed (a build and a runtime stage, production dependencies only,
 * a non-root user, the entrypoint and health check of deploy/, every COPY source in the build
 * context). Each check is also shown to fail on a broken copy. The entrypoint, the probes and the
 * preStop drain run as processes in test/deploy/deploy-processes.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../helpers.js';
import {
  DOCKERFILE,
  IMAGE_APP,
  checkDockerfile,
  checkManifests,
  dockerIgnored,
  find,
  flag,
  loadManifests,
  parseDockerfile,
  parseManifests,
  podSpec,
  validateManifest,
  type Manifest,
} from '../fixtures/deploy.js';

const manifests = loadManifests();
const dockerfile = readFileSync(DOCKERFILE, 'utf8');
const dockerignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8');
/** What the package ships (package.json "files"), but the README: the image needs the rest. */
const shipped = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { files: string[] }).files.filter((f) => f !== 'README.md' && !f.startsWith('!')); // a negation (!dist/src/**/*.map) leaves files out, it names none

const clone = <T>(x: T): T => structuredClone(x);

describe('deploy/kubernetes', () => {
  it('holds the gateway (Deployment, Service, PodDisruptionBudget), an app with the sidecar as a second container, and the engines ConfigMap', () => {
    const kinds = manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort();
    assert.deepEqual(kinds, ['ConfigMap/mesh-engines', 'Deployment/billing', 'Deployment/mesh-gateway', 'PodDisruptionBudget/mesh-gateway', 'Service/mesh-gateway']);
    const gateway = podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers;
    assert.equal(gateway.length, 1);
    assert.equal(gateway[0]!.args?.[0], 'api');
    const app = podSpec(find(manifests, 'Deployment', 'billing')).containers;
    assert.deepEqual(app.map((c) => c.name), ['app', 'mesh-sidecar']);
    const sidecar = app[1]!.args ?? [];
    assert.equal(sidecar[0], 'sidecar');
    assert.equal(flag(sidecar, 'server_name'), 'go.mesh.srv.billing');
    assert.equal(flag(sidecar, 'server_address'), '$(POD_IP):9090');
    assert.equal(flag(sidecar, 'healthcheck_url'), 'http://127.0.0.1:9090/health');
    // etcd and NATS are the user's Services, named in one ConfigMap every mesh container reads.
    const engines = find(manifests, 'ConfigMap', 'mesh-engines') as unknown as { data: Record<string, string> };
    assert.deepEqual(engines.data, { MESH_REGISTRY: 'etcd', MESH_REGISTRY_ADDRESS: 'etcd:2379', MESH_BROKER: 'nats', MESH_BROKER_ADDRESS: 'nats://nats:4222' });
  });

  it('no secret is an arg: the admin token and engine passwords come from optional Secrets, as MESH_* variables', () => {
    const secretFlag = /^--[a-z_]*(token|secret|password)(=|$)/;
    for (const d of manifests.filter((m) => m.kind === 'Deployment')) {
      for (const c of podSpec(d).containers) {
        for (const a of c.args ?? []) assert.doesNotMatch(a, secretFlag, `${d.metadata.name}/${c.name}`);
        for (const a of c.args ?? []) assert.doesNotMatch(a, /:\/\/[^/@\s]*:[^/@\s]*@/, `${d.metadata.name}/${c.name}: a password in a URL`);
        for (const e of c.env ?? []) if (e.valueFrom?.secretKeyRef) assert.equal(e.valueFrom.secretKeyRef.optional, true, e.name);
        for (const ref of c.envFrom ?? []) if (ref.secretRef) assert.equal(ref.secretRef.optional, true);
      }
    }
    const gateway = podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers[0]!;
    assert.deepEqual(gateway.env?.find((e) => e.name === 'MESH_ADMIN_TOKEN')?.valueFrom?.secretKeyRef, { name: 'mesh-admin', key: 'token', optional: true });
    for (const c of [gateway, podSpec(find(manifests, 'Deployment', 'billing')).containers[1]!]) {
      assert.deepEqual(c.envFrom?.map((r) => r.secretRef?.name ?? r.configMapRef?.name), ['mesh-engines', 'mesh-engine-credentials'], c.name);
    }
  });

  for (const m of manifests) {
    it(`${m.file}: ${m.kind} ${m.metadata.name} is valid against the Kubernetes schema`, () => {
      validateManifest(m);
    });
  }

  it('a manifest that breaks the schema fails validation, with the schema saying where', () => {
    const gateway = clone(find(manifests, 'Deployment', 'mesh-gateway'));
    podSpec(gateway).containers[0]!.ports![0]!.containerPort = 'http' as unknown as number;
    assert.throws(() => validateManifest(gateway), /containers\/0\/ports\/0\/containerPort must be integer/);
    const pdb = clone(find(manifests, 'PodDisruptionBudget', 'mesh-gateway')) as Manifest & { spec: { minAvailable: unknown } };
    pdb.spec.minAvailable = { count: 1 };
    assert.throws(() => validateManifest(pdb), /minAvailable/);
    const [broken] = parseManifests('apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports:\n    - port: "eighty"\n', 'broken.yaml');
    assert.throws(() => validateManifest(broken!), /port must be integer/);
    assert.throws(() => validateManifest({ ...broken!, kind: 'Ingress', apiVersion: 'networking.k8s.io/v1' }), /no schema for networking\.k8s\.io\/v1 Ingress/);
  });

  it('what the schema cannot see holds: probes on declared ports, a preStop drain, the drain within the grace period, a read-only root, selectors that match', () => {
    assert.deepEqual(checkManifests(manifests), []);
  });

  it('the same checks find each planted fault', () => {
    const plant = (f: (gateway: ReturnType<typeof podSpec>, all: Manifest[]) => void): string[] => {
      const all = clone(manifests);
      f(podSpec(find(all, 'Deployment', 'mesh-gateway')), all);
      return checkManifests(all);
    };
    assert.match(plant((g) => (g.containers[0]!.readinessProbe!.httpGet!.port = 'admin')).join('\n'), /readinessProbe on port admin, which the container does not declare/);
    assert.match(plant((g) => delete g.containers[0]!.lifecycle).join('\n'), /the preStop hook does not drain/);
    assert.match(plant((g) => (g.terminationGracePeriodSeconds = 20)).join('\n'), /does not fit in terminationGracePeriodSeconds \(20000 ms\)/);
    assert.match(plant((g) => (g.containers[0]!.securityContext!.readOnlyRootFilesystem = false)).join('\n'), /the root file system is not read-only/);
    assert.match(plant((g) => (g.containers[0]!.volumeMounts = g.containers[0]!.volumeMounts!.filter((v) => v.mountPath !== '/var/lib/mesh'))).join('\n'), /MESH_HOME is not on a volume/);
    assert.match(plant((g) => (g.containers[0]!.livenessProbe!.failureThreshold = 2)).join('\n'), /could restart a draining pod/);
    assert.match(plant((g) => (g.containers[0]!.args = [...g.containers[0]!.args!.filter((a) => !a.startsWith('--metrics_address')), '--metrics_address=:9999'])).join('\n'), /--metrics_address=:9999, a port the container does not declare/);
    assert.match(
      plant((_g, all) => ((find(all, 'Service', 'mesh-gateway') as unknown as { spec: { selector: Record<string, string> } }).spec.selector = { app: 'gateway' })).join('\n'),
      /Service mesh-gateway: its selector matches no Deployment's pods/,
    );
    assert.match(plant((_g, all) => all.splice(all.findIndex((m) => m.kind === 'ConfigMap'), 1)).join('\n'), /envFrom names ConfigMap mesh-engines/);
  });
});

describe('deploy/Dockerfile (parsed; no container engine here builds it)', () => {
  const { global, stages } = parseDockerfile(dockerfile);

  it('two stages from the same Node.js version: a full build image and a slim runtime one', () => {
    assert.deepEqual(global.map((i) => i.args), ['NODE_VERSION=24']);
    assert.deepEqual(stages.map((s) => [s.from, s.name]), [
      ['node:${NODE_VERSION}-bookworm', 'build'],
      ['node:${NODE_VERSION}-bookworm-slim', 'runtime'],
    ]);
    assert.equal(stages[1]!.instructions.filter((i) => i.keyword === 'USER').at(-1)!.args, '10001:10001');
    assert.deepEqual(stages[1]!.instructions.find((i) => i.keyword === 'ENTRYPOINT')!.exec, [`${IMAGE_APP}/deploy/entrypoint.sh`]);
    const health = stages[1]!.instructions.find((i) => i.keyword === 'HEALTHCHECK')!;
    assert.deepEqual(health.exec, ['node', `${IMAGE_APP}/deploy/probe.mjs`, 'ready']);
    assert.deepEqual(health.flags, { interval: '10s', timeout: '5s', 'start-period': '20s', retries: '3' });
  });

  it('production dependencies and dist only, non-root, entrypoint and health check of deploy/, every COPY source in the context', () => {
    assert.deepEqual(checkDockerfile(dockerfile, dockerignore, shipped), []);
  });

  it('the checks find each planted fault', () => {
    const faults = (text: string, ignore = dockerignore) => checkDockerfile(text, ignore, shipped).join('\n');
    assert.match(faults(dockerfile.replace('USER 10001:10001', 'USER root')), /the runtime stage runs as root/);
    assert.match(faults(dockerfile.replace(/^USER .*$/m, '')), /runs as root \(no USER\)/);
    assert.match(faults(dockerfile.replace('npm prune --omit=dev', 'true')), /does not prune the dev dependencies/);
    assert.match(faults(dockerfile.replace('RUN npm ci --no-audit --no-fund', 'RUN npm ci --omit=dev')), /does not install every dependency/);
    assert.match(faults(dockerfile.replace('WORKDIR /app', 'WORKDIR /app\nRUN npm install left-pad')), /the runtime stage installs packages/);
    assert.match(faults(dockerfile.replace(/^HEALTHCHECK .*$/m, '')), /HEALTHCHECK is not/);
    assert.match(faults(dockerfile.replace(/^FROM node:\$\{NODE_VERSION\}-bookworm-slim AS runtime$/m, 'FROM node:${NODE_VERSION}-bookworm AS runtime')), /starts from the build image/);
    assert.match(faults(dockerfile.replace(' /src/src/fronts/dashboard/dashboard.css', '')), /does not copy src\/fronts\/dashboard\/dashboard\.css, which the package ships/);
    assert.match(faults(dockerfile.replace('COPY examples ./examples', 'COPY example ./examples')), /COPY example \(line \d+\): no such file in the build context/);
    assert.match(faults(dockerfile, `${dockerignore}\nexamples\n`), /COPY examples \(line \d+\): excluded by \.dockerignore/);
    assert.match(faults(dockerfile.split('FROM node:${NODE_VERSION}-bookworm-slim')[0]!), /1 stage\(s\)/);
  });

  it('.dockerignore keeps what was built or installed here out of the context, and the sources in', () => {
    for (const p of ['node_modules', 'node_modules/yaml/package.json', 'dist/src/cli/main.js', '.git', 'test/deploy/deploy-manifests.test.ts']) assert.ok(dockerIgnored(p, dockerignore), p);
    for (const p of ['src/cli/main.ts', 'package.json', 'package-lock.json', 'deploy/entrypoint.sh', 'deploy/probe.mjs', 'proto', 'examples', 'LICENSE']) {
      assert.ok(!dockerIgnored(p, dockerignore), p);
    }
  });
});
