/**
 * The X.509 primitives of the mesh CA and its workload certificates, on @peculiar/x509 over
 * node's WebCrypto: key pairs, self-signed roots, CSRs, signing a certificate from a CSR, and
 * turning keys between PEM (what node's TLS takes) and CryptoKeys (what the library signs with).
 * No ASN.1 is written by hand here.
 */
import { createPrivateKey, createPublicKey, randomBytes, webcrypto, X509Certificate as NodeX509 } from 'node:crypto';
import { isIP } from 'node:net';
import type { AuthorityKeyIdentifierExtension, X509Certificate } from '@peculiar/x509';

/**
 * The library, loaded at its first use: a process that never signs, issues or inspects a CSR
 * does not pay its memory; a workload (sidecar, api, run) does that work in a child process
 * (./x509-child.ts) and never loads it (docs/sidecar.md, "Memory"). Its provider is process-wide;
 * setting it to node's WebCrypto again is idempotent.
 */
async function peculiar(): Promise<typeof import('@peculiar/x509')> {
  const x509 = await import('@peculiar/x509');
  x509.cryptoProvider.set(webcrypto as unknown as Crypto);
  return x509;
}

export const EC_P256 = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const ECDSA_SHA256 = { name: 'ECDSA', hash: 'SHA-256' } as const;

/** A fresh P-256 key pair (extractable, so node's TLS can be given the private key as PEM). */
export async function generateKeyPair(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(EC_P256, true, ['sign', 'verify'])) as CryptoKeyPair;
}

/** A positive random 128-bit serial number, lower-case hex. */
export function randomSerial(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x7f) | 0x10;
  return bytes.toString('hex');
}

/** The private key as PKCS#8 PEM. */
export async function privateKeyPem(key: CryptoKey): Promise<string> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key));
  return `-----BEGIN PRIVATE KEY-----\n${der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n?$/, '\n')}-----END PRIVATE KEY-----\n`;
}

/** The P-256 key pair of a PKCS#8 PEM private key (what `privateKeyPem` wrote), for `createCsr`. */
export async function keyPairFromPem(pem: string): Promise<CryptoKeyPair> {
  const privateKey = await webcrypto.subtle.importKey('pkcs8', createPrivateKey(pem).export({ type: 'pkcs8', format: 'der' }), EC_P256, false, ['sign']);
  const publicKey = await webcrypto.subtle.importKey('spki', createPublicKey(pem).export({ type: 'spki', format: 'der' }), EC_P256, true, ['verify']);
  return { privateKey, publicKey } as CryptoKeyPair;
}

/** The signing algorithm for a key (ECDSA P-256/P-384 or RSA), as WebCrypto names it. */
export interface SigningKey {
  key: CryptoKey;
  algorithm: Algorithm | EcdsaParams;
}

/**
 * Imports a PEM private key (PKCS#8, SEC1 EC or PKCS#1 RSA) for signing. Throws an Error saying
 * which kinds are accepted when the key is another kind.
 */
export async function importSigningKey(pem: string | Buffer): Promise<SigningKey> {
  const keyObject = createPrivateKey(pem);
  const der = keyObject.export({ type: 'pkcs8', format: 'der' });
  if (keyObject.asymmetricKeyType === 'ec') {
    const curve = keyObject.asymmetricKeyDetails?.namedCurve;
    const [namedCurve, hash] = curve === 'prime256v1' ? ['P-256', 'SHA-256'] : curve === 'secp384r1' ? ['P-384', 'SHA-384'] : [];
    if (!namedCurve) throw new Error(`unsupported EC curve ${curve} (use P-256 or P-384)`);
    const key = await webcrypto.subtle.importKey('pkcs8', der, { name: 'ECDSA', namedCurve }, false, ['sign']);
    return { key, algorithm: { name: 'ECDSA', hash } as EcdsaParams };
  }
  if (keyObject.asymmetricKeyType === 'rsa') {
    const key = await webcrypto.subtle.importKey('pkcs8', der, { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' }, false, ['sign']);
    return { key, algorithm: { name: 'RSASSA-PKCS1-v1_5' } };
  }
  throw new Error(`unsupported key type ${keyObject.asymmetricKeyType} (use ECDSA P-256/P-384 or RSA)`);
}

const DAY_MS = 86_400_000;

/** A self-signed root: CA basic constraints (critical), key usage keyCertSign and cRLSign, key identifiers. */
export async function createRoot(o: { serial?: string; commonName: string; organization: string; lifetimeMs: number; now?: number }): Promise<{ certPem: string; keyPem: string; serial: string }> {
  const x509 = await peculiar();
  const keys = await generateKeyPair();
  const now = o.now ?? Date.now();
  const serial = o.serial ?? randomSerial();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial,
    name: [{ CN: [o.commonName] }, { O: [o.organization] }],
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + o.lifetimeMs),
    signingAlgorithm: ECDSA_SHA256,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certPem: cert.toString('pem') + '\n', keyPem: await privateKeyPem(keys.privateKey), serial };
}

