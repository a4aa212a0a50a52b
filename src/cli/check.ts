/**
 * `mesh check`: what is wrong with this mesh, one line per finding, each an error or a warning
 * (src/cli/check/*: one check a file, each returning findings). `--output=json` prints an array of
 * {level, check, message}. Exits 1 when there is an error, else 0; with no finding one line says so.
 */
import type { Config } from './flags.js';
import type { Output } from './commands.js';
import { DirectOperations } from './operations.js';
import { defaultRegistryDirectory } from '../engines/registry/create.js';
import { defaultCaDir } from '../tls/workload/ca.js';
import { errorOf, formatFindings, type Finding } from './check/finding.js';
import { checkNodeVersion } from './check/node-version.js';
import { checkCaModes, checkFileModes } from './check/files.js';
import { checkCa, checkCertFile } from './check/certificates.js';
import { checkRegistry } from './check/registry.js';
import { checkNodes } from './check/nodes.js';
import { checkPlainNodes, mtlsCensus } from './check/mtls.js';
import { checkBroker } from './check/broker.js';
import { checkRateLimitStore } from './check/rate-limit-store.js';
import { checkRoutes } from './check/routes.js';
import type { Service } from '../engines/registry/registry.js';

/** How long the registry, the broker and each node get to answer. */
export const CHECK_TIMEOUT_MS = 3000;

function registryName(config: Config): string {
  if (config.registry === 'local') return `registry local ${config.registry_address ?? defaultRegistryDirectory(config.mesh_home)}`;
  if (config.registry === 'etcd') return `registry etcd ${config.registry_address ?? ''}`.trimEnd();
  return `registry ${config.registry}`;
}

/** `services`: the registry's, when it could be read. */
async function runtimeChecks(config: Config, given: ReadonlySet<string>): Promise<{ findings: Finding[]; services?: Service[] }> {
  let ops: DirectOperations;
  try {
    // The findings say what is wrong; the runtime's own warnings (registry unreachable…) would repeat them.
    // The broker secret file is checked by checkBroker: one that cannot be read would stop the runtime, and every other check with it.
    ops = new DirectOperations({ ...config, broker_secret_file: undefined, log_level: given.has('log_level') ? config.log_level : 'error' });
  } catch (err) {
    return { findings: [{ level: 'error', check: 'options', message: errorOf(err) }] };
  }
  try {
    const registry = await checkRegistry(ops, registryName(config), CHECK_TIMEOUT_MS);
    const nodes = registry.services ? await checkNodes(ops, registry.services, CHECK_TIMEOUT_MS) : [];
    // A registry that cannot be read is reported above (by checkRegistry or checkNodes), once.
    const plain = registry.services ? checkPlainNodes(await mtlsCensus(ops.runtime.registry, CHECK_TIMEOUT_MS).catch(() => ({ mtls: [], plain: [] }))) : [];
    const broker = await checkBroker(ops, config.broker_secret_file, CHECK_TIMEOUT_MS);
    return { findings: [...registry.findings, ...nodes, ...plain, ...broker], services: registry.services };
  } finally {
    await ops.close().catch(() => {});
  }
}

export async function collectFindings(config: Config, given: ReadonlySet<string>, now = Date.now()): Promise<Finding[]> {
  const findings: Finding[] = [...checkNodeVersion(process.version, now)];
  // Before the registry is opened: opening the local registry tightens the modes it finds.
  const home = defaultRegistryDirectory(config.mesh_home);
  findings.push(...checkFileModes(home));
  if (config.registry === 'local' && config.registry_address && config.registry_address !== home) findings.push(...checkFileModes(config.registry_address));
  const caDir = defaultCaDir(config.ca_dir, config.mesh_home);
  findings.push(...checkCaModes(caDir), ...checkCa(caDir, now));
  if (config.tls_cert_file) findings.push(...checkCertFile(config.tls_cert_file, now));
  findings.push(...(await checkRateLimitStore(config, CHECK_TIMEOUT_MS)));
  const runtime = await runtimeChecks(config, given);
  findings.push(...runtime.findings);
  if (config.routes !== undefined) findings.push(...checkRoutes(config.routes, runtime.services));
  const order = (f: Finding) => (f.level === 'error' ? 0 : 1);
  // The CA directory under $MESH_HOME is seen by both file checks: one line for it.
  const unique = [...new Map(findings.map((f) => [f.message, f])).values()];
  return unique.sort((a, b) => order(a) - order(b));
}

/** Runs `mesh check`; resolves with the exit code. */
export async function runCheck(config: Config, given: ReadonlySet<string>, io: Output): Promise<number> {
  const findings = await collectFindings(config, given);
  io.out(config.output === 'json' ? JSON.stringify(findings) + '\n' : formatFindings(findings));
  return findings.some((f) => f.level === 'error') ? 1 : 0;
}
