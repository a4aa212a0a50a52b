/**
 * `mesh run`: an app joins the mesh it runs in with that mesh's mutual TLS (docs/run.md, "Mutual
 * TLS"). Unless --mtls is given (flag, MESH_MTLS, or an app's `sidecar:` options in a file), the
 * mode is read from the registry: every node serves mutual TLS (`mtls=true`, as `mesh dev`'s do):
 * strict; some do: permissive; none, or no node: off. A mode other than off needs a workload
 * certificate got the way the mesh's nodes got theirs: the mesh CA in --ca_dir (what `mesh dev`
 * makes in $MESH_HOME/ca), --mtls_cert_file or --ca_server; without one the app runs plain and a
 * line says that callers with --mtls=strict will not reach it.
 */
import type { Config } from './flags.js';
import { optionsFromFlags } from './options.js';
import { createRegistry } from '../engines/registry/create.js';
import { caExists, defaultCaDir } from '../tls/workload/ca.js';
import { mtlsCensus, type MtlsCensus } from './check/mtls.js';
import { errorOf } from './check/finding.js';

export type MtlsMode = 'off' | 'permissive' | 'strict';

/** The mode for the apps, and the line `mesh run` prints about it (none for a mesh without mutual TLS). */
export interface MeshMtls {
  mode: MtlsMode;
  line?: string;
}

/** How long the registry gets to answer. */
const READ_TIMEOUT_MS = 3000;

/** `1 node serves`, `2 nodes serve`. */
const nodesServe = (n: number) => (n === 1 ? '1 node serves' : `${n} nodes serve`);

/** Where this process would get its workload certificate from, or undefined (`missing` says where the CA was looked for). */
export function certificateSource(config: Pick<Config, 'mtls_cert_file' | 'ca_server' | 'ca_dir' | 'mesh_home'>): { from?: string; missing: string } {
  const dir = defaultCaDir(config.ca_dir, config.mesh_home);
  if (config.mtls_cert_file !== undefined) return { from: `--mtls_cert_file ${config.mtls_cert_file}`, missing: dir };
  if (config.ca_server !== undefined) return { from: `mesh ca serve at ${config.ca_server}`, missing: dir };
  let found = false;
  try {
    found = caExists(dir);
  } catch {
    // An unreadable CA directory: no certificate from it.
  }
  return found ? { from: `the mesh CA in ${dir}`, missing: dir } : { missing: dir };
}

/** The mode the census says, given where certificates come from (a pure decision: tested as is). */
export function decideMtls(census: MtlsCensus, source: { from?: string; missing: string }): MeshMtls {
  const m = census.mtls.length;
  const all = m + census.plain.length;
  if (m === 0) return { mode: 'off' };
  if (source.from === undefined) {
    return {
      mode: 'off',
      line: `mTLS off: ${m} node${m === 1 ? '' : 's'} of the mesh serve${m === 1 ? 's' : ''} mutual TLS, but there is no mesh CA in ${source.missing}: callers with --mtls=strict will not reach the app (give --ca_dir, --mtls_cert_file or --ca_server, with --mtls=strict)`,
    };
  }
  if (m === all) return { mode: 'strict', line: `mTLS strict, as the mesh's: its ${nodesServe(all)} mutual TLS; certificates from ${source.from} (--mtls=off runs the app without)` };
  return { mode: 'permissive', line: `mTLS permissive, as the mesh's: ${m} of its ${all} nodes serve${m === 1 ? 's' : ''} mutual TLS; certificates from ${source.from} (--mtls=strict or --mtls=off to choose)` };
}

/** Reads the registry of `config` and decides; `apps`: the names about to be run (their own stale records do not count). */
export async function meshMtls(config: Config, apps: readonly string[]): Promise<MeshMtls> {
  const o = optionsFromFlags(config);
  if (typeof o.registry !== 'string') return { mode: 'off' };
  const registry = createRegistry(o.registry, o.registryAddress, {
    home: o.meshHome,
    tls: { caFile: o.registryTlsCaFile, certFile: o.registryTlsCertFile, keyFile: o.registryTlsKeyFile },
  });
  try {
    const census = await mtlsCensus(registry, READ_TIMEOUT_MS, new Set(apps));
    return decideMtls(census, certificateSource(config));
  } catch (err) {
    return { mode: 'off', line: `mTLS off: the registry could not be read to tell the mesh's mode (${errorOf(err)}); --mtls=strict or --mtls=permissive sets it` };
  } finally {
    await registry.close().catch(() => {});
  }
}