/**
 * A cross certificate for a rotation: the new root's subject and key (and key identifier), issued
 * by the CA that signed until now. Sent after a certificate of the new root, it lets a peer that
 * trusts only the old root (a process that has not fetched the new trust bundle yet, or pinned the
 * old root) check that certificate: leaf ← new root's key ← old root. Valid while both are.
 */
export async function crossCertify(o: { rootPem: string; issuerCert: NodeX509; issuer: SigningKey; now?: number }): Promise<string> {
  const x509 = await peculiar();
  const root = new x509.X509Certificate(o.rootPem);
  const issuer = new x509.X509Certificate(o.issuerCert.raw);
  const now = o.now ?? Date.now();
  const ski = root.getExtension(x509.SubjectKeyIdentifierExtension);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: randomSerial(),
    subject: root.subjectName,
    issuer: issuer.subjectName,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(Math.min(root.notAfter.getTime(), issuer.notAfter.getTime())),
    signingAlgorithm: o.issuer.algorithm,
    publicKey: root.publicKey,
    signingKey: o.issuer.key,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await authorityKeyIdentifier(issuer),
      ski ? new x509.SubjectKeyIdentifierExtension(ski.keyId) : await x509.SubjectKeyIdentifierExtension.create(root.publicKey),
    ],
  });
  return cert.toString('pem') + '\n';
}

/** The default lifetime of a root made by `mesh ca init` / `rotate`: ten years. */
export const ROOT_LIFETIME_MS = 3650 * DAY_MS;

/** A CSR for a workload key pair (the signer decides the identity; the CSR proves the key). */
export async function createCsr(keys: CryptoKeyPair, commonName: string): Promise<string> {
  const x509 = await peculiar();
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: [{ CN: [commonName] }], keys, signingAlgorithm: ECDSA_SHA256 });
  return csr.toString('pem');
}

/**
 * What a certificate issued by the signing service (`mesh ca serve`) records of its process's
 * join, in its subject's organizational unit: `mesh join <when> token <id> first <serial>`
 * (when it joined, with a join token of that id, and the serial of the join's first certificate).
 * Each renewal copies it, so the service can bound how long a join renews and refuse a revoked
 * join. Visible with `openssl x509 -noout -subject`.
 */
export interface JoinFacts {
  /** When the process joined (ms since the epoch). */
  joinedAt: number;
  /** The id of the join token it joined with. */
  token: string;
  /** The serial of the join's first certificate (lower-case hex). */
  chain: string;
}

const JOIN_UNIT = /^mesh join (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3})?Z) token ([0-9a-f]{16}|none) first ([0-9a-f]{1,40})$/;

function joinUnit(f: JoinFacts): string {
  return `mesh join ${new Date(f.joinedAt).toISOString()} token ${f.token} first ${f.chain}`;
}

/** The join facts of a certificate (PEM, DER or parsed) issued by the signing service, or undefined when it has none. */
export function joinFactsOf(cert: NodeX509 | Buffer | string): JoinFacts | undefined {
  let subject: string;
  try {
    subject = (cert instanceof NodeX509 ? cert : new NodeX509(cert)).subject;
  } catch {
    return undefined;
  }
  for (const line of subject.split('\n')) {
    const m = line.startsWith('OU=') ? JOIN_UNIT.exec(line.slice(3)) : null;
    if (m) return { joinedAt: Date.parse(m[1]!), token: m[2]!, chain: m[3]! };
  }
  return undefined;
}

/**
 * Signs a workload certificate for the CSR's key: URI SAN `spiffeId` (and `altNames`: DNS names
 * and IP addresses, for a server reached by name), serverAuth + clientAuth,
 * digitalSignature, not a CA; valid from a minute back (clock skew) for `ttlMs`, but never past
 * the signer's own expiry. Throws when the CSR's signature does not verify.
 */
