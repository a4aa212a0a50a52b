/**
 * deploy/ checked without a cluster or a container engine: every Kubernetes manifest of the
 * kustomize bases and overlays, as its files hold it and as `kubectl kustomize` renders each
 * kustomization (kubectl 1.20's kustomize v2 to v5; MESH_TEST_KUBECTL, else kubectl on PATH:
 * skipped loudly without it, a failure with MESH_TEST_REQUIRE_ENGINES=1), against the Kubernetes
 * schemas (kubernetes-models, offline) and against what a schema cannot see (probes on declared
 * ports, a preStop drain, the drain within the grace period, a read-only root, selectors that
 * match, the mesh CA's single writer, the engines' Services in the trial, mutual TLS at the CA's
 * Service, the documented image, no secret in an argument); the Dockerfile parsed (a build and a
 * runtime stage from exact Node.js releases, production dependencies only, a non-root user, the
 * entrypoint and health check of deploy/, every COPY source in the build context). Each check is
 * also shown to fail on a broken copy. The entrypoint, the probes, the preStop drain and the mesh
 * CA with its join token run as processes in test/deploy/deploy-processes.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { ROOT, binary, tempDir } from '../helpers.js';
import {
  DOCKERFILE,
  IMAGE_APP,
  KUSTOMIZATIONS,
  checkDockerfile,
  checkManifests,
  checkPlatform,
  checkPodMonitor,
  checkScrapeAnnotations,
  documentedImage,
  dockerIgnored,
  find,
  flag,
  loadManifests,
  parseDockerfile,
  parseManifests,
  podSpec,
  renderKustomization,
  shellBlock,
  validateManifest,
  type Manifest,
} from '../fixtures/deploy.js';

const manifests = loadManifests();
/** kustomize as kubectl embeds it (MESH_TEST_KUBECTL, else kubectl on PATH): Debian's kubernetes-client has it. */
const kubectl = binary('MESH_TEST_KUBECTL', 'kubectl', 'apt-get install kubernetes-client');
const dockerfile = readFileSync(DOCKERFILE, 'utf8');
const dockerignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8');
/** What the package ships (package.json "files"), but the README: the image needs the rest. */
const shipped = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { files: string[] }).files.filter((f) => f !== 'README.md' && !f.startsWith('!')); // a negation (!dist/src/**/*.map) leaves files out, it names none

const clone = <T>(x: T): T => structuredClone(x);

