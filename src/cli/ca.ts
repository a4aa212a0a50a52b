/**
 * `mesh ca init|show|rotate|status`: the mesh CA in `--ca_dir` (src/tls/workload/ca.ts). Text
 * output is tab-separated with a header row, as the other commands print tables; `--output=json`
 * prints one JSON document. `status` exits 1 when a root (or the signer) expires within 30 days.
 */
import { readFileSync } from 'node:fs';
import type { X509Certificate } from 'node:crypto';
import type { Config } from './flags.js';
import { UsageError, type Output } from './commands.js';
import { caExists, defaultCaDir, finishRotation, importCa, initCa, readRoots, readSignerCertificate, rotateCa, trustDomainProblem, CaError, type CaRoot } from '../tls/workload/ca.js';

const DAY_MS = 86_400_000;
/** `mesh ca status` warns when a certificate expires within this many days. */
export const EXPIRY_WARNING_DAYS = 30;

const USAGE = 'usage: mesh ca init [--ca_cert_file=FILE --ca_key_file=FILE] | mesh ca show | mesh ca rotate [--finish] | mesh ca status';

function iso(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function daysLeft(d: Date, now: number): number {
  return Math.floor((d.getTime() - now) / DAY_MS);
}

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

/** Runs `mesh ca …`; resolves with the exit code. */
export async function runCaCommand(positionals: string[], config: Config, io: Output): Promise<number> {
  const [, noun, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError(`mesh ca ${noun}: unexpected argument "${rest[0]}" (${USAGE})`);
  const json = config.output === 'json';
  const dir = defaultCaDir(config.ca_dir, config.mesh_home);
  const now = Date.now();
  const domainProblem = trustDomainProblem(config.trust_domain);
  if (domainProblem && (noun === 'init' || noun === 'rotate')) throw new UsageError(`--trust_domain ${JSON.stringify(config.trust_domain)}: ${domainProblem}`);
  if (config.finish && noun !== 'rotate') throw new UsageError(`--finish is for mesh ca rotate (${USAGE})`);
  if ((config.ca_cert_file || config.ca_key_file) && noun !== 'init') throw new UsageError(`--ca_cert_file and --ca_key_file are for mesh ca init (${USAGE})`);
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
      const warnings: string[] = [];
      const check = (what: string, notAfter: Date) => {
        const days = daysLeft(notAfter, now);
        if (notAfter.getTime() <= now) warnings.push(`${what} has expired (${iso(notAfter)})`);
        else if (days < EXPIRY_WARNING_DAYS) warnings.push(`${what} expires in ${days} days (${iso(notAfter)}), within ${EXPIRY_WARNING_DAYS}: rotate it (mesh ca rotate)`);
      };
      for (const r of roots) check(`root ${r.serial}`, r.notAfter);
      if (signer && !roots.some((r) => r.cert.raw.equals(signer.raw))) check(`signing CA ${signer.serialNumber.toLowerCase()}`, new Date(signer.validTo));
      if (roots.length === 0) warnings.push(`no trusted root in ${dir}/roots`);
      if (!signer) warnings.push(`no signing certificate in ${dir}/signer.pem`);
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
    default:
      throw new UsageError(USAGE);
  }
}
