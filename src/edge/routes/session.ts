/**
 * A rule's `sessionPersistence` (docs/routing.md#sessionpersistence): the first request of a
 * session is balanced as usual, and its answer carries a token (a cookie, or a header named
 * `sessionName`); a later request that presents the token goes to the node the token names while
 * that node is still one of the rule's backend's healthy hosts. Otherwise it is balanced anew and
 * its answer carries a new token.
 *
 * The token is the gateway's only memory of a session: nothing is kept per session in the process.
 * It is the backend (service and version), the node (host key and node id), when the session began
 * and when it was last used, sealed with AES-256-GCM under a key drawn at random by each front end
 * (SessionTokens: one per RouteEffectsCache) and bound to the session's name. A token that does not
 * open (forged, tampered, from another process or an earlier run, or moved to another session's
 * name) is ignored, as is one past its `absoluteTimeout` or `idleTimeout`, or naming a backend the
 * rule does not send to: the request is balanced anew. A token never chooses an address: it names
 * a host that the cluster of the rule's backend must hold (AcquireOptions.prefer), else it is not
 * used. Sealed, it does not show the client the node's address either.
 *
 * `idleTimeout` is kept without state: with it, every answer of the session carries the token again
 * with the time of this request, and a token not refreshed within idleTimeout is refused.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { BackendRefSpec, SessionSpec } from './file.js';

/** The node a session is pinned to: a host of the backend's cluster (UpstreamTarget's key and nodeId). */
export interface SessionNode {
  key: string;
  nodeId: string;
}

/** What a token holds. Times are epoch ms. */
export interface SessionToken extends SessionNode {
  service: string;
  /** The backend's version; '' for a backend without one. */
  version: string;
  /** When the session began (its first request). */
  start: number;
  /** When the token was issued (the session's last request that got one). */
  last: number;
}

/** Tokens longer than this are not opened. */
const MAX_TOKEN_CHARS = 2048;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const FORMAT = 1;

/**
 * Seals and opens session tokens under a key of its own (random unless given): AES-256-GCM, the
 * session's name as additional data, base64url. One per front end, for as long as it runs.
 */
export class SessionTokens {
  private readonly key: Buffer;

  constructor(key: Buffer = randomBytes(32)) {
    if (key.length !== 32) throw new Error('a session key is 32 bytes');
    this.key = key;
  }

  seal(name: string, token: SessionToken): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(Buffer.from(name));
    const plain = Buffer.from(JSON.stringify([FORMAT, token.service, token.version, token.key, token.nodeId, token.start, token.last]));
    const sealed = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    return sealed.toString('base64url');
  }

  /** The token's content; undefined when it does not open (forged, tampered, another key or name) or is not one. */
  open(name: string, text: string): SessionToken | undefined {
    if (text.length > MAX_TOKEN_CHARS || !/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
    const bytes = Buffer.from(text, 'base64url');
    // One spelling only: base64url decoding would ignore a trailing part of a character.
    if (bytes.length < IV_BYTES + TAG_BYTES + 1 || bytes.toString('base64url') !== text) return undefined;
    let plain: Buffer;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, bytes.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(name));
      decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
      plain = Buffer.concat([decipher.update(bytes.subarray(IV_BYTES, bytes.length - TAG_BYTES)), decipher.final()]);
    } catch {
      return undefined;
    }
    let fields: unknown;
    try {
      fields = JSON.parse(plain.toString());
    } catch {
      return undefined;
    }
    if (!Array.isArray(fields) || fields.length !== 7 || fields[0] !== FORMAT) return undefined;
    const [, service, version, key, nodeId, start, last] = fields as unknown[];
    if (typeof service !== 'string' || typeof version !== 'string' || typeof key !== 'string' || typeof nodeId !== 'string') return undefined;
    if (typeof start !== 'number' || typeof last !== 'number') return undefined;
    return { service, version, key, nodeId, start, last };
  }
}