export async function signWorkload(o: { csrPem: string; spiffeId: string; commonName: string; ttlMs: number; signerCert: NodeX509; signer: SigningKey; now?: number; altNames?: readonly string[]; join?: { joinedAt: number; token: string; chain?: string } }): Promise<string> {
  const x509 = await peculiar();
  const csr = new x509.Pkcs10CertificateRequest(o.csrPem);
  if (!(await csr.verify())) throw new Error('the certificate request\'s signature does not verify');
  const issuer = new x509.X509Certificate(o.signerCert.raw);
  const now = o.now ?? Date.now();
  const notAfter = Math.min(now + o.ttlMs, issuer.notAfter.getTime());
  const serialNumber = randomSerial();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber,
    // A join's first certificate is the chain's own start.
    subject: [{ CN: [o.commonName] }, ...(o.join ? [{ OU: [joinUnit({ joinedAt: o.join.joinedAt, token: o.join.token, chain: o.join.chain ?? serialNumber })] }] : [])],
    issuer: issuer.subjectName,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(notAfter),
    signingAlgorithm: o.signer.algorithm,
    publicKey: csr.publicKey,
    signingKey: o.signer.key,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
      new x509.SubjectAlternativeNameExtension([{ type: 'url', value: o.spiffeId }, ...(o.altNames ?? []).map(altName)], true),
      await authorityKeyIdentifier(issuer),
      await x509.SubjectKeyIdentifierExtension.create(csr.publicKey),
    ],
  });
  return cert.toString('pem') + '\n';
}

/** A DNS name or an IP address (v4 or v6) as a SAN entry. */
function altName(name: string): { type: 'ip' | 'dns'; value: string } {
  return isIP(name) ? { type: 'ip', value: name } : { type: 'dns', value: name };
}

/** The issuer's own subject key identifier when it has one (so chains build by key id), else one made from its key. */
async function authorityKeyIdentifier(issuer: X509Certificate): Promise<AuthorityKeyIdentifierExtension> {
  const x509 = await peculiar();
  const ski = issuer.getExtension(x509.SubjectKeyIdentifierExtension);
  if (ski) return new x509.AuthorityKeyIdentifierExtension(ski.keyId, false);
  return x509.AuthorityKeyIdentifierExtension.create(issuer.publicKey, false);
}

/** What a signing service checks in a CSR before it signs: the key's kind and the names it asks for. */
export interface CsrFacts {
  /** `EC P-256`, `EC P-384`, `RSA`, …: the kind of the CSR's public key. */
  keyKind: string;
  /** The subject alternative names it requests (`URI:spiffe://…`, `DNS:…`, `IP:…`). */
  requestedNames: string[];
  /** True when its signature verifies with its own key (proof that the requester holds the key). */
  signatureValid: boolean;
}

/** Parses a PEM CSR (PKCS#10); throws an Error when it is not one. */
export async function inspectCsr(pem: string): Promise<CsrFacts> {
  const x509 = await peculiar();
  if (!pem.includes('-----BEGIN CERTIFICATE REQUEST-----')) throw new Error('not a PEM certificate request (-----BEGIN CERTIFICATE REQUEST-----)');
  const csr = new x509.Pkcs10CertificateRequest(pem);
  const algorithm = csr.publicKey.algorithm as { name: string; namedCurve?: string };
  const keyKind = algorithm.namedCurve ? `EC ${algorithm.namedCurve}` : algorithm.name.startsWith('RSA') ? 'RSA' : algorithm.name;
  const requestedNames: string[] = [];
  const extension = csr.getExtension('2.5.29.17');
  if (extension) {
    const san = new x509.SubjectAlternativeNameExtension(extension.rawData);
    const kinds: Record<string, string> = { url: 'URI', dns: 'DNS', ip: 'IP', email: 'email' };
    for (const name of san.names.toJSON()) requestedNames.push(`${kinds[name.type] ?? name.type}:${name.value}`);
  }
  let signatureValid: boolean;
  try {
    signatureValid = await csr.verify();
  } catch {
    signatureValid = false;
  }
  return { keyKind, requestedNames, signatureValid };
}

/** Splits a PEM bundle into its certificates (anything else in the file is ignored). */
export function splitPem(text: string): string[] {
  return text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)?.map((p) => p + '\n') ?? [];
}
