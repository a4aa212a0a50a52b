/**
 * `mesh ca init|show|rotate|status|token|revoke|serve`: the mesh CA in `--ca_dir` (src/tls/workload/ca.ts).
 * Text output is tab-separated with a header row, as the other commands print tables;
 * `--output=json` prints one JSON document. `status` exits 1 when a root (or the signer) expires
 * within 30 days. `token` prints a join token (src/tls/workload/token.ts); `revoke` appends to the revocation
 * list (src/tls/workload/revocation.ts); `serve` runs the
 * signing service (src/tls/workload/ca-server.ts) until SIGINT or SIGTERM.
 */
import { readFileSync } from 'node:fs';
import type { X509Certificate } from 'node:crypto';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { CaServer, DEFAULT_CA_SERVE_ADDRESS } from '../tls/workload/ca-server.js';
import { makeToken, serviceGlobProblem } from '../tls/workload/token.js';
import { revocationValue, revoke } from '../tls/workload/revocation.js';
import { Logging } from '../base/util/log.js';
import { parseAddress } from '../base/util/address.js';
import { MIN_CERT_TTL_MS } from '../tls/workload/index.js';
import { EXPIRY_WARNING_DAYS, caExpiryWarnings, daysLeft, iso } from '../tls/workload/ca-expiry.js';
import { caExists, defaultCaDir, finishRotation, importCa, initCa, readRoots, readSignerCertificate, rotateCa, trustDomainProblem, CaError, type CaRoot } from '../tls/workload/ca.js';

export { EXPIRY_WARNING_DAYS };

const USAGE = 'usage: mesh ca init [--ca_cert_file=FILE --ca_key_file=FILE] | mesh ca show | mesh ca rotate [--finish] | mesh ca status | mesh ca token --services=GLOBS [--ttl=1h] | mesh ca revoke --serial=SERIAL|--service=NAME|--token_id=ID | mesh ca serve [--address=HOST:PORT] [--ca_serve_names=NAMES] [--ca_join_lifetime=168h]';

function rootJson(r: CaRoot, signer: X509Certificate | undefined, now: number) {
  return {
    serial: r.serial,
    fingerprint: r.fingerprint,
    subject: r.subject,
    notBefore: iso(r.notBefore),
    notAfter: iso(r.notAfter),
    daysLeft: daysLeft(r.notAfter, now),
    signs: isSignerRoot(r, signer),
  };
}

/** True when this root signs now: it is the signer, or the root the signer's chain ends in. */
function isSignerRoot(r: CaRoot, signer: X509Certificate | undefined): boolean {
  if (!signer) return false;
  return r.cert.raw.equals(signer.raw) || (signer.checkIssued(r.cert) && signer.verify(r.cert.publicKey));
}

function rootsTable(roots: CaRoot[], signer: X509Certificate | undefined, now: number): string {
  const rows = roots.map((r) => [r.serial, r.fingerprint, r.subject, iso(r.notAfter), String(daysLeft(r.notAfter, now)), isSignerRoot(r, signer) ? 'yes' : 'no'].join('\t'));
  return ['serial\tfingerprint\tsubject\texpires\tdays_left\tsigns', ...rows].join('\n') + '\n';
}

