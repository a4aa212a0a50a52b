/**
 * `mesh ca serve`: the mesh CA's signing service, so that processes on other machines get their
 * workload certificates without a copy of the CA key. HTTPS, with a certificate the CA issues to
 * itself (`spiffe://<trust_domain>/svc/mesh.ca`, plus the DNS names and IP addresses it is reached
 * at), renewed like any workload's; the chain it presents ends with its root, so a client that
 * pinned the root's fingerprint can check it.
 *
 *   POST /v1/certificate  {"service": NAME, "csr": PEM, "ttl_ms": N?}
 *       authenticated by `Authorization: Bearer <join token>` (src/tls/workload/token.ts) whose
 *       globs match NAME, or (a renewal) by a TLS client certificate from this CA for the same
 *       identity; answers {"spiffe_id","serial","not_after","chain","roots"}: the chain (leaf,
 *       then intermediates) and every root trusted now (the trust bundle).
 *   GET /v1/roots  {"roots": [PEM…]}: the trust bundle (public; a client checks the server first).
 *
 * The identity comes from NAME, never from the CSR (a CSR that asks for another name is refused);
 * the lifetime is the CSR's `ttl_ms` bounded by --mtls_cert_ttl. Refusals are error JSON
 * (id go.mesh.ca). Bodies are bounded, handshakes and requests timed out, connections capped (in
 * all and per client address), and each client address rate limited.
 * Each issuance is logged (service, serial, token id or renewal; never the token).
 */
import { X509Certificate } from 'node:crypto';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Logger } from 'pino';
import { ERROR_IDS, errorWithStatus, MeshError, rateLimited } from '../../base/errors.js';
import { readBody } from '../../base/http/body.js';
import { httpServerOptions, listenOn } from '../../base/http/lifecycle.js';
import { clientAddress, rateLimitHeaders, RateLimiter, ratePolicy, type RatePolicy } from '../../base/http/rate-limit.js';
import { sendError, sendJson } from '../../base/http/respond.js';
import { splitTarget } from '../../base/http/target.js';
import { globsMatcher } from '../../base/util/regex.js';
import { peerIdentityOf, spiffeIdOf, type WorkloadTlsPems } from '../../base/mtls/workload-tls.js';
import { caExists, CaError, caRootOf, readRoots, readSignerCertificate, type CaRoot } from './ca.js';
import { IssuedWorkloadTls } from './issued.js';
import { LocalCaSigner } from './signer.js';
import { ensureTokenKey, JoinTokenError, verifyToken } from './token.js';
import { inspectCsr, joinFactsOf, splitPem } from './x509.js';
import { RevocationList, type Revocation, type RevocationSubject } from './revocation.js';
import { iso } from './ca-expiry.js';
import { formatDuration } from '../../base/util/duration.js';

/** The service name, and so the identity, of the signing service itself: never issued to a workload. */
export const CA_SERVER_SERVICE = 'mesh.ca';
/** Where `mesh ca serve` listens without --address. */
export const DEFAULT_CA_SERVE_ADDRESS = '127.0.0.1:9943';
export const CERTIFICATE_PATH = '/v1/certificate';
export const ROOTS_PATH = '/v1/roots';
/** The largest request body (a CSR is under 1 KiB). */
export const MAX_REQUEST_BODY = 64 * 1024;
/** Requests per second from one client address (and the burst). */
const RATE = '10/s';
const BURST = 20;
/** How long a connection may take to finish its TLS handshake (ms), by default. */
export const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;
/** The most connections held at once, and from one client address. */
const MAX_CONNECTIONS = 1000;
export const MAX_CONNECTIONS_PER_CLIENT = 32;
/** How long after its join a process renews without a token, by default: 7 days. */
export const DEFAULT_JOIN_LIFETIME_MS = 168 * 3_600_000;
/** A service name as it goes into a SPIFFE ID: letters, digits, '.', '-', '_'. */
const SERVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/;

