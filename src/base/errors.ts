/**
 * The one error shape used on every wire: gateway, sidecar, client and RPC backends.
 * Key order is part of the contract: {"id","code","detail","status"}.
 */
import { STATUS_CODES } from './http/node-http.js';

/**
 * The catalogue of error ids: the `id` of every error JSON the project writes itself, by the part
 * that writes it (a backend's own error keeps the id its service chose). Every writer names its
 * id from here; the status and detail are the writer's.
 */
export const ERROR_IDS = {
  /** The client of every process: calls, budgets, connection failures, codecs, gRPC nodes. */
  client: 'go.mesh.client',
  /** The `mesh` command's own operations (through a sidecar, `mesh dlq`, `mesh consumers`). */
  cli: 'go.mesh.cli',
  /** A framework server's answer before any service is named (src/framework/server/). */
  server: 'go.mesh.server',
  /** `mesh api`, the gateway. */
  gateway: 'go.mesh.api',
  /** `mesh sidecar`. */
  sidecar: 'go.mesh.sidecar',
  /** `mesh proxy`. */
  proxy: 'go.mesh.proxy',
  /** The auth step at the edge (401, 403; src/edge/auth/). */
  auth: 'go.mesh.auth',
  /** Who may call whom, where a call arrives (403; --authz_rules, src/edge/auth/authz.ts). */
  authz: 'go.mesh.authz',
  /** The http broker's wire and the framework's subscribers. */
  broker: 'go.mesh.broker',
  /** `mesh ca serve`, the mesh CA's signing service (src/tls/workload/ca-server.ts). */
  ca: 'go.mesh.ca',
  /** The admin interface's JSON errors (admin /tap). */
  admin: 'go.mesh.admin',
} as const;

export type ErrorId = (typeof ERROR_IDS)[keyof typeof ERROR_IDS];

export class MeshError extends Error {
  readonly id: string;
  readonly code: number;
  readonly detail: string;
  readonly statusText: string;
  /** True when the error came from a backend's answer (its id is kept by front ends). */
  fromUpstream = false;
  /**
   * Envoy's response flag of this failure for the access log (UH no healthy upstream, UO circuit
   * breaker, UF connection failure, UT timeout, UC reset, NC unknown service, NR no route), set
   * where the failure is decided.
   */
  responseFlag?: string;

  constructor(id: string, code: number, detail: string, statusText?: string) {
    super(detail);
    this.name = 'MeshError';
    this.id = id;
    this.code = code;
    this.detail = detail;
    this.statusText = statusText ?? statusTextOf(code);
  }

  /** The status text of the code (`Bad Request`): the `status` of the error JSON. */
  get status(): string {
    return this.statusText;
  }

  toJSON(): { id: string; code: number; detail: string; status: string } {
    return { id: this.id, code: this.code, detail: this.detail, status: this.statusText };
  }

  /** The exact bytes written on the wire. */
  toBody(): string {
    return JSON.stringify(this.toJSON());
  }
}

/** Sets the access log's response flag of an error (see MeshError.responseFlag) and returns it. */
export function flagged(err: MeshError, flag: string): MeshError {
  err.responseFlag = flag;
  return err;
}

export function statusTextOf(code: number): string {
  return STATUS_CODES[code] ?? 'Unknown';
}

/*
 * The status factories: every error the project answers is built by one of these (or by a named
 * factory below), never with `new MeshError(` at the writer (test/base/error-catalogue-only.test.ts).
 * `id` is an ERROR_IDS member, or for a framework server's own answers the service's name.
 */
