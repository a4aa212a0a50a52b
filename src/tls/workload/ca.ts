/**
 * The mesh CA: a directory (`--ca_dir`, default `$MESH_HOME/ca`, else `~/.mesh/ca`) that holds
 * the roots every mesh process trusts and the key that signs workload certificates:
 *
 *   <ca_dir>/roots/<serial>.pem   each trusted root (the trust bundle is every file here)
 *   <ca_dir>/signer.pem           the signing CA certificate, then its issuers up to its root
 *                                 (just the root for a CA made by `mesh ca init`)
 *   <ca_dir>/signer.key           the signing CA's private key (PEM, mode 0600)
 *   <ca_dir>/cross.pem            during a rotation: the new root certified by the CA that signed
 *                                 before it (and that CA's intermediates), sent after every
 *                                 certificate issued, so peers that trust only the old root
 *                                 still check them; removed by `rotate --finish`
 *
 * The directory is 0700. `initCa` makes a self-signed ECDSA P-256 root (or takes the operator's
 * own root or intermediate, checked) and refuses a directory that already holds a CA. `rotateCa`
 * adds a new root to roots/ and makes it the signer; the old roots stay trusted until
 * `finishRotation` (`mesh ca rotate --finish`) removes every root but the signer's. Processes that
 * sign their own certificates watch this directory, so a rotation reaches them within seconds.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { PRIVATE_DIRECTORY_MODE, PRIVATE_FILE_MODE } from '../../base/util/private-files.js';
import { createRoot, crossCertify, importSigningKey, randomSerial, ROOT_LIFETIME_MS, splitPem, type SigningKey } from './x509.js';

/** `--ca_dir`, else `$MESH_HOME/ca` (or `--mesh_home`), else `~/.mesh/ca`. */
export function defaultCaDir(flag: string | undefined, meshHome: string | undefined): string {
  if (flag) return flag;
  const home = meshHome || process.env.MESH_HOME || join(homedir(), '.mesh');
  return join(home, 'ca');
}

/** Why `trustDomain` is not a SPIFFE trust domain (lower-case letters, digits, '.', '-', '_'), or undefined. */
export function trustDomainProblem(trustDomain: string): string | undefined {
  return /^[a-z0-9._-]{1,255}$/.test(trustDomain) ? undefined : 'must be lower-case letters, digits, ".", "-" and "_" (a SPIFFE trust domain, e.g. mesh.local)';
}

export function caPaths(dir: string) {
  return { dir, roots: join(dir, 'roots'), signerCert: join(dir, 'signer.pem'), signerKey: join(dir, 'signer.key'), cross: join(dir, 'cross.pem') };
}

/** One trusted root as `mesh ca show` and admin /certs list it. */
export interface CaRoot {
  path: string;
  pem: string;
  cert: X509Certificate;
  serial: string;
  /** SHA-256 of the DER, `AB:CD:…`. */
  fingerprint: string;
  subject: string;
  notBefore: Date;
  notAfter: Date;
}

/** The signing CA: its certificate chain (signer first), its certificate and its key. */
export interface CaSigner {
  chainPem: string;
  cert: X509Certificate;
  key: SigningKey;
}

/** A problem with the CA directory or the files given to it; the message says what to do. */
export class CaError extends Error {}

function errnoCode(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}

/**
 * True when the directory holds a mesh CA (a signer or a roots directory); false when it is
 * missing or empty of them. A directory this process cannot read is an error naming --ca_dir.
 */
export function caExists(dir: string): boolean {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    const code = errnoCode(err);
    if (code === 'ENOENT') return false;
    if (code === 'ENOTDIR') throw new CaError(`--ca_dir ${dir} is not a directory`);
    throw new CaError(`cannot read the mesh CA directory ${dir} (${code}): a process that signs its own workload certificate needs read access to --ca_dir; or give it --mtls_cert_file, --mtls_key_file and --mtls_ca_file`);
  }
  return names.includes('signer.key') || names.includes('signer.pem') || names.includes('roots');
}

/** A root's facts from its PEM; `path` is the file it came from. */
export function caRootOf(pem: string, path: string): CaRoot {
  const cert = new X509Certificate(pem);
  return {
    path,
    pem,
    cert,
    serial: cert.serialNumber.toLowerCase(),
    fingerprint: cert.fingerprint256,
    subject: cert.subject.replace(/\n/g, ', '),
    notBefore: new Date(cert.validFrom),
    notAfter: new Date(cert.validTo),
  };
}

