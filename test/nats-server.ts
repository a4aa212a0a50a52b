/**
 * A nats-server of the test's own on a free port, optionally with JetStream (`-js -sd <tmpdir>`),
 * that can be killed and started again on the same port and store. The binary: $MESH_TEST_NATS_SERVER,
 * else nats-server on PATH or in the sbin directories (apt: nats-server).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { once } from 'node:events';
import { waitFor } from './helpers.js';

export function findNatsServer(): string | undefined {
  const given = process.env.MESH_TEST_NATS_SERVER;
  if (given) return existsSync(given) ? given : undefined;
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/local/bin', '/sbin'];
  for (const d of dirs) {
    if (!d) continue;
    const p = join(d, 'nats-server');
    if (existsSync(p)) return p;
  }
  return undefined;
}

/** The binary, or undefined after a loud SKIP line; throws when MESH_TEST_REQUIRE_ENGINES=1. */
export function natsServerOrSkip(): { binary?: string; reason: string } {
  const binary = findNatsServer();
  const reason = 'nats-server binary not found (apt-get install -y nats-server, or set MESH_TEST_NATS_SERVER)';
  if (!binary) {
    if (process.env.MESH_TEST_REQUIRE_ENGINES === '1') throw new Error(`MESH_TEST_REQUIRE_ENGINES=1 but ${reason}`);
    console.warn(`SKIP: ${reason}`);
  }
  return { binary, reason };
}

export interface NatsServer {
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Starts nats-server on 127.0.0.1:port; with storeDir, JetStream is on and stores there. */
export async function startNatsServer(binary: string, port: number, storeDir?: string): Promise<NatsServer> {
  const args = ['-a', '127.0.0.1', '-p', String(port)];
  if (storeDir) args.push('-js', '-sd', storeDir);
  const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = once(child, 'exit');
  await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`nats-server exited:\n${out}`);
    return /Server is ready/.test(out);
  }, 10_000).catch((err: Error) => {
    child.kill('SIGKILL');
    throw new Error(`${err.message}\n${out}`);
  });
  return {
    child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
