/** What the gRPC tests share: the fixtures' .proto directory and Python's grpcio stubs. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

/** Debian's python3 with python3-grpcio and python3-grpc-tools (not a pyenv python on PATH). */
export const PYTHON = '/usr/bin/python3';
export const PROTOS = join(ROOT, 'test/fixtures/grpc');

/**
 * Generates the Python stubs of greeter.proto into dir with grpc_tools.protoc. False, with a loud
 * SKIP line, when /usr/bin/python3 has no grpc; with MESH_TEST_REQUIRE_ENGINES=1 that throws instead.
 */
export function pythonStubs(dir: string): boolean {
  const probe = spawnSync(PYTHON, ['-c', 'import grpc, grpc_tools'], { encoding: 'utf8' });
  if (probe.status !== 0) {
    const why = (probe.stderr || probe.error?.message || '').trim().split('\n').pop();
    const reason = `${PYTHON} has no grpc/grpc_tools (apt-get install python3-grpcio python3-grpc-tools): ${why}`;
    if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
    console.warn(`SKIP: ${reason}`);
    return false;
  }
  const gen = spawnSync(PYTHON, ['-m', 'grpc_tools.protoc', `-I${PROTOS}`, `--python_out=${dir}`, `--grpc_python_out=${dir}`, 'greeter.proto'], { encoding: 'utf8' });
  assert.equal(gen.status, 0, gen.stderr);
  return true;
}