export interface CaServerOptions {
  caDir: string;
  trustDomain: string;
  host: string;
  port: number;
  /** DNS names and IP addresses in the server's certificate (how clients reach it). */
  names: readonly string[];
  /** The longest lifetime of a certificate it issues (--mtls_cert_ttl); also its own certificate's. */
  certTtlMs: number;
  log: Logger;
  /** The poll behind the watch of the CA directory (ms). Default 5000. */
  pollMs?: number;
  /** How long a connection may take to finish its TLS handshake (ms). Default DEFAULT_HANDSHAKE_TIMEOUT_MS. */
  handshakeTimeoutMs?: number;
  /** How long after its join a process renews with its certificate alone (ms; --ca_join_lifetime). Default DEFAULT_JOIN_LIFETIME_MS. */
  joinLifetimeMs?: number;
}

/** Who asks for a certificate, as `authenticate` found: a join (with a token) or a renewal (with a certificate). */
interface Asker {
  token?: string;
  renewal?: true;
  /** What the issued certificate records (x509.ts JoinFacts); `chain` is absent for a join (the new serial starts it). */
  join: { joinedAt: number; token: string; chain?: string };
}

/**
 * Closes at once a connection from an address that holds MAX_CONNECTIONS_PER_CLIENT already, so
 * one client's silent connections cannot fill the server's MAX_CONNECTIONS. The map holds only
 * addresses with a connection open (at most MAX_CONNECTIONS entries).
 */
function capConnectionsPerClient(server: Server, log: Logger): void {
  const open = new Map<string, number>();
  // The addresses told about (once while they stay at the cap).
  const warned = new Set<string>();
  server.prependListener('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const count = open.get(address) ?? 0;
    if (count >= MAX_CONNECTIONS_PER_CLIENT) {
      if (!warned.has(address)) {
        warned.add(address);
        log.warn({ client: address }, `mesh ca serve: ${address} holds ${MAX_CONNECTIONS_PER_CLIENT} connections, the most from one client address; closing its further connections at once`);
      }
      socket.destroy();
      return;
    }
    open.set(address, count + 1);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else {
        open.delete(address);
        warned.delete(address);
      }
    });
  });
}

/** The root a chain ends in, from `roots`: what the server sends last, for clients that pinned it. */
function rootOf(chainPem: string, roots: readonly string[]): string | undefined {
  const pems = splitPem(chainPem);
  const top = new X509Certificate(pems[pems.length - 1]!);
  return roots.find((pem) => {
    const root = new X509Certificate(pem);
    return root.raw.equals(top.raw) || (top.checkIssued(root) && top.verify(root.publicKey));
  });
}

function serverTlsOptions(pems: WorkloadTlsPems) {
  const root = rootOf(pems.cert, pems.ca);
  const chain = root && !splitPem(pems.cert).includes(root) ? pems.cert + root : pems.cert;
  return { cert: chain, key: pems.key, ca: [...pems.ca] };
}

const caError = (code: number, detail: string) => errorWithStatus(ERROR_IDS.ca, code, detail);

interface SignRequest {
  service: string;
  csr: string;
  ttlMs?: number;
}