describe('deploy/kubernetes: the resources of the kustomizations, as their files hold them', () => {
  it('the platform (gateway, mesh CA, engines ConfigMap), an app with the sidecar as a second container, and the trial\'s etcd and NATS', () => {
    const kinds = manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort();
    assert.deepEqual(kinds, [
      'ConfigMap/mesh-engines', 'Deployment/billing', 'Deployment/etcd', 'Deployment/mesh-ca', 'Deployment/mesh-gateway', 'Deployment/nats',
      'PersistentVolumeClaim/mesh-ca', 'PodDisruptionBudget/mesh-gateway', 'Service/etcd', 'Service/mesh-ca', 'Service/mesh-gateway', 'Service/nats',
    ]);
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
    assert.equal(flag(sidecar, 'inbound_address'), '$(POD_IP):9443');
    // The mesh CA: `mesh ca serve` on every interface, named as the Service that reaches it; the CA made once by an init container.
    const ca = podSpec(find(manifests, 'Deployment', 'mesh-ca'));
    assert.deepEqual(ca.containers[0]!.args, ['ca', 'serve', '--address=0.0.0.0:9943', '--ca_serve_names=mesh-ca,mesh-ca.$(POD_NAMESPACE).svc,mesh-ca.$(POD_NAMESPACE).svc.cluster.local']);
    assert.deepEqual(ca.initContainers!.map((c) => c.name), ['ca-init']);
    assert.deepEqual(ca.volumes!.find((v) => v.name === 'mesh-ca')!.persistentVolumeClaim, { claimName: 'mesh-ca' });
    // etcd and NATS: named in one ConfigMap every mesh container reads; the trial's Services carry those names.
    const engines = find(manifests, 'ConfigMap', 'mesh-engines') as unknown as { data: Record<string, string> };
    assert.deepEqual(engines.data, { MESH_REGISTRY: 'etcd', MESH_REGISTRY_ADDRESS: 'etcd:2379', MESH_BROKER: 'nats', MESH_BROKER_ADDRESS: 'nats://nats:4222' });
  });

  it('no secret is an arg: the admin token and engine passwords come from optional Secrets, the join token from a file of the join Secret', () => {
    const gateway = podSpec(find(manifests, 'Deployment', 'mesh-gateway')).containers[0]!;
    assert.deepEqual(gateway.env?.find((e) => e.name === 'MESH_ADMIN_TOKEN')?.valueFrom?.secretKeyRef, { name: 'mesh-admin', key: 'token', optional: true });
    const sidecar = podSpec(find(manifests, 'Deployment', 'billing')).containers[1]!;
    for (const c of [gateway, sidecar]) {
      assert.deepEqual(c.envFrom?.map((r) => r.secretRef?.name ?? r.configMapRef?.name), ['mesh-engines', 'mesh-engine-credentials'], c.name);
      assert.equal(c.envFrom?.[1]?.secretRef?.optional, true);
      assert.equal(c.env?.find((e) => e.name === 'MESH_CA_TOKEN_FILE')?.value, '/var/run/mesh-ca-join/token');
      assert.deepEqual(c.env?.find((e) => e.name === 'MESH_CA_ROOT_FINGERPRINT')?.valueFrom?.secretKeyRef, { name: 'mesh-ca-join', key: 'root_fingerprint' });
    }
    for (const d of ['mesh-gateway', 'billing']) {
      assert.deepEqual(podSpec(find(manifests, 'Deployment', d)).volumes!.find((v) => v.name === 'mesh-ca-join')!.secret, { secretName: 'mesh-ca-join', defaultMode: 0o440, items: [{ key: 'token', path: 'token' }] });
    }
    assert.deepEqual(checkPlatform(manifests, { image: 'mesh', engines: true }), []);
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
    const pvc = clone(find(manifests, 'PersistentVolumeClaim', 'mesh-ca')) as Manifest & { spec: { accessModes: unknown } };
    pvc.spec.accessModes = 'ReadWriteOnce';
    assert.throws(() => validateManifest(pvc), /accessModes must be array/);
    const [broken] = parseManifests('apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports:\n    - port: "eighty"\n', 'broken.yaml');
    assert.throws(() => validateManifest(broken!), /port must be integer/);
    assert.throws(() => validateManifest({ ...broken!, kind: 'Ingress', apiVersion: 'networking.k8s.io/v1' }), /no schema for networking\.k8s\.io\/v1 Ingress/);
  });

  it('what the schema cannot see holds: probes on declared ports, a preStop drain, the drain within the grace period, a read-only root, selectors that match', () => {
    assert.deepEqual(checkManifests(manifests), []);
    assert.deepEqual(checkScrapeAnnotations(manifests), []);
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
    assert.match(plant((g) => g.volumes!.splice(g.volumes!.findIndex((v) => v.name === 'mesh-ca-join'), 1)).join('\n'), /container gateway: mounts mesh-ca-join, which the pod does not declare/);
    // The mesh CA: one writer of its directory, probed over HTTPS, its claim and its init container's root read-only.
    const ca = (f: (spec: ReturnType<typeof podSpec>, d: Manifest & { spec: { replicas?: number; strategy?: { type: string } } }, all: Manifest[]) => void) =>
      plant((_g, all) => {
        const d = find(all, 'Deployment', 'mesh-ca') as Manifest & { spec: { replicas?: number; strategy?: { type: string } } };
        f(podSpec(d), d, all);
      }).join('\n');
    assert.match(ca((_s, d) => (d.spec.replicas = 2)), /container ca: the CA directory has one writer: 1 replica, replaced with the Recreate strategy/);
    assert.match(ca((_s, d) => (d.spec.strategy = { type: 'RollingUpdate' })), /1 replica, replaced with the Recreate strategy/);
    assert.match(ca((s) => (s.containers[0]!.readinessProbe!.httpGet!.scheme = 'HTTP')), /container ca: no readiness probe on GET \/v1\/roots over HTTPS/);
    assert.match(ca((s) => (s.containers[0]!.args = ['ca', 'show'])), /runs `mesh ca show`, not `mesh ca serve`/);
    assert.match(ca((_s, _d, all) => all.splice(all.findIndex((m) => m.kind === 'PersistentVolumeClaim'), 1)), /volume mesh-ca names PersistentVolumeClaim mesh-ca, which these manifests do not hold/);
    assert.match(ca((s) => (s.initContainers![0]!.securityContext!.readOnlyRootFilesystem = false)), /init container ca-init: the root file system is not read-only/);
    // Prometheus: the annotations name the metrics listener.
    const annotations = clone(manifests);
    (find(annotations, 'Deployment', 'billing') as unknown as { spec: { template: { metadata: { annotations: Record<string, string> } } } }).spec.template.metadata.annotations['prometheus.io/port'] = '9102';
    assert.match(checkScrapeAnnotations(annotations).join('\n'), /Deployment billing: the prometheus.io annotations .* do not name \/metrics at port 9103 of --metrics_address/);
  });

  it('the platform\'s promises find each planted fault: an engine without its Service, mutual TLS off or at no CA, a secret in the args or required, another image', () => {
    const plant = (f: (all: Manifest[]) => void, opts = { image: 'mesh', engines: true }): string => {
      const all = clone(manifests);
      f(all);
      return checkPlatform(all, opts).join('\n');
    };
    const container = (all: Manifest[], d: string, c: string) => podSpec(find(all, 'Deployment', d)).containers.find((x) => x.name === c)!;
    assert.match(plant((all) => all.splice(all.findIndex((m) => m.kind === 'Service' && m.metadata.name === 'etcd'), 1)), /ConfigMap mesh-engines MESH_REGISTRY_ADDRESS=etcd:2379: no Service etcd with port 2379 that reaches a pod/);
    assert.match(plant((all) => ((find(all, 'Service', 'nats') as unknown as { spec: { ports: Array<{ port: number }> } }).spec.ports[0]!.port = 4223)), /MESH_BROKER_ADDRESS=nats:\/\/nats:4222: no Service nats with port 4222/);
    assert.equal(plant((all) => all.splice(all.findIndex((m) => m.kind === 'Service' && m.metadata.name === 'etcd'), 1), { image: 'mesh', engines: false }), '');
    const sidecar = (f: (c: ReturnType<typeof container>) => void) => plant((all) => f(container(all, 'billing', 'mesh-sidecar')));
    assert.match(sidecar((c) => (c.args = c.args!.filter((a) => a !== '--mtls=strict'))), /container mesh-sidecar: mutual TLS is off, not --mtls=strict/);
    assert.match(sidecar((c) => (c.args = c.args!.map((a) => (a === '--mtls=strict' ? '--mtls=permissive' : a)))), /mutual TLS is permissive, not --mtls=strict/);
    assert.match(sidecar((c) => (c.args = c.args!.filter((a) => !a.startsWith('--ca_server')))), /container mesh-sidecar: no --ca_server/);
    assert.match(sidecar((c) => (c.args = c.args!.map((a) => a.replace('https://mesh-ca:9943', 'https://mesh-ca:9944')))), /--ca_server=https:\/\/mesh-ca:9944: no Service mesh-ca with port 9944 that reaches mesh ca serve/);
    assert.match(sidecar((c) => (c.args = c.args!.map((a) => a.replace('https://mesh-ca:9943', 'https://mesh-gateway:80')))), /no Service mesh-gateway with port 80 that reaches mesh ca serve/);
    assert.match(sidecar((c) => (c.args = c.args!.map((a) => a.replace('https://mesh-ca:9943', 'http://mesh-ca:9943')))), /is not https:\/\/HOST:PORT/);
    assert.match(
      plant((all) => (container(all, 'mesh-ca', 'ca').args = ['ca', 'serve', '--address=0.0.0.0:9943', '--ca_serve_names=ca.internal'])),
      /mesh-ca is not among the --ca_serve_names of mesh ca serve \(ca\.internal\)/,
    );
    assert.match(sidecar((c) => c.env!.push({ name: 'MESH_CA_TOKEN', valueFrom: { secretKeyRef: { name: 'mesh-ca-join', key: 'token' } } })), /the join token as MESH_CA_TOKEN: mount it as a file/);
    assert.match(sidecar((c) => (c.volumeMounts = c.volumeMounts!.filter((v) => v.name !== 'mesh-ca-join'))), /the join token \(MESH_CA_TOKEN_FILE=\/var\/run\/mesh-ca-join\/token\) is not a file of a mounted Secret/);
    assert.match(sidecar((c) => (c.env!.find((e) => e.name === 'MESH_CA_ROOT_FINGERPRINT')!.valueFrom!.secretKeyRef!.name = 'other')), /the CA's root is not pinned from the join Secret/);
    assert.match(sidecar((c) => c.args!.push('--ca_token=eyJ')), /container mesh-sidecar: a secret as an argument \(--ca_token\)/);
    assert.match(plant((all) => container(all, 'mesh-gateway', 'gateway').args!.push('--admin_token=x')), /container gateway: a secret as an argument \(--admin_token\)/);
    assert.match(plant((all) => container(all, 'mesh-gateway', 'gateway').args!.push('--registry_address=https://u:p@etcd:2379')), /a password in a URL argument/);
    assert.match(plant((all) => delete container(all, 'mesh-gateway', 'gateway').env!.find((e) => e.name === 'MESH_ADMIN_TOKEN')!.valueFrom!.secretKeyRef!.optional), /container gateway: Secret mesh-admin is required; only the join Secret may be/);
    assert.match(plant((all) => delete container(all, 'billing', 'mesh-sidecar').envFrom![1]!.secretRef!.optional), /Secret mesh-engine-credentials is required/);
    assert.match(plant(() => undefined, { image: 'mesh:0.1.0', engines: true }), /container gateway: image mesh, not mesh:0\.1\.0 \(the image the docs build\)/);
  });
});

describe('deploy/kubernetes rendered by kustomize (kubectl kustomize)', { skip: !kubectl && 'kubectl not available' }, () => {
  const renders = new Map<string, Manifest[]>();
  /** Rendered once a kustomization, a fresh copy each call (tests change theirs). */
  const render = (dir: string) => {
    if (!renders.has(dir)) renders.set(dir, renderKustomization(kubectl!, dir));
    return clone(renders.get(dir)!);
  };
  const kinds = (ms: Manifest[]) => ms.map((m) => `${m.kind}/${m.metadata.name}`).sort();
  const image = documentedImage();
  const platform = [
    'ConfigMap/mesh-engines', 'Deployment/mesh-ca', 'Deployment/mesh-gateway', 'PersistentVolumeClaim/mesh-ca', 'PodDisruptionBudget/mesh-gateway', 'Service/mesh-ca', 'Service/mesh-gateway',
  ];

  it('the README builds one image tag, and the docs page builds the same', () => {
    assert.match(image, /^mesh:\d+\.\d+\.\d+$/);
    assert.equal(documentedImage(readFileSync(join(ROOT, 'docs/kubernetes.md'), 'utf8')), image);
  });

  it('overlays/trial: the platform, etcd and NATS behind the Services the ConfigMap names, and the example app; every mesh container the documented image; valid and checked', (t) => {
    t.diagnostic(`${kubectl} kustomize, image ${image}`);
    const trial = render(KUSTOMIZATIONS.trial);
    assert.deepEqual(kinds(trial), [...platform, 'Deployment/billing', 'Deployment/etcd', 'Deployment/nats', 'Service/etcd', 'Service/nats'].sort());
    for (const m of trial) validateManifest(m);
    assert.deepEqual(checkManifests(trial), []);
    assert.deepEqual(checkPlatform(trial, { image, engines: true }), []);
    assert.deepEqual(checkScrapeAnnotations(trial), []);
    // The example app runs a stand-in that answers GET /health on the app's port, not the placeholder.
    const app = podSpec(find(trial, 'Deployment', 'billing')).containers.find((c) => c.name === 'app')!;
    assert.doesNotMatch(app.image!, /example\.com/);
    assert.equal(app.env?.find((e) => e.name === 'WHOAMI_PORT_NUMBER')?.value, String(app.ports![0]!.containerPort));
    for (const d of trial.filter((m) => m.kind === 'Deployment')) for (const c of podSpec(d).containers) assert.match(c.image!, /:[\w.-]+$/, `${d.metadata.name}/${c.name}: an exact tag`);
  });

  it('base/platform and overlays/production hold the platform alone: no example app, no etcd or NATS', () => {
    const base = render(KUSTOMIZATIONS.platform);
    assert.deepEqual(kinds(base), platform);
    assert.deepEqual(checkManifests(base), []);
    assert.deepEqual(checkPlatform(base, { image: 'mesh', engines: false }), []);
    const production = render(KUSTOMIZATIONS.production);
    assert.deepEqual(kinds(production), platform);
    for (const m of production) validateManifest(m);
    assert.deepEqual(checkManifests(production), []);
    assert.deepEqual(checkPlatform(production, { image: `registry.example.com/${image}`, engines: false }), []);
  });

  it('base/example-app holds the app alone', () => {
    assert.deepEqual(kinds(render(KUSTOMIZATIONS.exampleApp)), ['Deployment/billing']);
  });

  it('prometheus-operator: a PodMonitor on the metrics port of the gateway and of every sidecar; a broken one is found', () => {
    const [monitor, ...rest] = render(KUSTOMIZATIONS.prometheusOperator);
    assert.deepEqual(rest, []);
    const trial = render(KUSTOMIZATIONS.trial);
    assert.deepEqual(checkPodMonitor(monitor!, trial), []);
    const broken = clone(monitor!) as Manifest & { spec: { podMetricsEndpoints: Array<{ port: string }>; selector: { matchLabels: Record<string, string> } } };
    broken.spec.podMetricsEndpoints[0]!.port = 'http';
    assert.match(checkPodMonitor(broken, trial).join('\n'), /no endpoint on \/metrics at the port of --metrics_address of billing\/mesh-sidecar \(metrics\)/);
    broken.spec.selector.matchLabels = { 'app.kubernetes.io/name': 'mesh-gateway' };
    assert.match(checkPodMonitor(broken, trial).join('\n'), /does not select Deployment billing/);
  });

  it('docs/kubernetes.md: its kubectl kustomize block, run as written, prints what the page shows', () => {
    const page = readFileSync(join(ROOT, 'docs/kubernetes.md'), 'utf8');
    const block = shellBlock(page, 'kubectl kustomize deploy/kubernetes/overlays/trial');
    const shown = /```sh\nkubectl kustomize deploy\/kubernetes\/overlays\/trial[^\n]*\n```\n\n```\n([\s\S]*?)```/.exec(page)?.[1];
    assert.ok(shown, 'the block is followed by the output it prints');
    // A HOME of its own: without one kubectl keeps its cache in .kube under the working directory, the checkout.
    const home = tempDir('mesh-kubectl-home-');
    const run = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', block], { cwd: ROOT, env: { PATH: `${dirname(kubectl!)}:/usr/bin:/bin`, HOME: home.path }, encoding: 'utf8' });
    home.cleanup();
    assert.ok(!existsSync(join(ROOT, '.kube')), 'kubectl left nothing in the checkout');
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, shown);
    assert.ok(shown.includes(`image: ${image}\n`));
  });

  it('a kustomization that names a missing file fails to render, with kustomize\'s words', () => {
    const dir = tempDir('mesh-kustomize-');
    try {
      writeFileSync(join(dir.path, 'kustomization.yaml'), 'resources:\n  - missing.yaml\n');
      assert.throws(() => render(dir.path), /kustomize .*: exit 1: .*missing\.yaml/s);
    } finally {
      dir.cleanup();
    }
  });
});

