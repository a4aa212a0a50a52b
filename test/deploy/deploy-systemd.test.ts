/**
 * deploy/systemd checked with `systemd-analyze verify` (MESH_TEST_SYSTEMD_ANALYZE, else
 * systemd-analyze on PATH; skipped loudly without it, a failure with MESH_TEST_REQUIRE_ENGINES=1).
 * verify wants the ExecStart program to exist: the units are copied to a temporary directory with
 * /usr/local/bin/mesh (where `npm install -g` puts it) rewritten to this tree's built CLI. verify
 * exits 0 on an unknown key or a bad value and only prints a warning, so a unit passes when it
 * exits 0 and prints nothing. A broken copy shows both ways of failing. The units are not started
 * (that needs systemd as PID 1 and root); their stop settings are checked against the drain. The
 * sysusers file that makes their user is applied to an empty root directory. mesh-ca.service's
 * commands run as processes (its ExecStartPre twice, then ExecStart), and a gateway with
 * mesh-gateway.service's command line and environment joins it over mutual TLS.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { CLI, ROOT, binary, tempDir } from '../helpers.js';
import { startCommand } from '../fixtures/engines-common.js';

const SYSTEMD = join(ROOT, 'deploy/systemd');
const UNITS = ['mesh-gateway.service', 'mesh-sidecar@.service', 'mesh-ca.service'];
const INSTALLED_MESH = '/usr/local/bin/mesh';
const analyze = binary('MESH_TEST_SYSTEMD_ANALYZE', 'systemd-analyze', "install Debian's systemd package (CI's .ci/run does)");

/** `systemd-analyze verify NAME` in `dir`: its exit code and everything it printed. */
function verify(dir: string, name: string): { code: number | null; output: string } {
  const r = spawnSync(analyze!, ['verify', `./${name}`], { cwd: dir, encoding: 'utf8', env: { ...process.env, SYSTEMD_LOG_COLOR: '0' } });
  return { code: r.status, output: `${r.stdout}${r.stderr}`.trim() };
}