/** The trusted roots, oldest expiry first; a missing roots/ is none, an unreadable one an error naming --ca_dir. */
export function readRoots(dir: string): CaRoot[] {
  const p = caPaths(dir);
  let names: string[];
  try {
    names = readdirSync(p.roots).filter((f) => f.endsWith('.pem')).sort();
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw new CaError(`cannot read the mesh CA's roots in ${p.roots} (${errnoCode(err)}): check --ca_dir and its permissions`);
  }
  const roots: CaRoot[] = [];
  for (const name of names) {
    const path = join(p.roots, name);
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      // Removed between the listing and the read (a rotation being finished): not trusted any more.
      if (errnoCode(err) === 'ENOENT') continue;
      throw new CaError(`cannot read the mesh CA root ${path} (${errnoCode(err)}): check --ca_dir and its permissions`);
    }
    for (const pem of splitPem(text)) {
      try {
        roots.push(caRootOf(pem, path));
      } catch (err) {
        throw new CaError(`the mesh CA root ${path} is not a PEM certificate: ${(err as Error).message}`);
      }
    }
  }
  return roots.sort((a, b) => a.notAfter.getTime() - b.notAfter.getTime());
}

/**
 * Reads the signer (certificate chain and key), checking that they match. A key this process
 * cannot read is an error naming --ca_dir: the process then needs another way to its certificate
 * (certificate files from an outside PKI).
 */