/** The values of a cookie in a request's Cookie header(s), in order. */
export function cookieValues(header: string | string[] | undefined, name: string): string[] {
  if (header === undefined) return [];
  const out: string[] = [];
  for (const line of Array.isArray(header) ? header : [header]) {
    for (const part of line.split(';')) {
      const eq = part.indexOf('=');
      if (eq < 0 || part.slice(0, eq).trim() !== name) continue;
      let value = part.slice(eq + 1).trim();
      if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
      out.push(value);
    }
  }
  return out;
}

/** A request's session, when its token is good: the backend it goes to and the node to prefer. */
export interface SessionHit {
  backend: BackendRefSpec;
  token: SessionToken;
}

/**
 * What a proxy route's request carries to the handler (RoutePolicy.session): the node its token
 * names, and the token header for the answer of the node that took it.
 */
export interface SessionCall {
  /** The node the request's token names; undefined: a new session (balanced as usual). */
  readonly prefer: SessionNode | undefined;
  /** The answer's header for the node that answered (`set-cookie` or the session's header); undefined: the token presented stays good. */
  answerHeader(node: SessionNode): [string, string] | undefined;
}

/** A rule's sessionPersistence, with its front end's tokens: reads a request's token, writes an answer's. */
export class RuleSession {
  constructor(
    readonly spec: SessionSpec,
    private readonly tokens: SessionTokens,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The request's session: the first token it presents (in the cookie or header of the session's
   * name) that opens, is within the session's timeouts, and names one of `refs` (a mesh service
   * of weight above 0, the same version). Undefined: none, balance anew.
   */
  find(headers: IncomingHttpHeaders, refs: readonly BackendRefSpec[]): SessionHit | undefined {
    const spec = this.spec;
    let texts: string[];
    if (spec.type === 'Cookie') texts = cookieValues(headers.cookie, spec.name);
    else {
      const h = headers[spec.name];
      texts = h === undefined ? [] : Array.isArray(h) ? h : h.split(',').map((v) => v.trim());
    }
    const now = this.now();
    for (const text of texts.slice(0, 4)) {
      const token = this.tokens.open(spec.name, text);
      if (!token || !this.live(token, now)) continue;
      const backend = refs.find((r) => !r.unresolved && r.weight > 0 && r.name === token.service && (r.version ?? '') === token.version);
      if (backend) return { backend, token };
    }
    return undefined;
  }

  private live(token: SessionToken, now: number): boolean {
    const { absoluteTimeoutMs, idleTimeoutMs } = this.spec;
    if (token.start > now + 60_000 || token.last < token.start) return false;
    if (absoluteTimeoutMs !== undefined && now - token.start >= absoluteTimeoutMs) return false;
    if (idleTimeoutMs !== undefined && now - token.last >= idleTimeoutMs) return false;
    return true;
  }

  /** The handler's view of one request sent to `backend`, with the session `hit` found (if any). */
  call(backend: BackendRefSpec, hit: SessionHit | undefined, secure: boolean): SessionCall {
    const prior = hit?.token;
    return {
      prefer: prior && { key: prior.key, nodeId: prior.nodeId },
      answerHeader: (node) => {
        const same = prior !== undefined && prior.key === node.key && prior.nodeId === node.nodeId;
        // The same node: the token stays, unless idleTimeout wants it refreshed.
        if (same && this.spec.idleTimeoutMs === undefined) return undefined;
        const now = this.now();
        const token: SessionToken = { service: backend.name, version: backend.version ?? '', key: node.key, nodeId: node.nodeId, start: same ? prior.start : now, last: now };
        return this.header(this.tokens.seal(this.spec.name, token), token.start, now, secure);
      },
    };
  }

  private header(value: string, start: number, now: number, secure: boolean): [string, string] {
    const spec = this.spec;
    if (spec.type === 'Header') return [spec.name, value];
    let cookie = `${spec.name}=${value}; Path=/; HttpOnly; SameSite=Lax`;
    if (secure) cookie += '; Secure';
    if (spec.lifetime === 'Permanent' && spec.absoluteTimeoutMs !== undefined) cookie += `; Max-Age=${Math.max(1, Math.ceil((start + spec.absoluteTimeoutMs - now) / 1000))}`;
    return ['set-cookie', cookie];
  }
}