describe('deploy/Dockerfile (parsed; no container engine here builds it)', () => {
  const { global, stages } = parseDockerfile(dockerfile);

  it('two stages from the same Node.js version: a full build image and a slim runtime one', () => {
    assert.deepEqual(global.map((i) => i.args), ['NODE_VERSION=24.21.0']);
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
    assert.match(faults(dockerfile.replace('ARG NODE_VERSION=24.21.0', 'ARG NODE_VERSION=24')), /FROM node:24-bookworm: a floating tag; pin an exact release/);
    assert.match(faults(dockerfile.replace('FROM node:${NODE_VERSION}-bookworm-slim AS runtime', 'FROM node:lts-slim AS runtime')), /FROM node:lts-slim: a floating tag/);
    assert.equal(faults(dockerfile.replace('FROM node:${NODE_VERSION}-bookworm-slim AS runtime', `FROM node:24-bookworm-slim@sha256:${'a'.repeat(64)} AS runtime`)), '');
  });

  it('.dockerignore keeps what was built or installed here out of the context, and the sources in', () => {
    for (const p of ['node_modules', 'node_modules/yaml/package.json', 'dist/src/cli/main.js', '.git', 'test/deploy/deploy-manifests.test.ts']) assert.ok(dockerIgnored(p, dockerignore), p);
    for (const p of ['src/cli/main.ts', 'package.json', 'package-lock.json', 'deploy/entrypoint.sh', 'deploy/probe.mjs', 'proto', 'examples', 'LICENSE']) {
      assert.ok(!dockerIgnored(p, dockerignore), p);
    }
  });
});
