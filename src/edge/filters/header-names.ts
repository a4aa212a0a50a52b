/**
 * The edge step on request header names, run by the front server on every request and upgrade of
 * every front end, before anything else reads a header (docs/security.md, "Header names"):
 *
 * - `--headers_with_underscores`: a name with `_` is read by CGI-style backends (WSGI, PHP, Rack,
 *   many Go and Java adapters) as the same name with `-`. `allow` passes such headers except those
 *   that fold to a name the mesh sets or reads (isMeshHeaderName: `Mesh_Auth_Subject`,
 *   `Mesh_Endpoint`, `X_Forwarded_For`, ...), which are removed; `drop` removes every one (nginx's
 *   default); `reject` answers 400 (Envoy's REJECT_REQUEST). Removals are counted in
 *   `http.<prefix>.dropped_headers_with_underscores`, refusals in
 *   `http.<prefix>.requests_rejected_with_underscores_in_headers` (Envoy's names).
 * - The headers only a mesh edge sets (`Mesh-Auth-*`, `Mesh-Peer-Identity`) are removed from what
 *   the client sent, unless the front end trusts this caller to assert an end user (the sidecar's
 *   inbound listener, for the callers of `--inbound_auth_callers`: `Mesh-Auth-*` only).
 * - A wire-protocol header the mesh reads as one value (`Mesh-Service`, `Mesh-Endpoint`,
 *   `Mesh-Timeout`, `Mesh-Stream`, `Mesh-Id`) given more than once is a 400: what the rules check
 *   and what the app reads cannot differ.
 *
 * So the auth rules, the authz rules and the endpoint a call is counted under read what the
 * backend will read.
 */
import type { FrontRequest } from '../../base/http/front-types.js';
import { badRequest, MeshError } from '../../base/errors.js';
import { declareStats, type Counter, type StatsScope } from '../../base/stats/store.js';
import { foldHeaderName } from '../../base/http/header-name.js';
import { HEADER_ENDPOINT, HEADER_ID, HEADER_PEER_IDENTITY, HEADER_SERVICE, HEADER_STREAM, HEADER_TIMEOUT, isEdgeSetHeader, isMeshHeaderName } from '../../core/transport/headers.js';
import { removeHeaders } from '../auth/edge.js';
import type { EdgeFilter } from './filter.js';

/** The values of --headers_with_underscores. */
export const UNDERSCORE_POLICIES = ['allow', 'drop', 'reject'] as const;
export type UnderscorePolicy = (typeof UNDERSCORE_POLICIES)[number];

export const HEADER_NAME_STATS = {
  counters: { dropped: 'dropped_headers_with_underscores', rejected: 'requests_rejected_with_underscores_in_headers' },
} as const;

/** Wire-protocol headers read as one value: a second one is refused. */
const SINGLE_VALUED = [HEADER_SERVICE, HEADER_ENDPOINT, HEADER_TIMEOUT, HEADER_STREAM, HEADER_ID] as const;

/** The canonical spelling of a single-valued header in an error message. */
const SPELLING: Record<string, string> = { 'mesh-service': 'Mesh-Service', 'mesh-endpoint': 'Mesh-Endpoint', 'mesh-timeout': 'Mesh-Timeout', 'mesh-stream': 'Mesh-Stream', 'mesh-id': 'Mesh-Id' };

export interface HeaderNameFilterOptions {
  policy: UnderscorePolicy;
  /** `http.<prefix>.` of the front end. */
  stats: StatsScope;
  /** The `id` of the error JSON of a refusal. */
  errorId: string;
  /** True when this request's caller may assert an end user (`Mesh-Auth-*` kept); default never. */
  trustsAuthHeaders?: (req: FrontRequest) => boolean;
}

export class HeaderNameFilter {
  private readonly dropped: Counter;
  private readonly rejected: Counter;

  constructor(private readonly options: HeaderNameFilterOptions) {
    const s = declareStats(options.stats, HEADER_NAME_STATS);
    this.dropped = s.dropped;
    this.rejected = s.rejected;
  }

  /** Applies the step to `req` (headers removed in place); a refusal to answer, or undefined. */
  apply(req: FrontRequest): MeshError | undefined {
    const { policy } = this.options;
    const headers = req.headers;
    let drop: Set<string> | undefined;
    let edgeSet = false;
    for (const name in headers) {
      if (name.includes('_')) {
        if (policy === 'reject') {
          this.rejected.inc();
          return badRequest(this.options.errorId, `header ${JSON.stringify(name.slice(0, 64))} has _ in its name (--headers_with_underscores=reject)`);
        }
        if (policy === 'drop' || isMeshHeaderName(foldHeaderName(name))) (drop ??= new Set()).add(name);
      } else if (isEdgeSetHeader(name)) edgeSet = true;
    }
    if (drop) {
      this.dropped.inc(drop.size);
      removeHeaders(req, (name) => drop!.has(name));
    }
    if (edgeSet) {
      const keepAuth = this.options.trustsAuthHeaders?.(req) === true;
      removeHeaders(req, keepAuth ? (name) => name === HEADER_PEER_IDENTITY : isEdgeSetHeader);
    }
    for (const name of SINGLE_VALUED) {
      if (headers[name] !== undefined && repeated(req.rawHeaders, name)) {
        return badRequest(this.options.errorId, `${SPELLING[name]} given more than once`);
      }
    }
    return undefined;
  }
}

/** Whether `lower` names more than one field of the raw header list. */
function repeated(raw: string[], lower: string): boolean {
  let seen = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === lower.length && name.toLowerCase() === lower && ++seen > 1) return true;
  }
  return false;
}


/** The step of a chain: a refusal answers the request. */
export function headerNames<R>(filter: HeaderNameFilter): EdgeFilter<R> {
  return (next) => (ex) => {
    const refused = filter.apply(ex.req);
    if (refused) return ex.refuse(refused);
    next(ex);
  };
}