export async function readSigner(dir: string): Promise<CaSigner> {
  const p = caPaths(dir);
  const read = (path: string, what: string): string => {
    try {
      return readFileSync(path, 'utf8');
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT') throw new CaError(`no mesh CA in ${dir} (${what} ${path} is missing): run \`mesh ca init --ca_dir=${dir}\`, or point --ca_dir at the mesh CA`);
      if (code === 'EACCES' || code === 'EPERM') {
        throw new CaError(`cannot read the mesh CA's ${what} ${path} (${code}): a process that signs its own workload certificate needs read access to --ca_dir (${dir}); or give it --mtls_cert_file, --mtls_key_file and --mtls_ca_file`);
      }
      throw new CaError(`cannot read the mesh CA's ${what} ${path} (${code}): check --ca_dir`);
    }
  };
  // A rotation replaces the key, then the certificate: a pair caught in between is read again.
  for (let attempt = 0; ; attempt++) {
    const keyPem = read(p.signerKey, 'key');
    const chainPem = read(p.signerCert, 'certificate');
    const pems = splitPem(chainPem);
    if (pems.length === 0) throw new CaError(`the mesh CA certificate ${p.signerCert} holds no PEM certificate`);
    const cert = new X509Certificate(pems[0]!);
    let matches: boolean;
    try {
      matches = cert.checkPrivateKey(createPrivateKey(keyPem));
    } catch (err) {
      throw new CaError(`the mesh CA key ${p.signerKey} is not a usable PEM private key: ${(err as Error).message}`);
    }
    if (matches) return { chainPem: pems.join(''), cert, key: await importSigningKey(keyPem) };
    if (attempt >= 5) throw new CaError(`the mesh CA key ${p.signerKey} does not match the certificate ${p.signerCert}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function writePrivate(path: string, data: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data, { mode });
  renameSync(tmp, path);
}

/** What `initCa` and `importCa` made: the directory and the root(s) it now trusts. */
export interface InitResult {
  dir: string;
  roots: CaRoot[];
  signer: X509Certificate;
}

/**
 * Fills a fresh directory next to `dir` with `files` and renames it into place, so two processes
 * starting at once make one CA (the second finds the first's) and a crash leaves no half CA.
 */
function createCaDirectory(dir: string, files: { roots: { serial: string; pem: string }[]; signerPem: string; keyPem: string }): void {
  if (caExists(dir)) throw new CaError(`a mesh CA exists in ${dir} already: refusing to overwrite it (\`mesh ca rotate\` makes a new root; \`mesh ca show\` lists the roots)`);
  mkdirSync(dirname(dir), { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  const tmp = `${dir}.init-${process.pid}-${Date.now()}`;
  mkdirSync(tmp, { mode: PRIVATE_DIRECTORY_MODE });
  try {
    mkdirSync(join(tmp, 'roots'), { mode: PRIVATE_DIRECTORY_MODE });
    for (const root of files.roots) writeFileSync(join(tmp, 'roots', `${root.serial}.pem`), root.pem, { mode: 0o644 });
    writeFileSync(join(tmp, 'signer.key'), files.keyPem, { mode: PRIVATE_FILE_MODE });
    writeFileSync(join(tmp, 'signer.pem'), files.signerPem, { mode: 0o644 });
    try {
      // Replaces an empty directory too (one made by hand, or by an earlier version of this).
      renameSync(tmp, dir);
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOTEMPTY' || code === 'EEXIST') {
        if (caExists(dir)) throw new CaError(`a mesh CA exists in ${dir} already: refusing to overwrite it (\`mesh ca rotate\` makes a new root; \`mesh ca show\` lists the roots)`);
        throw new CaError(`${dir} is not empty and holds no mesh CA: choose another --ca_dir, or empty it`);
      }
      throw new CaError(`cannot create the mesh CA in ${dir} (${code})`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** `mesh ca init`: a new self-signed ECDSA P-256 root in `dir` (refused when one exists). */
export async function initCa(dir: string, o: { trustDomain: string; now?: number }): Promise<InitResult> {
  if (caExists(dir)) throw new CaError(`a mesh CA exists in ${dir} already: refusing to overwrite it (\`mesh ca rotate\` makes a new root; \`mesh ca show\` lists the roots)`);
  const root = await newRoot(o.trustDomain, o.now);
  createCaDirectory(dir, { roots: [{ serial: root.serial, pem: root.certPem }], signerPem: root.certPem, keyPem: root.keyPem });
  return { dir, roots: readRoots(dir), signer: new X509Certificate(root.certPem) };
}

/** A root named by the day it was made and its serial, so two roots never share a subject. */
function newRoot(trustDomain: string, now?: number) {
  const serial = randomSerial();
  const date = new Date(now ?? Date.now()).toISOString().slice(0, 10);
  return createRoot({ serial, commonName: `mesh root CA ${date} ${serial.slice(0, 8)}`, organization: trustDomain, lifetimeMs: ROOT_LIFETIME_MS, now });
}

/**
 * Bring your own root or intermediate: `certPem` is the CA certificate, followed (for an
 * intermediate) by its issuers up to the root; `keyPem` is its key. Refused when the first
 * certificate is not a CA, the key does not match it, or a chain does not end in a self-signed root.
 */
export async function importCa(dir: string, o: { certPem: string; keyPem: string; certFile: string; keyFile: string }): Promise<InitResult> {
  const pems = splitPem(o.certPem);
  if (pems.length === 0) throw new CaError(`${o.certFile} holds no PEM certificate`);
  const chain = pems.map((pem) => new X509Certificate(pem));
  const signer = chain[0]!;
  if (!signer.ca) throw new CaError(`${o.certFile} is not a CA certificate (its basicConstraints do not say CA:TRUE): the mesh CA signs certificates, so it needs a root or intermediate CA`);
  let keyMatches: boolean;
  try {
    keyMatches = signer.checkPrivateKey(createPrivateKey(o.keyPem));
  } catch (err) {
    throw new CaError(`${o.keyFile} holds no usable PEM private key: ${(err as Error).message}`);
  }
  if (!keyMatches) throw new CaError(`${o.keyFile} does not match the CA certificate in ${o.certFile} (mismatched pair)`);
  try {
    await importSigningKey(o.keyPem);
  } catch (err) {
    throw new CaError(`${o.keyFile}: ${(err as Error).message}`);
  }
  for (let i = 0; i + 1 < chain.length; i++) {
    if (!chain[i]!.checkIssued(chain[i + 1]!) || !chain[i]!.verify(chain[i + 1]!.publicKey)) {
      throw new CaError(`${o.certFile}: certificate ${i + 2} did not issue certificate ${i + 1} (put the CA certificate first, then its issuers up to the root)`);
    }
  }
  const top = chain[chain.length - 1]!;
  if (!top.checkIssued(top) || !top.verify(top.publicKey)) {
    throw new CaError(`${o.certFile} holds an intermediate CA without its root: append its issuers up to the self-signed root, which every process will trust`);
  }
  const rootPem = pems[pems.length - 1]!;
  createCaDirectory(dir, { roots: [{ serial: top.serialNumber.toLowerCase(), pem: rootPem }], signerPem: pems.join(''), keyPem: o.keyPem });
  return { dir, roots: readRoots(dir), signer };
}

/**
 * `mesh ca rotate`: a new self-signed root, added to roots/ and made the signer. The old roots
 * stay trusted (certificates they signed keep working) until `finishRotation`.
 */
export async function rotateCa(dir: string, o: { trustDomain: string; now?: number }): Promise<CaRoot> {
  const p = caPaths(dir);
  if (!caExists(dir)) throw new CaError(`no mesh CA in ${dir}: run \`mesh ca init --ca_dir=${dir}\` first`);
  const root = await newRoot(o.trustDomain, o.now);
  const rootPath = join(p.roots, `${root.serial}.pem`);
  // The new root certified by the signer it replaces (whose key is gone after this).
  const previous = await readSigner(dir);
  const cross = await crossCertify({ rootPem: root.certPem, issuerCert: previous.cert, issuer: previous.key, now: o.now });
  const previousIntermediates = splitPem(previous.chainPem).filter((pem) => !isSelfSigned(new X509Certificate(pem)));
  mkdirSync(p.roots, { recursive: true, mode: PRIVATE_DIRECTORY_MODE });
  // Trusted first, then the cross certificate, then the signer: a process never holds a
  // certificate its peers cannot check, with the new root or the old ones.
  writePrivate(rootPath, root.certPem, 0o644);
  writePrivate(p.cross, [cross, ...previousIntermediates, ...readCross(dir)].join(''), 0o644);
  writePrivate(p.signerKey, root.keyPem, PRIVATE_FILE_MODE);
  writePrivate(p.signerCert, root.certPem, 0o644);
  return caRootOf(root.certPem, rootPath);
}

/** The root the signer's chain ends in (the signer itself for a root). */
function signerRoot(chainPem: string, roots: CaRoot[]): CaRoot | undefined {
  const pems = splitPem(chainPem);
  const top = new X509Certificate(pems[pems.length - 1]!);
  return roots.find((r) => r.cert.raw.equals(top.raw)) ?? roots.find((r) => top.checkIssued(r.cert) && top.verify(r.cert.publicKey));
}

/** `mesh ca rotate --finish`: removes every root but the signer's; returns those removed. */
export function finishRotation(dir: string): CaRoot[] {
  const p = caPaths(dir);
  let chainPem: string;
  try {
    chainPem = readFileSync(p.signerCert, 'utf8');
  } catch (err) {
    throw new CaError(`no mesh CA in ${dir} (${p.signerCert}: ${errnoCode(err)})`);
  }
  const roots = readRoots(dir);
  const keep = signerRoot(chainPem, roots);
  if (!keep) throw new CaError(`the signer ${p.signerCert} does not chain to any root in ${p.roots}: refusing to remove roots`);
  const removed = roots.filter((r) => r.path !== keep.path);
  for (const r of removed) rmSync(r.path, { force: true });
  // The cross certificates lead to the roots just removed.
  rmSync(p.cross, { force: true });
  return removed;
}

function isSelfSigned(cert: X509Certificate): boolean {
  return cert.checkIssued(cert) && cert.verify(cert.publicKey);
}

/**
 * The cross certificates of a rotation not finished yet (cross.pem), PEMs, still valid; none
 * without the file. Sent after every certificate issued (LocalCaSigner).
 */
export function readCross(dir: string, now = Date.now()): string[] {
  let text: string;
  try {
    text = readFileSync(caPaths(dir).cross, 'utf8');
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return [];
    throw new CaError(`cannot read the mesh CA's cross certificates ${caPaths(dir).cross} (${errnoCode(err)}): check --ca_dir and its permissions`);
  }
  return splitPem(text).filter((pem) => new Date(new X509Certificate(pem).validTo).getTime() > now);
}

/** The signer's certificate as `mesh ca show` lists it, when readable. */
export function readSignerCertificate(dir: string): X509Certificate | undefined {
  try {
    const pems = splitPem(readFileSync(caPaths(dir).signerCert, 'utf8'));
    return pems[0] ? new X509Certificate(pems[0]) : undefined;
  } catch {
    return undefined;
  }
}