/** The `Key=value` lines of a unit's section (a key may repeat). */
function section(text: string, name: string): Array<[string, string]> {
  const body = text.split(/^\[/m).find((s) => s.startsWith(`${name}]`)) ?? '';
  return [...body.matchAll(/^([A-Za-z]+)=(.*)$/gm)].map((m) => [m[1]!, m[2]!]);
}

const seconds = (v: string) => Number(/^(\d+)(ms|s)$/.exec(v)![1]) / (v.endsWith('ms') ? 1000 : 1);

describe('deploy/systemd', { skip: !analyze && 'systemd-analyze not available' }, () => {
  const dir = tempDir('mesh-systemd-');
  after(() => dir.cleanup());
  for (const unit of UNITS) {
    const text = readFileSync(join(SYSTEMD, unit), 'utf8');
    assert.ok(text.includes(INSTALLED_MESH), `${unit} runs ${INSTALLED_MESH}`);
    writeFileSync(join(dir.path, unit), text.replaceAll(INSTALLED_MESH, CLI));
  }

  it('systemd-analyze verify accepts mesh-gateway.service, an instance of mesh-sidecar@.service and mesh-ca.service, without a warning', () => {
    for (const name of ['mesh-gateway.service', 'mesh-sidecar@billing.service', 'mesh-ca.service']) {
      const r = verify(dir.path, name);
      assert.equal(r.code, 0, r.output);
      assert.equal(r.output, '', `${name}: systemd-analyze printed warnings`);
    }
  });

  it('a broken unit fails: a misspelt key is reported, a missing program fails verify', () => {
    const good = readFileSync(join(dir.path, 'mesh-gateway.service'), 'utf8');
    writeFileSync(join(dir.path, 'typo.service'), good.replace('ProtectSystem=strict', 'ProtectSystm=strict'));
    const typo = verify(dir.path, 'typo.service');
    assert.match(typo.output, /Unknown key '?ProtectSystm'? in section '?\[?Service\]?'?/);
    writeFileSync(join(dir.path, 'missing.service'), readFileSync(join(SYSTEMD, 'mesh-gateway.service'), 'utf8'));
    const missing = verify(dir.path, 'missing.service');
    if (spawnSync('test', ['-x', INSTALLED_MESH]).status !== 0) {
      assert.equal(missing.code, 1, missing.output);
      assert.match(missing.output, /\/usr\/local\/bin\/mesh is not executable/);
    }
  });

  it('mesh.conf makes the user the units run as, with /var/lib/mesh as its home (systemd-sysusers into an empty root)', (t) => {
    const sysusers = join(dirname(analyze!), 'systemd-sysusers');
    if (!existsSync(sysusers)) return t.skip(`no ${sysusers}`);
    const root = join(dir.path, 'root');
    mkdirSync(join(root, 'etc'), { recursive: true });
    const r = spawnSync(sysusers, [`--root=${root}`, '-'], { input: readFileSync(join(SYSTEMD, 'mesh.conf')), encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.match(readFileSync(join(root, 'etc/passwd'), 'utf8'), /^mesh:x:\d+:\d+:mesh service mesh:\/var\/lib\/mesh:\/usr\/sbin\/nologin$/m);
  });

  it('no secret on ExecStart: the admin and sidecar tokens are systemd credentials, read by their _file options', () => {
    for (const [unit, credential, variable] of [
      ['mesh-gateway.service', 'admin-token:/etc/mesh/admin-token', 'MESH_ADMIN_TOKEN_FILE=%d/admin-token'],
      ['mesh-sidecar@.service', 'sidecar-token:/etc/mesh/sidecar-%i.token', 'MESH_SIDECAR_TOKEN_FILE=%d/sidecar-token'],
    ] as const) {
      const service = section(readFileSync(join(SYSTEMD, unit), 'utf8'), 'Service');
      const exec = service.find(([k]) => k === 'ExecStart')![1];
      assert.doesNotMatch(exec, /--[a-z_]*(token|secret|password)=|:\/\/[^/@\s]*:[^/@\s]*@/, unit);
      assert.ok(service.some(([k, v]) => k === 'LoadCredential' && v === credential), unit);
      assert.ok(service.some(([k, v]) => k === 'Environment' && v === variable), unit);
    }
  });

  it('mutual TLS strict for the gateway and the sidecars: the CA service and the root pinned from /etc/mesh/mtls.env (required), the join token a file read at each use', () => {
    for (const unit of ['mesh-gateway.service', 'mesh-sidecar@.service']) {
      const service = section(readFileSync(join(SYSTEMD, unit), 'utf8'), 'Service');
      assert.ok(service.find(([k]) => k === 'ExecStart')![1].split(' ').includes('--mtls=strict'), unit);
      assert.ok(service.some(([k, v]) => k === 'EnvironmentFile' && v === '/etc/mesh/mtls.env'), `${unit}: EnvironmentFile=/etc/mesh/mtls.env, not optional`);
      assert.ok(service.some(([k, v]) => k === 'Environment' && v === 'MESH_CA_TOKEN_FILE=/var/lib/mesh/ca-join-token'), unit);
    }
    const ca = section(readFileSync(join(SYSTEMD, 'mesh-ca.service'), 'utf8'), 'Service');
    assert.equal(ca.find(([k]) => k === 'ExecStart')![1], `${INSTALLED_MESH} ca serve --address=0.0.0.0:9943 --ca_serve_names=\${CA_SERVE_NAMES}`);
    assert.ok(ca.some(([k, v]) => k === 'EnvironmentFile' && v === '/etc/mesh/ca.env'));
  });

  it('as processes: mesh-ca.service makes the CA once and serves it; a gateway started as mesh-gateway.service with the token and mtls.env the unit comments describe joins it', async () => {
    const home = join(dir.path, 'var-lib-mesh');
    mkdirSync(home, { mode: 0o700 });
    const ca = new Map(section(readFileSync(join(SYSTEMD, 'mesh-ca.service'), 'utf8'), 'Service'));
    const local = (line: string) => line.replaceAll(INSTALLED_MESH, CLI).replaceAll('/var/lib/mesh', home);
    // /etc/mesh/ca.env's CA_SERVE_NAMES, in every command's environment as systemd gives it.
    const env = { MESH_HOME: home, CA_SERVE_NAMES: 'ca.internal,127.0.0.1', PATH: process.env.PATH ?? '/usr/bin:/bin' };
    // ExecStartPre: `sh -c '...'`, as systemd splits it (the single-quoted script is one word).
    const pre = /^\/bin\/sh -c '([^']*)'$/.exec(ca.get('ExecStartPre')!);
    assert.ok(pre, ca.get('ExecStartPre'));
    for (const [round, expect] of [[1, /^made a mesh CA in /m], [2, /^$/]] as const) {
      const r = spawnSync('/bin/sh', ['-c', local(pre[1]!)], { env, encoding: 'utf8' });
      assert.equal(r.status, 0, `round ${round}: ${r.stdout}${r.stderr}`);
      assert.match(`${r.stdout}${r.stderr}`, expect, `round ${round}`);
    }
    const [, ...serveArgs] = local(ca.get('ExecStart')!).replace('--address=0.0.0.0:9943', '--address=127.0.0.1:0').replace('${CA_SERVE_NAMES}', env.CA_SERVE_NAMES).split(' ');
    const serve = startCommand(CLI, serveArgs, env, { cleanEnv: true });
    try {
      const listening = await serve.waitForOutput(/mesh ca serve listening on https:\/\/127\.0\.0\.1:\d+ as spiffe:\/\/mesh\.local\/svc\/mesh\.ca \(names: ca\.internal, 127\.0\.0\.1;/);
      const port = /:(\d+) as/.exec(listening)![1];
      // The join token and mtls.env, as the comments of mesh-ca.service and mesh-gateway.service make them.
      const token = spawnSync(process.execPath, [CLI, 'ca', 'token', "--services=mesh.api,go.mesh.srv.*", '--ttl=168h'], { env, encoding: 'utf8' });
      assert.equal(token.status, 0, token.stderr);
      writeFileSync(join(home, 'ca-join-token'), token.stdout);
      const show = spawnSync(process.execPath, [CLI, 'ca', 'show'], { env, encoding: 'utf8' });
      const fingerprint = show.stdout.split('\n')[2]!.split('\t')[1]!;
      const gatewayUnit = readFileSync(join(SYSTEMD, 'mesh-gateway.service'), 'utf8');
      const service = section(gatewayUnit, 'Service');
      const gatewayEnv: Record<string, string> = { PATH: env.PATH, MESH_CA_SERVER: `https://127.0.0.1:${port}`, MESH_CA_ROOT_FINGERPRINT: `sha256:${fingerprint}` };
      for (const [k, v] of service) if (k === 'Environment') gatewayEnv[v.split('=')[0]!] = local(v.slice(v.indexOf('=') + 1));
      gatewayEnv.MESH_ADMIN_TOKEN_FILE = join(dir.path, 'admin-token'); // the credential %d/admin-token
      writeFileSync(join(dir.path, 'admin-token'), 'a'.repeat(64));
      gatewayEnv.MESH_ADMIN_ADDRESS = '127.0.0.1:0';
      const [, ...apiArgs] = local(service.find(([k]) => k === 'ExecStart')![1])
        .replace('--address=:8080', '--address=127.0.0.1:0')
        .replace('--metrics_address=127.0.0.1:9102', '--metrics_address=127.0.0.1:0')
        .split(' ');
      const gateway = startCommand(CLI, apiArgs, gatewayEnv, { cleanEnv: true });
      try {
        await gateway.waitForOutput(/mesh api listening on/);
        await serve.waitForOutput(/issued spiffe:\/\/mesh\.local\/svc\/mesh\.api \(serial [0-9a-f]+\) with join token [0-9a-f]+/);
        assert.equal(await gateway.stop('SIGTERM'), 0, gateway.output());
      } finally {
        await gateway.stop('SIGKILL');
      }
      assert.equal(await serve.stop('SIGTERM'), 0, serve.output());
    } finally {
      await serve.stop('SIGKILL');
    }
  });

  it('hardened, run as the mesh user with /var/lib/mesh as MESH_HOME, stopped by SIGTERM with time for the whole drain', () => {
    for (const unit of UNITS) {
      const text = readFileSync(join(SYSTEMD, unit), 'utf8');
      const service = new Map(section(text, 'Service'));
      const env = section(text, 'Service').filter(([k]) => k === 'Environment').map(([, v]) => v);
      for (const [key, value] of Object.entries({
        User: 'mesh',
        StateDirectory: 'mesh',
        StateDirectoryMode: '0700',
        NoNewPrivileges: 'yes',
        ProtectSystem: 'strict',
        ProtectHome: 'yes',
        PrivateTmp: 'yes',
        CapabilityBoundingSet: '',
        KillSignal: 'SIGTERM',
        KillMode: 'mixed',
        UMask: '0077',
      })) {
        assert.equal(service.get(key), value, `${unit}: ${key}`);
      }
      assert.ok(env.includes('MESH_HOME=/var/lib/mesh'), unit);
      const exec = service.get('ExecStart')!.split(' ');
      assert.equal(exec[0], INSTALLED_MESH);
      if (exec[1] === 'ca') continue; // mesh ca serve does not drain: it closes its listener
      const drain = (name: string, dflt: string) => seconds(exec.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt);
      assert.ok(seconds(service.get('TimeoutStopSec')!) > drain('drain_delay', '1s') + drain('drain_timeout', '10s'), `${unit}: TimeoutStopSec leaves room for the drain`);
    }
  });
});
