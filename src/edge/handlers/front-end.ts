/** What every handler needs to know about the front end it serves (gateway or sidecar). */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { EdgeContext } from '../context.js';
import { HEADER_ID, endToEndHeaders, meshTimeoutOf } from '../../core/transport/headers.js';
import type { CallOptions } from '../../core/client/client.js';
import { requestInfo } from '../../base/http/access-log.js';
import { targetOf } from '../../base/http/target.js';
import type { CallContext } from '../../base/util/call-context.js';
import type { MirrorSender } from './mirror.js';
import type { RoutePolicy } from '../routes/effects.js';

/**
 * The context of the edge's handlers (src/edge/handlers/): the front end a handler serves (the
 * gateway, the sidecar or a proxy listener, each in src/fronts/) as the handler sees it.
 */
export interface EdgeHandlerContext {
  /** The process as the edge sees it (src/edge/context.ts). */
  edge: EdgeContext;
  /** go.mesh.api for the gateway, go.mesh.srv for the sidecar (or --namespace). */
  namespace: string;
  /** The `id` of error JSON this front end writes. */
  errorId: string;
  maxBodyBytes: number;
  /** Sends a route's RequestMirror copies (bounded); none: copies are dropped and counted. */
  mirrors?: MirrorSender;
  /** Authorizes a call whose service and method only the body or query names (/rpc): throws the 401/403 (src/edge/auth/); `res` undefined for an upgrade. */
  authorizeCall?: (req: FrontRequest, res: FrontResponse | undefined, service: string, method: string) => void | Promise<void>;
  /**
   * The route file's answer for a call at /rpc (the sidecar's --routes): the service and policy
   * to call with, undefined when no route matches; throws the error of a route it cannot serve.
   */
  routeCall?: (req: FrontRequest, service: string, method: string) => { service: string; policy: RoutePolicy } | undefined;
}

/**
 * What a route of a route file (src/edge/routes/) adds to how a handler sends a request: the
 * backend's registry version and the route's timeouts.
 */
/**
 * Call options from an inbound request: its end-to-end headers, request id and Mesh-Timeout (and
 * its call context, and its route's policy, when given).
 */
export function callOptionsFrom(req: FrontRequest, contentType?: string, context?: CallContext, policy?: RoutePolicy): CallOptions {
  const headers = req.headers;
  const id = headers[HEADER_ID];
  const options: CallOptions = {
    contentType,
    metadata: endToEndHeaders(headers),
    timeoutMs: inboundTimeout(headers),
    id: typeof id === 'string' && id !== '' ? id : undefined,
    info: requestInfo(req),
    context,
  };
  if (policy) {
    options.version = policy.version;
    options.budgetMs = policy.requestTimeoutMs;
    options.perTryTimeoutMs = policy.tryTimeoutMs;
    const effects = policy.effects;
    if (effects) {
      if (options.metadata) options.metadata = effects.metadata(options.metadata);
      const retry = effects.rule.retry;
      if (retry) {
        options.retries = retry.attempts;
        options.retryRules = effects.retryRules;
      }
    }
  }
  return options;
}

/** The inbound Mesh-Timeout; a malformed one never gets here (the front server answers it 400: FrontServer). */
function inboundTimeout(headers: FrontRequest['headers']): number | undefined {
  try {
    return meshTimeoutOf(headers);
  } catch {
    return undefined;
  }
}

/** The query of a request (src/base/http/target.ts) as a JSON-ready object: one value → string, several → array. */
export function queryObject(req: FrontRequest): Record<string, string | string[]> {
  const query = targetOf(req).query;
  const out: Record<string, string | string[]> = {};
  if (query === undefined) return out;
  for (const [k, v] of new URLSearchParams(query)) {
    const prev = out[k];
    if (prev === undefined) out[k] = v;
    else if (Array.isArray(prev)) prev.push(v);
    else out[k] = [prev, v];
  }
  return out;
}
