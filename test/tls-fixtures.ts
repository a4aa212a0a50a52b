/** Helpers for the TLS and ACME tests: openssl-made pairs, real gateway/sidecar processes, TLS probes. */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type PeerCertificate } from 'node:tls';
import { join } from 'node:path';
import { http, PRINTED, startProcess, type HttpAnswer, type RunningProcess } from './helpers.js';

export interface Pair {
  cert: string;
  key: string;
  /** Serial number, lower-case hex (as admin /certs prints it). */
  serial: string;
}

let counter = 0;

/** A self-signed EC pair made by openssl, written to `<dir>/<base>.crt` and `<dir>/<base>.key`. */
export function makePair(dir: string, base: string, options: { cn?: string; sans?: string; days?: number } = {}): Pair & { certFile: string; keyFile: string } {
  const tag = `${process.pid}-${++counter}`;
  const certFile = join(dir, `${base}.crt`);
  const keyFile = join(dir, `${base}.key`);
  const tmpCert = join(dir, `.gen-${tag}.crt`);
  const tmpKey = join(dir, `.gen-${tag}.key`);
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(options.days ?? 2),
    '-subj', `/CN=${options.cn ?? 'localhost'}`, '-addext', `subjectAltName=${options.sans ?? 'DNS:localhost,IP:127.0.0.1'}`,
    '-keyout', tmpKey, '-out', tmpCert,
  ], { stdio: 'ignore' });
  const cert = readFileSync(tmpCert, 'utf8');
  const key = readFileSync(tmpKey, 'utf8');
  rmSync(tmpCert, { force: true });
  rmSync(tmpKey, { force: true });
  writeFileSync(certFile, cert);
  writeFileSync(keyFile, key);
  return { cert, key, certFile, keyFile, serial: new X509Certificate(cert).serialNumber.toLowerCase() };
}

export interface ServerProcess {
  proc: RunningProcess;
  port: number;
  adminPort: number;
  admin: string;
  stop: () => Promise<number | null>;
}

/** `mesh api` (or `mesh sidecar`) on loopback with its admin; resolves once it says it is listening. */
export async function startServer(command: 'api' | 'sidecar', args: string[], env: Record<string, string> = {}): Promise<ServerProcess> {
  const proc = startProcess([command, '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--registry=memory', '--broker=memory', ...args], env);
  const port = await proc.waitForPort(command === 'api' ? PRINTED.api : PRINTED.sidecar, 20000);
  const adminPort = await proc.waitForPort(command === 'api' ? PRINTED.apiAdmin : PRINTED.sidecarAdmin);
  return { proc, port, adminPort, admin: `http://127.0.0.1:${adminPort}`, stop: () => proc.stop() };
}

export interface Peer {
  serial: string;
  subject: string;
  issuer: string;
  sans: string;
  /** The issuer's certificate as the server sent it (its chain), if any. */
  issuerSubject?: string;
}

/** One TLS handshake: the certificate the server presents for `servername` (none: no SNI). Rejects when the handshake fails. */
export function peer(port: number, servername?: string): Promise<Peer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false }, () => {
      const c = socket.getPeerCertificate(true) as PeerCertificate & { issuerCertificate?: PeerCertificate };
      const issuerCert = c.issuerCertificate && c.issuerCertificate !== c ? c.issuerCertificate : undefined;
      resolve({
        serial: c.serialNumber.toLowerCase(),
        subject: c.subject?.CN ?? '',
        issuer: c.issuer?.CN ?? '',
        sans: c.subjectaltname ?? '',
        issuerSubject: issuerCert?.subject?.CN,
      });
      socket.end();
    });
    socket.setTimeout(15000, () => socket.destroy(new Error('TLS handshake timed out')));
    socket.once('error', reject);
  });
}

/** GET over HTTPS with SNI `servername`, trusting `ca` when given (else not verifying). */
export function httpsGet(port: number, path: string, options: { servername?: string; ca?: string } = {}): Promise<HttpAnswer> {
  return http('GET', `https://127.0.0.1:${port}${path}`, { servername: options.servername, ca: options.ca, insecure: options.ca === undefined });
}

/** GET over plain HTTP (the admin interface). */
export function httpGet(url: string, headers: Record<string, string> = {}): Promise<HttpAnswer> {
  return http('GET', url, { headers });
}

export interface CertDetails {
  path: string;
  serial_number: string;
  subject_alt_names: Array<{ dns?: string; ip_address?: string; uri?: string }>;
  days_until_expiration: string;
  valid_from: string;
  expiration_time: string;
}

/** admin /certs, flattened to the cert_chain entries. */
export async function adminCerts(admin: string): Promise<CertDetails[]> {
  const r = await httpGet(`${admin}/certs`);
  if (r.status !== 200) throw new Error(`/certs: ${r.status} ${r.text}`);
  const body = JSON.parse(r.text) as { certificates: Array<{ cert_chain: CertDetails[] }> };
  return body.certificates.flatMap((c) => c.cert_chain);
}

/** admin /stats as a name -> value map. */
export async function adminStats(admin: string, filter: string): Promise<Record<string, number>> {
  const r = await httpGet(`${admin}/stats?filter=${encodeURIComponent(filter)}`);
  const out: Record<string, number> = {};
  for (const line of r.text.split('\n')) {
    const m = /^([^:]+): (\d+)$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}