export const badRequest = (id: string, detail: string) => new MeshError(id, 400, detail);
export const unauthorized = (id: string, detail: string) => new MeshError(id, 401, detail);
export const forbidden = (id: string, detail: string) => new MeshError(id, 403, detail);
export const notFound = (id: string, detail: string) => new MeshError(id, 404, detail);
export const methodNotAllowed = (id: string, detail: string) => new MeshError(id, 405, detail);
export const notAcceptable = (id: string, detail: string) => new MeshError(id, 406, detail);
export const requestTimeout = (id: string, detail: string) => new MeshError(id, 408, detail);
export const payloadTooLarge = (id: string, detail: string) => new MeshError(id, 413, detail);
export const unsupportedMediaType = (id: string, detail: string) => new MeshError(id, 415, detail);
export const upgradeRequired = (id: string, detail: string) => new MeshError(id, 426, detail);
export const tooManyRequests = (id: string, detail: string) => new MeshError(id, 429, detail);
export const headersTooLarge = (id: string, detail: string) => new MeshError(id, 431, detail);
/** The status text of 499, nginx's "client closed request" (not a registered status). */
export const CLIENT_CLOSED_REQUEST = 'Client Closed Request';
/** 499: the caller went away (closed the stream, cancelled the call). */
export const clientClosed = (id: string, detail: string) => new MeshError(id, 499, detail, CLIENT_CLOSED_REQUEST);
export const internalError = (id: string, detail: string) => new MeshError(id, 500, detail);
export const notImplemented = (id: string, detail: string) => new MeshError(id, 501, detail);
export const badGateway = (id: string, detail: string) => new MeshError(id, 502, detail);
export const serviceUnavailable = (id: string, detail: string) => new MeshError(id, 503, detail);
export const gatewayTimeout = (id: string, detail: string) => new MeshError(id, 504, detail);
/**
 * An error whose status is decided at run time (a fault's abort status, a status forwarded from
 * another wire, a gRPC status mapped to HTTP); `statusText` only where the code has none of its own.
 */
export const errorWithStatus = (id: string, code: number, detail: string, statusText?: string) => new MeshError(id, code, detail, statusText);

/*
 * The recurring errors of the front ends, each written here once: the status and detail, under
 * the id of the front end that answers.
 */

/** 413: a request body over --max_body_size. */
export const bodyTooLarge = (id: string, limit: number) => new MeshError(id, 413, `request body larger than ${limit} bytes`);

/** 429 (response flag RL): over a rate limit (`policy` as described by src/base/http/rate-limit.ts; `rule`: an auth rule's own limit). */
export const rateLimited = (id: string, policy: string, retryAfterSec: number, rule?: number) =>
  flagged(new MeshError(id, 429, `rate limit of ${policy} exceeded${rule === undefined ? '' : ` (rule ${rule})`}: retry after ${retryAfterSec}s`), 'RL');

/** 503 (response flag RLSE): the shared rate limit store cannot answer and --rate_limit_failure_mode is closed. */
export const rateLimitStoreDown = (id: string) => flagged(new MeshError(id, 503, 'rate limit store unavailable (--rate_limit_failure_mode=closed): retry later'), 'RLSE');

/** 403: a browser Origin the sidecar does not allow. */
export const originNotAllowed = (id: string, origin: string | undefined) => new MeshError(id, 403, `origin ${origin} not allowed (allow it with --cors)`);

/** 405 on a front end's version (`/`, or `/_mesh/version`: GET and HEAD only; the caller sets Allow). */
export const rootMethodNotAllowed = (id: string, method: string | undefined, path = '/') => new MeshError(id, 405, `method ${method} not allowed on ${path}: use GET`);

/**
 * 500: a route (of a route file) with no backend to send to: `why` is what its rule says (every
 * backend has weight 0, no backendRefs, a backendRef that is not a mesh service), as the Gateway
 * API answers a rule whose backends cannot be resolved.
 */
export const noBackend = (id: string, route: string, why = 'every backend has weight 0') => new MeshError(id, 500, `route ${route}: ${why}`);

/**
 * The error of a request a route file's route sent: a backend service the registry does not know
 * (response flag NC) is the route's backend that cannot be resolved, 500 as the Gateway API says
 * (the same detail; 404 stays the answer of a path that names no service).
 */
export function routedError(err: unknown, id: string): MeshError {
  const e = asFrontEndError(err, id);
  if (e.fromUpstream || e.responseFlag !== 'NC' || e.code !== 404) return e;
  return flagged(new MeshError(e.id, 500, e.detail), 'NC');
}

/** 404 (response flag NR): a listener with routes of its own (`mesh proxy`, a Gateway listener) has none for the path; `what` may name an upgrade. */
export const noRoute = (id: string, path: string, listener: string, what = '') => flagged(new MeshError(id, 404, `no route for ${what}${path} on listener ${listener}`), 'NR');

/**
 * 421: over TLS, the request's Host is for another listener than the connection's SNI name (a
 * Gateway's HTTPS listeners): the client must open a connection for that name.
 */
