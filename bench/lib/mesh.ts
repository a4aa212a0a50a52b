/** What every row's setup gets, and starting mesh commands from dist/. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { NotAvailable, freePort, startProcess, waitForPort, type Proc } from './proc.js';
import type { LoadTool } from './load.js';

export interface Settings {
  quick: boolean;
  duration: number;
  warmup: number;
  rounds: number;
  connections: number;
  threads: number;
  rows: string[];
  extras: boolean;
  profile: boolean;
  nginxWorkers: string;
  maxSeconds: number;
  out: string;
  logLevel: string;
  /** CPU lists when pinning: the measured proxy, and everything else (load generator, backends). */
  pin?: { proxy: string; rest: string };
}

const TSX = ['--import', 'tsx'];

export interface Ctx {
  root: string;
  tmp: string;
  registryDir: string;
  env: NodeJS.ProcessEnv;
  backendPort: number;
  backend: Proc;
  tool: LoadTool;
  meshMain: string;
  /** The node binary of the mesh processes (startMesh); default this process's (the Node 24 rows give another). */
  node?: string;
  settings: Settings;
  log: (msg: string) => void;
  /** Registers the bench backend as a plain node in the local registry (CLI). */
  registered: boolean;
  registerError?: string;
  /** Started on first use by the rows that need them (the mutual TLS backend), shared by every copy of the context. */
  lazy: { mtls?: Promise<MtlsBackend> };
}

/** The backend of the mutual TLS rows: a mesh CA, the backend serving mTLS with its certificate, a registry where it says mtls=true. */
export interface MtlsBackend {
  caDir: string;
  registryDir: string;
  proc: Proc;
}

export function tsxProcess(ctx: Ctx, name: string, script: string, args: string[], nodeArgs: string[] = []): Proc {
  return startProcess(name, process.execPath, [...nodeArgs, ...TSX, join(ctx.root, 'bench', script), ...args], { env: ctx.env, cwd: ctx.root });
}

/** Starts `mesh api|sidecar` from dist/ on a free port; NotAvailable when the command is missing. */
export async function startMesh(
  ctx: Ctx,
  name: string,
  command: 'api' | 'sidecar',
  flags: string[],
  nodeArgs: string[] = [],
  /** As a user starts it: no --log_level (the default, info) or other tuning flags; only the ports and the registry. */
  userDefaults = false,
): Promise<{ proc: Proc; port: number; admin: number }> {
  if (!existsSync(ctx.meshMain)) throw new NotAvailable(`${ctx.meshMain} not built`);
  if (!ctx.registered) throw new NotAvailable(`backend not registered: ${ctx.registerError}`);
  const port = await freePort();
  const admin = await freePort();
  const proc = startProcess(
    name,
    ctx.node ?? process.execPath,
    [
      ...nodeArgs,
      ctx.meshMain,
      command,
      `--address=127.0.0.1:${port}`,
      `--registry_address=${ctx.registryDir}`,
      `--admin_address=127.0.0.1:${admin}`,
      ...(userDefaults ? [] : [`--log_level=${ctx.settings.logLevel}`]),
      ...flags,
    ],
    { env: ctx.env, cwd: ctx.root },
  );
  await waitForPort(proc, port, 20000);
  return { proc, port, admin };
}

