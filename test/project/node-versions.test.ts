/**
 * One story about Node.js versions: the image (deploy/Dockerfile) ships the exact Node.js release
 * CI (.ci/run) runs the whole suite on first, which is the recommended one of `mesh check`; README.md lists the
 * supported versions `mesh check` knows, names the same recommended one and the same image tag,
 * and quotes exactly the warning `mesh check` prints on Node.js 20, as docs/cli.md does.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../helpers.js';
import { parseDockerfile } from '../fixtures/deploy.js';
import { checkNodeVersion, RECOMMENDED_NODE, SUPPORTED_NODE } from '../../src/cli/check/node-version.js';
import { formatFindings } from '../../src/cli/check/finding.js';

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const major = (version: string) => Number(/^v?(\d+)(?:\.|$)/.exec(version)?.[1]);

/** The Node.js version of CI's first `npm test` run (`echo "== npm test on Node $VAR"`, `VAR=x.y.z`). */
function ciMainNode(ci: string): string {
  const name = /^echo "== npm test on Node \$(\w+)"$/m.exec(ci)?.[1];
  assert.ok(name, '.ci/run: no `echo "== npm test on Node $VAR"` line');
  const value = new RegExp(`^${name}=(\\d+\\.\\d+\\.\\d+)$`, 'm').exec(ci)?.[1];
  assert.ok(value, `.ci/run: no ${name}=x.y.z`);
  return value;
}

/** The runtime image's tag with NODE_VERSION's default put in. */
function dockerRuntimeImage(text: string): { nodeVersion: string; runtime: string } {
  const { global, stages } = parseDockerfile(text);
  const nodeVersion = /^NODE_VERSION=(\S+)$/.exec(global.find((i) => i.args.startsWith('NODE_VERSION='))?.args ?? '')?.[1];
  assert.ok(nodeVersion, 'deploy/Dockerfile: no ARG NODE_VERSION=<default>');
  return { nodeVersion, runtime: stages.at(-1)!.from.replace('${NODE_VERSION}', nodeVersion) };
}

describe('Node.js versions: the image, CI, README.md and mesh check tell one story', () => {
  const readme = read('README.md');

  it("the image's Node.js major is CI's main Node.js, the recommended one", () => {
    const ci = ciMainNode(read('.ci/run'));
    const { nodeVersion, runtime } = dockerRuntimeImage(read('deploy/Dockerfile'));
    assert.equal(nodeVersion, ci, `deploy/Dockerfile ships Node.js ${nodeVersion}, CI runs the whole suite on ${ci}`);
    assert.equal(major(ci), RECOMMENDED_NODE, `mesh check recommends Node.js ${RECOMMENDED_NODE}, CI runs ${ci}`);
    assert.equal(runtime, `node:${ci}-bookworm-slim`);
  });

  it("README.md's supported, recommended and image versions are mesh check's and the Dockerfile's", () => {
    const m = /^Supported Node\.js versions: (.+?)\. Node\.js (\d+) is the recommended one:$/m.exec(readme);
    assert.ok(m, 'README.md: no "Supported Node.js versions: ... Node.js N is the recommended one:" line');
    const listed = m[1]!.replace(/\([^)]*\)/g, '').match(/\d+/g)!.map(Number);
    assert.deepEqual(listed, [...SUPPORTED_NODE]);
    assert.equal(Number(m[2]), RECOMMENDED_NODE);
    const { runtime } = dockerRuntimeImage(read('deploy/Dockerfile'));
    assert.ok(readme.includes(`(\`deploy/Dockerfile\`: \`${runtime}\`)`), `README.md should name the image's ${runtime}`);
    // The oldest supported release is package.json's engines floor, as README.md says.
    const floor = /^>=(\d+\.\d+\.\d+)$/.exec((JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node)?.[1];
    assert.ok(floor);
    assert.equal(major(floor), SUPPORTED_NODE[0]);
    assert.ok(m[1]!.startsWith(`${SUPPORTED_NODE[0]} (${floor} or later)`), m[1]);
  });

  it('README.md and docs/cli.md quote the warning mesh check prints today on Node.js 20, byte for byte', () => {
    for (const [file, text] of [['README.md', readme], ['docs/cli.md', read('docs/cli.md')]] as const) {
      const lines = text.split('\n').filter((l) => l.startsWith('warning: node_version: '));
      assert.equal(lines.length, 1, `${file}: one node_version warning quoted`);
      const version = /Node\.js (v20\.\d+\.\d+) /.exec(lines[0]!)?.[1];
      assert.ok(version, `${file}: ${lines[0]}`);
      assert.equal(lines[0] + '\n', formatFindings(checkNodeVersion(version, Date.now())), file);
    }
    assert.match(readme, /Node\.js 20 reached its end of life on 2026-04-30: mesh still supports it/);
  });

  it('the recommended Node.js passes mesh check', () => {
    assert.deepEqual(checkNodeVersion(`v${RECOMMENDED_NODE}.0.0`, Date.now()), []);
  });
});