export const misdirectedRequest = (id: string, host: string, sni: string) =>
  new MeshError(id, 421, `Host ${host} is served on another TLS connection than this one (for ${sni}): open a connection for ${host}`);

/** 404: a service the registry does not know (the client adds the response flag NC). */
export const serviceNotFound = (id: string, service: string) => new MeshError(id, 404, `service ${service}: not found`);

/** 504 (response flag UT): a proxied request not answered in time; `to`: the service, or `<service> on <host>`. */
export const proxyTimeout = (id: string, to: string, timeoutMs: number) => flagged(new MeshError(id, 504, `proxy to ${to}: timeout after ${timeoutMs}ms`), 'UT');

/** 502 (response flag UF: connection failed, UC: reset): a proxied request failed on its host; `to`: `<service> on <host>`. */
export const proxyFailed = (id: string, to: string, reason: string, flag: 'UF' | 'UC') => flagged(new MeshError(id, 502, `proxy to ${to}: ${reason}`), flag);

/**
 * 503 (response flag UF or UC): a route's retries are spent and the last try failed before an
 * answer (a failure to connect, or a connection the host closed or reset); `to`: `<service> on <host>` of the last try.
 */
export const proxyRetriesSpent = (id: string, to: string, reason: string, tries: number, flag: 'UF' | 'UC') => flagged(new MeshError(id, 503, `proxy to ${to}: ${reason} (the last of ${tries} tries)`), flag);

/** 431: a request with more header fields than a server takes. */
export const tooManyHeaderFields = (id: string, max: number) => new MeshError(id, 431, `more than ${max} header fields`);

/** 415: a content type no codec of the process reads. */
export const noCodec = (id: string, contentType: string | undefined) => new MeshError(id, 415, `no codec for content type ${contentType}`);

/** 415: a call to a gRPC backend in a content type other than JSON or protobuf. */
export const grpcContentType = (id: string, type: string) => new MeshError(id, 415, `a gRPC backend takes application/json or application/protobuf, not ${type}`);

/** 400: a message sent on a server stream (its one request goes at open). */
export const serverStreamSend = (id: string) => new MeshError(id, 400, 'a server stream takes its one request at open');

/** 400: a message sent after the request side of a stream ended. */
export const streamRequestClosed = (id: string) => new MeshError(id, 400, 'the request side of the stream is closed');

/** 413: a stream message over the size limit. */
export const streamMessageTooLarge = (id: string, bytes: number, max: number) => new MeshError(id, 413, `stream message of ${bytes} bytes is larger than ${max} bytes`);

/** 500: a stream handler that did not return an async iterable. */
export const notAsyncIterable = (id: string, handler: string, kind: string) =>
  new MeshError(id, 500, `handler of ${handler} (a ${kind} stream) must return an async iterable (an async generator)`);

/**
 * Parses an error body received from a backend. A body already in the error form is kept as
 * it is; anything else becomes a go.mesh.client error carrying the body text.
 */
export function parseErrorBody(status: number, body: string): MeshError {
  try {
    const parsed: unknown = JSON.parse(body);
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
      const o = parsed as Record<string, unknown>;
      if (typeof o.code === 'number' && typeof o.detail === 'string') {
        const id = typeof o.id === 'string' ? o.id : ERROR_IDS.client;
        const code = Number.isInteger(o.code) && o.code >= 100 && o.code <= 599 ? o.code : status;
        const err = new MeshError(id, code, o.detail, typeof o.status === 'string' ? o.status : undefined);
        err.fromUpstream = true;
        return err;
      }
    }
  } catch {
    // not JSON: fall through
  }
  const err = new MeshError(ERROR_IDS.client, status, body);
  err.fromUpstream = true;
  return err;
}

/**
 * The error a front end sends: a backend's own error as it is, anything raised on the way
 * (unknown service, no host, timeout) under the front end's id.
 */
export function asFrontEndError(err: unknown, id: string): MeshError {
  const e = toMeshError(err, id);
  if (e.fromUpstream || e.id === id) return e;
  const out = new MeshError(id, e.code, e.detail, e.statusText);
  out.responseFlag = e.responseFlag;
  return out;
}

/** Wraps anything thrown into a MeshError; unknown failures are 500s. */
export function toMeshError(err: unknown, id: string = ERROR_IDS.client): MeshError {
  if (err instanceof MeshError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new MeshError(id, 500, message);
}
