/**
 * A CertificateSigner that asks the mesh CA's signing service (`mesh ca serve`,
 * src/tls/workload/ca-server.ts) for certificates: for processes on machines without the CA key.
 *
 * Trust: the client pins the CA's root (`--ca_root_fingerprint`, the SHA-256 of the root as
 * `mesh ca show` prints it, or `--ca_root_file`). With only a fingerprint, a first handshake
 * takes the root from the chain the server presents (the server sends its root last) when its
 * fingerprint is the pinned one; every request is then made with node's own chain verification
 * against the pinned root (and the roots of the bundle the service returned over such a verified
 * connection), and the server must present the identity `spiffe://<trust_domain>/svc/mesh.ca`.
 * A service whose chain does not end at a trusted root is refused.
 *
 * The first certificate is asked for with the join token (`--ca_token` or `--ca_token_file`, read
 * at each use); a renewal presents the current certificate as the TLS client certificate instead
 * (an expired one too: the service renews it within --ca_join_lifetime of the join, so a process
 * outlives a CA outage without its token), so a token only has to live until the first certificate. The trust bundle each answer carries
 * replaces the roots, and is polled (`GET /v1/roots`) every `bundlePollMs`, so a CA rotation
 * reaches remote machines.
 */
import { X509Certificate } from 'node:crypto';
import type { ClientRequest, IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { connect, type DetailedPeerCertificate, type PeerCertificate } from 'node:tls';
import type { Logger } from 'pino';
import { spiffeIdOf, uriSans } from '../../base/mtls/workload-tls.js';
import { caRootOf, type CaRoot } from './ca.js';
import { CA_SERVER_SERVICE, CERTIFICATE_PATH, ROOTS_PATH } from './ca-server.js';
import type { CertificateSigner, CurrentCertificate } from './signer.js';
import { splitPem } from './x509.js';
import { runX509Child } from './x509-child.js';

/** The most bytes read from an answer of the signing service. */
const MAX_ANSWER = 1024 * 1024;
/** How long one request to the signing service may take (ms). */
const REQUEST_TIMEOUT_MS = 10_000;
/** How often the trust bundle is fetched again (ms), by default. */
export const DEFAULT_BUNDLE_POLL_MS = 60_000;

/** `sha256:AB:CD:…`, `AB:CD:…` or 64 hex digits, as lower-case hex; undefined when it is none of those. */
export function normalizeFingerprint(text: string): string | undefined {
  const hex = text.trim().replace(/^sha256:/i, '').replace(/:/g, '').toLowerCase();
  return /^[0-9a-f]{64}$/.test(hex) ? hex : undefined;
}

function pemOf(der: Buffer): string {
  return `-----BEGIN CERTIFICATE-----\n${der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n?$/, '\n')}-----END CERTIFICATE-----\n`;
}

/** An answer of the signing service that is not a 2xx: its status and the detail of its error JSON. */
export class SigningServiceError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface RemoteSignerOptions {
  /** `https://HOST:PORT` of `mesh ca serve`. */
  server: string;
  trustDomain: string;
  /** The join token now (`--ca_token`, or the file of `--ca_token_file` read again), or undefined. */
  token: () => string | undefined;
  /** The pinned root: its fingerprint (hex), or its PEM. */
  rootFingerprint?: string;
  rootPem?: string;
  log: Logger;
}

export class RemoteCaSigner implements CertificateSigner {
  readonly description: string;
  private readonly url: URL;
  private pinned?: string;
  /** The trust bundle of the last answer (PEMs). */
  private bundle: string[] = [];
  /** The CSR of the next renewal, made ahead (`prepare`). */
  private prepared?: { keyPem: string; service: string; csr: Promise<string> };

  constructor(private readonly o: RemoteSignerOptions) {
    this.url = new URL(o.server);
    this.description = `mesh ca serve ${this.url.origin}`;
    this.pinned = o.rootPem;
  }

  async sign(csrPem: string, service: string, ttlMs: number, current?: CurrentCertificate): Promise<string> {
    const body = JSON.stringify({ service, csr: csrPem, ttl_ms: ttlMs });
    let answer: { chain?: unknown; roots?: unknown };
    // An expired certificate is shown too: the service renews it within --ca_join_lifetime of its join (a CA outage outlived).
    if (current) {
      try {
        answer = await this.call('POST', CERTIFICATE_PATH, body, { clientCert: current });
      } catch (err) {
        if (!(err instanceof SigningServiceError) || this.o.token() === undefined) throw err;
        this.o.log.warn({ err: err.message }, `${this.description} refused the renewal with the current certificate; asking with the join token`);
        answer = await this.withToken(body);
      }
    } else {
      answer = await this.withToken(body);
    }
    if (typeof answer.chain !== 'string' || splitPem(answer.chain).length === 0) throw new Error(`${this.description} answered without a certificate chain`);
    const leaf = new X509Certificate(splitPem(answer.chain)[0]!);
    const expected = spiffeIdOf(this.o.trustDomain, service);
    if (!(leaf.subjectAltName ?? '').split(', ').includes(`URI:${expected}`)) throw new Error(`${this.description} issued a certificate that does not name ${expected}`);
    this.takeBundle(answer.roots);
    return answer.chain;
  }

  /**
   * `sign`, the CSR made in a short-lived child process (this process never loads the X.509
   * library): the one `prepare` started for this key when there is one (a failed renewal tried
   * again with the same key reuses it), else a new one.
   */
  async signKey(keyPem: string, service: string, ttlMs: number, current?: CurrentCertificate): Promise<string> {
    let prepared = this.prepared;
    if (!prepared || prepared.keyPem !== keyPem || prepared.service !== service) prepared = this.prepareCsr(keyPem, service);
    const csr = await prepared.csr.catch(() => this.prepareCsr(keyPem, service).csr);
    const chain = await this.sign(csr, service, ttlMs, current);
    if (this.prepared?.keyPem === keyPem) this.prepared = undefined;
    return chain;
  }

  /** Makes the CSR of the next renewal now, in the child process, while nothing waits for it. */
  prepare(keyPem: string, service: string): void {
    this.prepareCsr(keyPem, service);
  }

  private prepareCsr(keyPem: string, service: string): { keyPem: string; service: string; csr: Promise<string> } {
    const csr = runX509Child({ op: 'csr', keyPem, commonName: service });
    csr.catch(() => {}); // Whoever awaits it sees the error.
    return (this.prepared = { keyPem, service, csr });
  }

  async roots(): Promise<CaRoot[]> {
    if (this.bundle.length === 0) await this.fetchBundle();
    return this.bundle.map((pem) => caRootOf(pem, `${this.url.origin}${ROOTS_PATH}`));
  }

  watch(onChange: () => void, o: { pollMs: number }): () => void {
    let lastError: string | undefined;
    const timer = setInterval(() => {
      const before = this.bundleKey();
      this.fetchBundle().then(
        () => {
          lastError = undefined;
          if (this.bundleKey() !== before) onChange();
        },
        (err: Error) => {
          if (err.message !== lastError) this.o.log.warn({ err: err.message }, `cannot fetch the trust bundle from ${this.description}; trying again in ${o.pollMs} ms`);
          lastError = err.message;
        },
      );
    }, o.pollMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  private bundleKey(): string {
    return this.bundle.map((pem) => new X509Certificate(pem).fingerprint256).sort().join(',');
  }

  private takeBundle(roots: unknown): void {
    if (!Array.isArray(roots) || roots.length === 0 || !roots.every((r) => typeof r === 'string' && splitPem(r).length === 1)) {
      throw new Error(`${this.description} answered without a trust bundle`);
    }
    this.bundle = roots as string[];
  }

  private async fetchBundle(): Promise<void> {
    const answer = (await this.call('GET', ROOTS_PATH)) as { roots?: unknown };
    this.takeBundle(answer.roots);
  }

  private async withToken(body: string): Promise<{ chain?: unknown; roots?: unknown }> {
    const token = this.o.token();
    if (token === undefined) throw new Error(`no join token for ${this.description}: give --ca_token or --ca_token_file (made by mesh ca token on the CA's machine)`);
    return this.call('POST', CERTIFICATE_PATH, body, { token });
  }

  /** The pinned root's PEM: given, or taken from the server's chain by its fingerprint. */
  private async pinnedRoot(): Promise<string> {
    if (this.pinned) return this.pinned;
    const fingerprint = this.o.rootFingerprint!;
    const chain = await new Promise<PeerCertificate[]>((resolve, reject) => {
      const host = this.url.hostname.replace(/^\[|\]$/g, '');
      const socket = connect({ host, port: Number(this.url.port || 443), servername: isIP(host) ? undefined : host, rejectUnauthorized: false, timeout: REQUEST_TIMEOUT_MS });
      socket.once('secureConnect', () => {
        const certs: PeerCertificate[] = [];
        let c: DetailedPeerCertificate | undefined = socket.getPeerCertificate(true);
        while (c && c.raw && !certs.some((seen) => seen.raw.equals(c!.raw))) {
          certs.push(c);
          c = c.issuerCertificate;
        }
        socket.destroy();
        resolve(certs);
      });
      socket.once('timeout', () => socket.destroy(new Error('timed out')));
      socket.once('error', (err) => reject(new Error(`cannot reach ${this.description}: ${err.message}`)));
    });
    const matches = (der: Buffer) => new X509Certificate(der).fingerprint256.replace(/:/g, '').toLowerCase() === fingerprint;
    // The chain the server presents ends at the root it signs with now; during a rotation the
    // pinned root may be the other one (an old root, or the new one): then it is in the trust bundle.
    const root = chain.find((c) => matches(c.raw))?.raw ?? (await this.unverifiedBundle().catch(() => [] as Buffer[])).find(matches);
    if (!root) throw new Error(`${this.description} does not chain to the pinned root sha256:${fingerprint}: refusing it (compare --ca_root_fingerprint with mesh ca show on the CA's machine)`);
    const pem = pemOf(root);
    const cert = new X509Certificate(pem);
    if (!cert.ca || !cert.checkIssued(cert) || !cert.verify(cert.publicKey)) throw new Error(`the pinned root sha256:${fingerprint} that ${this.description} presents is not a self-signed CA certificate`);
    this.pinned = pem;
    return pem;
  }

  /**
   * The trust bundle (DER), fetched without checking the server: only to find the root whose
   * fingerprint is pinned (the fingerprint, not the server, vouches for it). Bounded and timed out.
   */
  private unverifiedBundle(): Promise<Buffer[]> {
    return new Promise((resolve, reject) => {
      const req = httpsRequest(this.url, { method: 'GET', path: ROOTS_PATH, rejectUnauthorized: false, agent: false, timeout: REQUEST_TIMEOUT_MS }, (res) =>
        readAnswer(req, res, reject, (body) => {
          try {
            const roots = (JSON.parse(body.toString('utf8')) as { roots?: unknown }).roots;
            resolve(Array.isArray(roots) ? roots.filter((r): r is string => typeof r === 'string').flatMap((r) => splitPem(r).map((pem) => new X509Certificate(pem).raw)) : []);
          } catch (err) {
            reject(err as Error);
          }
        }),
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end();
    });
  }

  /** One request, verified against the pinned root and the bundle; resolves with the JSON answer. */
  private async call(method: string, path: string, body?: string, auth: { token?: string; clientCert?: CurrentCertificate } = {}): Promise<Record<string, unknown>> {
    const pinned = await this.pinnedRoot();
    const ca = [pinned, ...this.bundle.filter((pem) => pem !== pinned)];
    const serverId = spiffeIdOf(this.o.trustDomain, CA_SERVER_SERVICE);
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        this.url,
        {
          method,
          path,
          ca,
          rejectUnauthorized: true,
          // The identity of the signing service, not a host name: a workload of the same CA cannot pose as it.
          checkServerIdentity: (_host, cert) => (uriSans(cert).includes(serverId) ? undefined : new Error(`the server presents ${uriSans(cert).join(', ') || 'no SPIFFE ID'}, not ${serverId}: it is not the signing service`)),
          cert: auth.clientCert?.cert,
          key: auth.clientCert?.key,
          agent: false,
          timeout: REQUEST_TIMEOUT_MS,
          headers: {
            ...(body !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : {}),
            ...(auth.token ? { authorization: `Bearer ${auth.token}` } : {}),
          },
        },
        (res) =>
          readAnswer(req, res, reject, (body) => {
            const text = body.toString('utf8');
            let json: Record<string, unknown> | undefined;
            try {
              json = JSON.parse(text) as Record<string, unknown>;
            } catch {
              json = undefined;
            }
            const status = res.statusCode ?? 0;
            if (status >= 200 && status < 300 && json) resolve(json);
            else reject(new SigningServiceError(status, `${this.description} refused: ${typeof json?.detail === 'string' ? json.detail : text.slice(0, 200)} (${status})`));
          }),
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', (err: NodeJS.ErrnoException) => {
        const untrusted = err.code === 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' || err.code === 'SELF_SIGNED_CERT_IN_CHAIN' || err.code === 'DEPTH_ZERO_SELF_SIGNED_CERT' || err.code === 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY';
        reject(new Error(untrusted ? `${this.description} is not trusted: its certificate does not chain to the pinned root (${err.code})` : `${this.description}: ${err.message}`));
      });
      req.end(body);
    });
  }
}

/** Reads an answer's body, at most MAX_ANSWER bytes (past it the request is destroyed with that error), then `done`. */
function readAnswer(req: ClientRequest, res: IncomingMessage, fail: (err: Error) => void, done: (body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  res.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size > MAX_ANSWER) req.destroy(new Error(`an answer larger than ${MAX_ANSWER} bytes`));
    else chunks.push(chunk);
  });
  res.on('end', () => done(Buffer.concat(chunks)));
  res.on('error', fail);
}
