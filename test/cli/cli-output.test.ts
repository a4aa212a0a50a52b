/**
 * The CLI writes all of its output before it exits (docs/cli.md "Output and exit status"): a
 * ~480 KB `mesh get service` answer and a 1 MB `mesh call --stream` reach a slow reader on a
 * pipe whole, with exit 0; a reader that goes away ends the command quietly with 141; a write error
 * on stdout (a full disk) is said on stderr with exit 1.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { openSync, closeSync, existsSync } from 'node:fs';
import { tempDir, sleep, CLI, type RunningProcess } from '../helpers.js';
import { startStreamService } from '../fixtures/stream-service-process.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';


/**
 * Spawns the CLI with stdout as a pipe read by a slow reader: it takes a pause after each chunk, as
 * a reader that processes what it reads does. The pause sets the reader's pace, not an order: the
 * assertions hold at any pace.
 */
async function runSlowly(args: string[], env: Record<string, string>, input?: string): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  if (input !== undefined) child.stdin!.end(input);
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = once(child, 'exit');
  const chunks: Buffer[] = [];
  for await (const chunk of child.stdout) {
    chunks.push(chunk as Buffer);
    await sleep(5); // the reader's pace (a slow consumer), not an order: the assertions hold at any pace
  }
  const [code] = await exited;
  return { code: code as number | null, stdout: Buffer.concat(chunks), stderr };
}

describe('CLI output on a pipe', () => {
  const home = tempDir();
  const env = { MESH_REGISTRY_ADDRESS: home.path, MESH_LOG_LEVEL: 'warning' };
  let svc: RunningProcess;

  before(async () => {
    // 40 nodes, each with 12 KB of metadata: a ~480 KB answer.
    const registry = new LocalRegistry(home.path);
    try {
      const metadata = Object.fromEntries(['a', 'b', 'c'].map((k) => [k, k.repeat(4000)]));
      for (let i = 0; i < 40; i++) {
        await registry.register({ name: 'go.mesh.srv.big', version: '', metadata: {}, endpoints: [], nodes: [{ id: `big-${i}`, address: '127.0.0.1', port: 10000 + i, metadata }] }, { ttlMs: 600_000 });
      }
    } finally {
      await registry.close();
    }
    svc = await startStreamService(home.path, env);
  });
  after(async () => {
    await svc.stop('SIGKILL');
    home.cleanup();
  });

  it('mesh get service --output=json: every byte of a ~480 KB answer reaches a slow reader, exit 0', async () => {
    const r = await runSlowly(['get', 'service', 'go.mesh.srv.big', '--output=json'], env);
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    assert.ok(r.stdout.length > 450_000, `${r.stdout.length} bytes`);
    assert.equal(r.stdout.at(-1), 0x0a, 'ends with its newline');
    const service = JSON.parse(r.stdout.toString()) as { nodes: unknown[] };
    assert.equal(service.nodes.length, 40);
  });

  it('mesh call --stream: every answer of a stream (1 MB of echoes) reaches a slow reader, exit 0', async () => {
    const lines = Array.from({ length: 16 }, (_, i) => JSON.stringify({ say: String(i).padEnd(64_000, '.') }));
    const r = await runSlowly(['call', '--stream=bidi', 'go.mesh.srv.streams', 'Echo.Chat'], env, lines.join('\n') + '\n');
    assert.equal(r.stderr, '');
    assert.equal(r.code, 0);
    const expected = lines.map((l) => JSON.stringify({ echo: (JSON.parse(l) as { say: string }).say }) + '\n').join('');
    assert.equal(r.stdout.length, Buffer.byteLength(expected));
    assert.equal(r.stdout.toString(), expected);
  });

  it('a reader that goes away ends the command quietly with 141 (as SIGPIPE shows in the shell)', async () => {
    const child: ChildProcess = spawn(process.execPath, [CLI, 'call', '--stream=server', 'go.mesh.srv.streams', 'Count.Up', '{"to":1000000}'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = once(child, 'exit');
    await once(child.stdout!, 'data');
    child.stdout!.destroy();
    const [code] = await exited;
    assert.equal(code, 141);
    assert.equal(stderr, '');
  });

  it('a write error on stdout is said on stderr, exit 1', { skip: !existsSync('/dev/full') && 'no /dev/full here' }, async () => {
    const full = openSync('/dev/full', 'w');
    try {
      const child = spawn(process.execPath, [CLI, 'get', 'service', 'go.mesh.srv.big'], { env: { ...process.env, ...env }, stdio: ['ignore', full, 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const [code] = await once(child, 'exit');
      assert.equal(stderr, 'mesh: cannot write the output: ENOSPC: no space left on device, write\n');
      assert.equal(code, 1);
    } finally {
      closeSync(full);
    }
  });
});