function parseSignRequest(body: Buffer): SignRequest {
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch {
    value = undefined;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw caError(400, 'the body must be a JSON object: {"service": NAME, "csr": PEM}');
  const o = value as Record<string, unknown>;
  if (typeof o.service !== 'string' || !SERVICE_NAME.test(o.service)) throw caError(400, '"service" must be a service name (letters, digits, ".", "-" and "_")');
  if (typeof o.csr !== 'string') throw caError(400, '"csr" must be a PEM certificate request (PKCS#10)');
  if (o.ttl_ms !== undefined && !(Number.isSafeInteger(o.ttl_ms) && (o.ttl_ms as number) >= 1000)) throw caError(400, '"ttl_ms" must be an integer of 1000 or more');
  return { service: o.service, csr: o.csr, ttlMs: o.ttl_ms as number | undefined };
}

export class CaServer {
  private readonly limiter: RateLimiter;
  private readonly policy: RatePolicy;
  private readonly signer: LocalCaSigner;
  private readonly revocations: RevocationList;
  private stopChange?: () => void;

  private constructor(
    private readonly o: CaServerOptions,
    private readonly identity: IssuedWorkloadTls,
    private readonly server: Server,
    /** The bound port. */
    readonly port: number,
  ) {
    this.policy = ratePolicy(RATE, BURST, 'mesh ca serve')!;
    this.limiter = new RateLimiter({ policy: this.policy, maxKeys: 10_000 });
    this.signer = new LocalCaSigner(o.caDir, o.trustDomain);
    this.revocations = new RevocationList(o.caDir);
  }

  /** Starts serving; rejects when the CA directory holds no CA or the address cannot be bound. */
  static async start(o: CaServerOptions): Promise<CaServer> {
    if (!caExists(o.caDir)) throw new CaError(`no mesh CA in ${o.caDir}: run \`mesh ca init --ca_dir=${o.caDir}\` first (or point --ca_dir at it)`);
    ensureTokenKey(o.caDir);
    const identity = await IssuedWorkloadTls.open({
      mode: 'strict',
      trustDomain: o.trustDomain,
      service: CA_SERVER_SERVICE,
      signer: new LocalCaSigner(o.caDir, o.trustDomain, { altNames: o.names }),
      certTtlMs: o.certTtlMs,
      log: o.log,
      pollMs: o.pollMs,
    });
    let handler: (req: IncomingMessage, res: ServerResponse) => void = () => {};
    const server = createServer(
      {
        ...serverTlsOptions(identity.contextOptions()),
        // A client certificate is asked for, not required: a renewal shows one, a join shows a token.
        requestCert: true,
        rejectUnauthorized: false,
        handshakeTimeout: o.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS,
        ...httpServerOptions({ maxConnections: 0, headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, drainTimeoutMs: 0 }),
      },
      (req, res) => handler(req, res),
    );
    server.maxConnections = MAX_CONNECTIONS;
    capConnectionsPerClient(server, o.log);
    server.on('tlsClientError', () => {});
    let address;
    try {
      address = await listenOn(server, o.host, o.port);
    } catch (err) {
      await identity.close();
      throw err;
    }
    const ca = new CaServer(o, identity, server, address.port);
    handler = (req, res) => void ca.handle(req, res);
    // A renewed certificate, or new roots (a rotation): new connections get them.
    ca.stopChange = identity.onChange(() => server.setSecureContext(serverTlsOptions(identity.contextOptions())));
    return ca;
  }

  /** The root the server's certificate chains to now (what clients pin). */
  signingRoot(): CaRoot | undefined {
    const pems = this.identity.contextOptions();
    const pem = rootOf(pems.cert, pems.ca);
    return pem === undefined ? undefined : caRootOf(pem, 'signing root');
  }

  async close(): Promise<void> {
    this.stopChange?.();
    await this.identity.close();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const client = clientAddress(req);
    try {
      const decision = this.limiter.check(client);
      if (!decision.allowed) {
        const e = rateLimited(ERROR_IDS.ca, `${RATE} per client address`, decision.retryAfterSec);
        res.setHeader('retry-after', String(decision.retryAfterSec));
        for (const [k, v] of Object.entries(rateLimitHeaders(decision))) res.setHeader(k, v);
        throw e;
      }
      const path = splitTarget(req.url ?? '/').path;
      if (path === ROOTS_PATH) {
        if (req.method !== 'GET' && req.method !== 'HEAD') {
          res.setHeader('allow', 'GET, HEAD');
          throw caError(405, `method ${req.method} not allowed on ${ROOTS_PATH}: use GET`);
        }
        const roots = await this.signer.roots();
        sendJson(res, 200, { roots: roots.map((r) => r.pem) });
        return;
      }
      if (path !== CERTIFICATE_PATH) throw caError(404, `no such path ${path}: POST ${CERTIFICATE_PATH} signs a certificate request, GET ${ROOTS_PATH} lists the roots`);
      if (req.method !== 'POST') {
        res.setHeader('allow', 'POST');
        throw caError(405, `method ${req.method} not allowed on ${CERTIFICATE_PATH}: use POST`);
      }
      const body = await readBody(req, MAX_REQUEST_BODY, ERROR_IDS.ca);
      const request = parseSignRequest(body);
      const via = await this.authenticate(req, request.service);
      await this.checkCsr(request);
      const ttlMs = Math.min(request.ttlMs ?? this.o.certTtlMs, this.o.certTtlMs);
      let chain: string;
      let roots: CaRoot[];
      try {
        chain = await this.signer.signJoined(request.csr, request.service, ttlMs, via.join);
        roots = await this.signer.roots();
      } catch (err) {
        this.o.log.error({ err: (err as Error).message, service: request.service }, 'mesh ca serve: cannot sign');
        throw caError(500, `cannot sign: ${(err as Error).message}`);
      }
      const leaf = new X509Certificate(splitPem(chain)[0]!);
      const spiffeId = spiffeIdOf(this.o.trustDomain, request.service);
      const serial = leaf.serialNumber.toLowerCase();
      const notAfter = new Date(leaf.validTo).toISOString();
      const joinedAt = iso(new Date(via.join.joinedAt));
      const chainSerial = via.join.chain ?? serial;
      this.o.log.info(
        { service: request.service, spiffeId, serial, notAfter, client, token: via.token, renewal: via.renewal, join: chainSerial, joinedAt, joinToken: via.join.token },
        `issued ${spiffeId} (serial ${serial}) ${via.token ? `with join token ${via.token}` : `as a renewal (TLS client certificate) of join ${chainSerial} (${joinedAt}, join token ${via.join.token})`}`,
      );
      sendJson(res, 200, { spiffe_id: spiffeId, serial, not_after: notAfter, chain, roots: roots.map((r) => r.pem) });
    } catch (err) {
      const e = err instanceof MeshError ? err : caError(500, (err as Error).message);
      if (e.code !== 500) this.o.log.info({ client, code: e.code, detail: e.detail }, `mesh ca serve refused a request: ${e.detail}`);
      sendError(res, e, ERROR_IDS.ca);
    }
  }

  /**
   * Who asks: a join token (its globs must match, it must not be revoked), or a renewal (a client
   * certificate of the same identity, from a join younger than --ca_join_lifetime and not revoked).
   */
  private async authenticate(req: IncomingMessage, service: string): Promise<Asker> {
    if (service === CA_SERVER_SERVICE) throw caError(403, `${CA_SERVER_SERVICE} is the signing service's own identity: it is never issued to a workload`);
    const spiffeId = spiffeIdOf(this.o.trustDomain, service);
    const authorization = req.headers.authorization;
    if (authorization !== undefined) {
      const m = /^Bearer +(\S+)$/i.exec(authorization);
      if (!m) throw caError(401, 'the Authorization header must be "Bearer <join token>" (mesh ca token)');
      let token;
      try {
        token = await verifyToken(this.o.caDir, m[1]!, this.o.trustDomain);
      } catch (err) {
        if (err instanceof JoinTokenError) throw caError(401, err.message);
        throw err;
      }
      const revoked = this.revoked({ service, token: token.id });
      if (revoked) throw caError(401, `join token ${token.id} was revoked at ${iso(new Date(revoked.at))}: make a new one with mesh ca token`);
      if (!globsMatcher(token.services)(service)) throw caError(403, `join token ${token.id} may be used for ${token.services.join(', ')} only, not for ${service}`);
      return { token: token.id, join: { joinedAt: Date.now(), token: token.id } };
    }
    const socket = req.socket as TLSSocket;
    const peer = socket.getPeerCertificate?.();
    if (peer && Object.keys(peer).length > 0) {
      if (!socket.authorized && !(String(socket.authorizationError) === 'CERT_HAS_EXPIRED' && this.issuedHere(peer.raw))) {
        throw caError(401, `the TLS client certificate is not trusted (${String(socket.authorizationError)}): renew with a certificate from this CA, or send a join token`);
      }
      const identity = peerIdentityOf(socket);
      if (identity !== spiffeId) throw caError(403, `the TLS client certificate is ${identity ?? 'no SPIFFE ID'}: it renews that identity only, not ${spiffeId}`);
      const serial = peer.serialNumber.toLowerCase().replace(/^0+(?=.)/, '');
      // A certificate without join facts (issued by a process that reads --ca_dir) joined when it was issued.
      const facts = joinFactsOf(peer.raw) ?? { joinedAt: new Date(peer.valid_from).getTime() + 60_000, token: 'none', chain: serial };
      const lifetime = this.o.joinLifetimeMs ?? DEFAULT_JOIN_LIFETIME_MS;
      // A join time that does not read (never written so by this CA) counts as a join long past.
      if (!Number.isFinite(facts.joinedAt)) throw caError(401, 'the certificate\'s join record cannot be read: join again with a new token (mesh ca token)');
      if (Date.now() - facts.joinedAt > lifetime) {
        throw caError(401, `the certificate's join (${iso(new Date(facts.joinedAt))}, join token ${facts.token}) is older than --ca_join_lifetime (${formatDuration(lifetime).replace(/(?<=[hm])0m0s$|(?<=[hm])0s$/, '')}): join again with a new token (mesh ca token)`);
      }
      const revoked = this.revoked({ service, serial, chain: facts.chain, token: facts.token, joinedAt: facts.joinedAt });
      if (revoked) throw caError(403, `certificate ${serial} of ${service} may not be renewed: ${RevocationList.describe(revoked)} (mesh ca revoke); join again with a new token (mesh ca token)`);
      return { renewal: true, join: facts };
    }
    throw caError(401, 'no join token: send "Authorization: Bearer <token>" (mesh ca token), or renew with a certificate from this CA as the TLS client certificate');
  }

  /**
   * True when `der` (a certificate past its notAfter) was signed by this CA: by a trusted root or
   * the signer, itself still valid. An expired certificate still renews (a process that outlived
   * a CA outage), within --ca_join_lifetime of its join, which authenticate checks next.
   */
  private issuedHere(der: Buffer): boolean {
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(der);
    } catch {
      return false;
    }
    if (leaf.ca) return false;
    const signer = readSignerCertificate(this.o.caDir);
    const issuers = [...readRoots(this.o.caDir).map((r) => r.cert), ...(signer ? [signer] : [])];
    const now = Date.now();
    return issuers.some((issuer) => new Date(issuer.validTo).getTime() > now && leaf.checkIssued(issuer) && leaf.verify(issuer.publicKey));
  }

  /** The revocation that refuses `subject`; a revocation list that cannot be used refuses everything (500). */
  private revoked(subject: RevocationSubject): Revocation | undefined {
    try {
      return this.revocations.find(subject);
    } catch (err) {
      this.o.log.error({ err: (err as Error).message }, `mesh ca serve: ${(err as Error).message}`);
      throw caError(500, (err as Error).message);
    }
  }

  /** The CSR: a P-256 key, a valid signature, and no name but this service's SPIFFE ID. */
  private async checkCsr(request: SignRequest): Promise<void> {
    let facts;
    try {
      facts = await inspectCsr(request.csr);
    } catch (err) {
      throw caError(400, `"csr" is not a PEM certificate request: ${(err as Error).message}`);
    }
    if (facts.keyKind !== 'EC P-256') throw caError(400, `the certificate request's key is ${facts.keyKind}: only ECDSA P-256 keys are signed`);
    if (!facts.signatureValid) throw caError(400, 'the certificate request\'s signature does not verify');
    const spiffeId = spiffeIdOf(this.o.trustDomain, request.service);
    const other = facts.requestedNames.filter((n) => n !== `URI:${spiffeId}`);
    if (other.length > 0) throw caError(400, `the certificate request asks for ${other.join(', ')}: a certificate for ${request.service} names ${spiffeId} only (leave the names out of the request)`);
  }
}
