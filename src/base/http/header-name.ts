/**
 * A header name as CGI-style backends read it (CGI's `HTTP_*` variables: Python WSGI, PHP, Rack,
 * many Go and Java adapters): case folded and `_` read as `-`, so `Mesh_Auth_Subject`,
 * `MESH-AUTH-SUBJECT` and `mesh-auth-subject` are one name. The one home of that folding: the
 * edge's header rules (core/transport/headers.ts, edge/filters, edge/routes) and the tap's
 * redaction (./tap.ts) compare names this way. Lower case in, lower case out.
 */
export function foldHeaderName(lower: string): string {
  return lower.includes('_') ? lower.replaceAll('_', '-') : lower;
}
