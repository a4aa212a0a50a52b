/**
 * deploy/systemd checked with `systemd-analyze verify` (MESH_TEST_SYSTEMD_ANALYZE, else
 * systemd-analyze on PATH; skipped loudly without it, a failure with MESH_TEST_REQUIRE_ENGINES=1).
 * verify wants the ExecStart program to exist: the units are copied to a temporary directory with
 * /usr/local/bin/mesh (where `npm install -g` puts it) rewritten to this tree's built CLI. verify
 * exits 0 on an unknown key or a bad value and only prints a warning, so a unit passes when it
 * exits 0 and prints nothing. A broken copy shows both ways of failing. The units are not started
 * (that needs systemd as PID 1 and root); their stop settings are checked against the drain. The
 * sysusers file that makes their user is applied to an empty root directory.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { CLI, ROOT, binary, tempDir } from '../helpers.js';

const SYSTEMD = join(ROOT, 'deploy/systemd');
const UNITS = ['mesh-gateway.service', 'mesh-sidecar@.service'];
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

  it('systemd-analyze verify accepts mesh-gateway.service and an instance of mesh-sidecar@.service, without a warning', () => {
    for (const name of ['mesh-gateway.service', 'mesh-sidecar@billing.service']) {
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
      const drain = (name: string, dflt: string) => seconds(exec.find((a) => a.startsWith(`--${name}=`))?.split('=')[1] ?? dflt);
      assert.ok(seconds(service.get('TimeoutStopSec')!) > drain('drain_delay', '1s') + drain('drain_timeout', '10s'), `${unit}: TimeoutStopSec leaves room for the drain`);
    }
  });
});