function readFile(path: string, flag: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new CaError(`cannot read --${flag} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/**
 * Runs `mesh ca …`; resolves with the exit code. `fromEnv`: the flags set by MESH_* variables,
 * which a subcommand that does not take them ignores (one environment serves `ca serve` and the
 * others), where the same flag on the command line is refused.
 */
export async function runCaCommand(positionals: string[], config: Config, io: Output, fromEnv: ReadonlySet<string> = new Set()): Promise<number> {
  const [, noun, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError(`mesh ca ${noun}: unexpected argument "${rest[0]}" (${USAGE})`);
  const json = config.output === 'json';
  const dir = defaultCaDir(config.ca_dir, config.mesh_home);
  const now = Date.now();
  const domainProblem = trustDomainProblem(config.trust_domain);
  if (domainProblem && (noun === 'init' || noun === 'rotate')) throw new UsageError(`--trust_domain ${JSON.stringify(config.trust_domain)}: ${domainProblem}`);
  if (config.finish && noun !== 'rotate') throw new UsageError(`--finish is for mesh ca rotate (${USAGE})`);
  if ((config.ca_cert_file || config.ca_key_file) && noun !== 'init') throw new UsageError(`--ca_cert_file and --ca_key_file are for mesh ca init (${USAGE})`);
  if (((config.address !== undefined && !fromEnv.has('address')) || (config.ca_serve_names.length > 0 && !fromEnv.has('ca_serve_names'))) && noun !== 'serve') throw new UsageError(`--address and --ca_serve_names are for mesh ca serve (${USAGE})`);
  if (config.services.length > 0 && noun !== 'token') throw new UsageError(`--services and --ttl are for mesh ca token (${USAGE})`);
  const revocations = (['serial', 'service', 'token_id'] as const).filter((k) => config[k] !== undefined);
  if (revocations.length > 0 && noun !== 'revoke') throw new UsageError(`--serial, --service and --token_id are for mesh ca revoke (${USAGE})`);
  if (domainProblem && (noun === 'token' || noun === 'serve')) throw new UsageError(`--trust_domain ${JSON.stringify(config.trust_domain)}: ${domainProblem}`);
  switch (noun) {
    case 'init': {
      let result;
      if (config.ca_cert_file || config.ca_key_file) {
        if (!config.ca_cert_file) throw new UsageError('--ca_key_file needs --ca_cert_file (the CA certificate, then its issuers up to the root)');
        if (!config.ca_key_file) throw new UsageError('--ca_cert_file needs --ca_key_file (the CA certificate\'s private key)');
        const certPem = readFile(config.ca_cert_file, 'ca_cert_file');
        const keyPem = readFile(config.ca_key_file, 'ca_key_file');
        result = await importCa(dir, { certPem, keyPem, certFile: config.ca_cert_file, keyFile: config.ca_key_file });
      } else {
        result = await initCa(dir, { trustDomain: config.trust_domain });
      }
      if (json) io.out(JSON.stringify({ caDir: dir, roots: result.roots.map((r) => rootJson(r, result.signer, now)) }) + '\n');
      else io.out(`made a mesh CA in ${dir}\n` + rootsTable(result.roots, result.signer, now));
      return 0;
    }
    case 'show':
    case 'status': {
      if (!caExists(dir)) throw new CaError(`no mesh CA in ${dir}: run \`mesh ca init\` (or give --ca_dir)`);
      const roots = readRoots(dir);
      const signer = readSignerCertificate(dir);
      if (noun === 'show') {
        if (json) io.out(JSON.stringify({ caDir: dir, roots: roots.map((r) => rootJson(r, signer, now)) }) + '\n');
        else io.out(`ca_dir ${dir}\n` + rootsTable(roots, signer, now));
        return 0;
      }
      const warnings = caExpiryWarnings(dir, now);
      if (json) io.out(JSON.stringify({ caDir: dir, ok: warnings.length === 0, warnings, roots: roots.map((r) => rootJson(r, signer, now)) }) + '\n');
      else io.out(rootsTable(roots, signer, now) + (warnings.length ? warnings.map((w) => `warning: ${w}\n`).join('') : `ok: every root is valid for ${EXPIRY_WARNING_DAYS} days or more\n`));
      return warnings.length === 0 ? 0 : 1;
    }
    case 'rotate': {
      if (config.finish) {
        const removed = finishRotation(dir);
        const left = readRoots(dir);
        if (json) io.out(JSON.stringify({ caDir: dir, removed: removed.map((r) => r.serial), roots: left.map((r) => r.serial) }) + '\n');
        else io.out(removed.length ? removed.map((r) => `removed root ${r.serial} (${r.fingerprint})\n`).join('') : 'nothing to remove: only the signing root is trusted\n');
        return 0;
      }
      const root = await rotateCa(dir, { trustDomain: config.trust_domain });
      const roots = readRoots(dir);
      if (json) io.out(JSON.stringify({ caDir: dir, root: rootJson(root, root.cert, now), roots: roots.map((r) => r.serial) }) + '\n');
      else {
        io.out(
          `new root ${root.serial} (${root.fingerprint}) signs from now on; ${roots.length} roots trusted\n` +
            'running processes trust it within seconds and renew their certificates from it; once every workload certificate is from it (after --mtls_cert_ttl), run: mesh ca rotate --finish\n',
        );
      }
      return 0;
    }
    case 'token': {
      if (config.services.length === 0) throw new UsageError('mesh ca token needs --services: the service names (globs) the token may get certificates for, e.g. --services=\'go.mesh.srv.*\'');
      for (const glob of config.services) {
        const problem = serviceGlobProblem(glob);
        if (problem) throw new UsageError(`--services: ${problem}`);
      }
      if (!caExists(dir)) throw new CaError(`no mesh CA in ${dir}: run \`mesh ca init\` (or give --ca_dir)`);
      const t = await makeToken(dir, { services: config.services, trustDomain: config.trust_domain, ttlMs: config.ttl });
      if (json) io.out(JSON.stringify({ token: t.token, id: t.id, services: t.services, expires: iso(t.expires) }) + '\n');
      else io.out(t.token + '\n');
      return 0;
    }
    case 'revoke': {
      if (revocations.length !== 1) throw new UsageError(`mesh ca revoke takes one of --serial, --service or --token_id (${USAGE})`);
      const flag = revocations[0]!;
      const kind = flag === 'token_id' ? 'token' : flag;
      if (!caExists(dir)) throw new CaError(`no mesh CA in ${dir}: run \`mesh ca init\` (or give --ca_dir)`);
      let value: string;
      try {
        value = revocationValue(kind, config[flag]!);
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      const r = revoke(dir, kind, value);
      const what = { serial: `certificate ${r.value} (and, for a join's first certificate, every renewal of that join)`, service: `every certificate of ${r.value} that joined before now`, token: `join token ${r.value}: joins with it, and every certificate that joined with it` }[kind];
      if (json) io.out(JSON.stringify({ caDir: dir, revoked: { kind, value: r.value, at: iso(new Date(r.at)) } }) + '\n');
      else io.out(`revoked ${what}\nmesh ca serve refuses its renewals from now on; certificates already issued stay valid until they expire (--mtls_cert_ttl at most)\n`);
      return 0;
    }
    case 'serve':
      return serve(dir, config, io);
    default:
      throw new UsageError(USAGE);
  }
}

/** `mesh ca serve`: runs the signing service until SIGINT or SIGTERM; resolves with 0. */
async function serve(dir: string, config: Config, io: Output): Promise<number> {
  const listen = parseAddress(config.address ?? DEFAULT_CA_SERVE_ADDRESS, { what: '--address' });
  if (!(config.mtls_cert_ttl >= MIN_CERT_TTL_MS)) throw new UsageError('--mtls_cert_ttl: must be 1s or more (a certificate is renewed at two thirds of it)');
  const host = listen.host;
  // The names clients reach it at: given, else the listen host (and localhost with a loopback one).
  const names = config.ca_serve_names.length > 0 ? config.ca_serve_names : host === '0.0.0.0' || host === '::' ? [] : [host, ...(host === '127.0.0.1' || host === '::1' ? ['localhost'] : [])];
  const log = new Logging({ level: 'info' }).get('main');
  if (!(config.ca_join_lifetime >= 1000)) throw new UsageError('--ca_join_lifetime: must be 1s or more (how long after its join a process renews without a token)');
  const server = await CaServer.start({ caDir: dir, trustDomain: config.trust_domain, host, port: listen.port, names, certTtlMs: config.mtls_cert_ttl, joinLifetimeMs: config.ca_join_lifetime, log });
  const root = server.signingRoot();
  const pin = root ? `sha256:${root.fingerprint.replace(/:/g, '').toLowerCase()}` : 'unknown';
  io.out(`mesh ca serve listening on https://${host.includes(':') ? `[${host}]` : host}:${server.port} as spiffe://${config.trust_domain}/svc/mesh.ca (names: ${names.join(', ') || 'none'}; clients pin --ca_root_fingerprint=${pin})\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await server.close();
  return 0;
}
