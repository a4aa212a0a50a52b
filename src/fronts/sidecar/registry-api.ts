/**
 * The sidecar's `/registry` (SPEC 2.6, 3.3, 4.2; DESIGN 4):
 *
 *   POST|PUT /registry[?ttl=<Go duration>]   register   body: the service as JSON (SPEC 2.6 keys, any case)
 *   DELETE   /registry                       deregister same body
 *   GET      /registry?service=NAME          one object, lower-case keys, nodes of every version; 404 when unknown
 *   GET      /registry                       [{"name": ...}, ...] sorted by name ([] when empty)
 *
 * Success of a write: 200 `{}`. Errors are the error JSON (id go.mesh.sidecar): 400 naming the
 * field (Name, Nodes, Nodes[i].Id|Address|Port, ttl, body not JSON), 413 body too large, 415 a body
 * that is not declared JSON, 405 other methods, 503 the registry backend failed.
 *
 * The body is read raw, never parsed as a form: a POST sent as `application/x-www-form-urlencoded`
 * (curl -d's default) gets a 415 telling what to send instead of losing its body (micro v1's trap).
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { badRequest, MeshError, methodNotAllowed, serviceNotFound, serviceUnavailable, unsupportedMediaType } from '../../base/errors.js';
import { isJsonMedia, mediaType } from '../../base/codec/codec.js';
import { parseJson, stringifyJson } from '../../base/codec/json.js';
import { readBody } from '../../base/http/body.js';
import { sendJson } from '../../base/http/respond.js';
import { serviceFromInput } from '../../engines/registry/input.js';
import { mergeVersions, type Service } from '../../engines/registry/registry.js';
import { byVersion } from '../../engines/registry/records.js';
import { RegistryValidationError, shown } from '../../engines/registry/validate.js';
import { formatDuration, MAX_DURATION_MS, parseDuration } from '../../base/util/duration.js';
import type { EdgeHandlerContext } from '../../edge/handlers/front-end.js';

const ALLOW = 'GET, HEAD, POST, PUT, DELETE';

/** Parses the `ttl` query parameter (Go duration, > 0) into whole milliseconds; undefined when absent. */
export function parseTtl(errorId: string, params: URLSearchParams): number | undefined {
  const all = params.getAll('ttl');
  if (all.length === 0) return undefined;
  if (all.length > 1) throw badRequest(errorId, 'ttl: given more than once');
  const text = all[0]!;
  let ms: number;
  try {
    ms = parseDuration(text);
  } catch (err) {
    if (/longer than/.test((err as Error).message)) throw badRequest(errorId, `ttl: "${text}" is longer than ${formatDuration(MAX_DURATION_MS)}`);
    throw badRequest(errorId, `ttl: invalid duration "${text}" (use a Go duration such as 30s, 1m30s, 500ms; units ns, us, ms, s, m, h)`);
  }
  if (!(ms >= 1)) throw badRequest(errorId, `ttl: "${text}" is under 1ms (leave ttl out for a registration that lasts until deregistered)`);
  return Math.ceil(ms);
}

/** Reads and validates a registration body: JSON declared (or no Content-Type), parsed, per SPEC 2.6. */
export async function readServiceBody(fe: EdgeHandlerContext, req: FrontRequest): Promise<Service> {
  const media = mediaType(req.headers['content-type']);
  if (!isJsonMedia(media)) {
    req.resume();
    throw unsupportedMediaType(
      fe.errorId,
      `unsupported content type ${media}: send the service as JSON with Content-Type: application/json (curl -d sends a form type; add -H 'Content-Type: application/json')`,
    );
  }
  const body = await readBody(req, fe.maxBodyBytes, fe.errorId);
  const text = body.toString('utf8');
  if (text.trim() === '') throw badRequest(fe.errorId, 'body: required (the service as JSON: {"Name":..,"Nodes":[{"Id":..,"Address":..,"Port":..}]})');
  let parsed: unknown;
  try {
    parsed = parseJson(text);
  } catch (err) {
    throw badRequest(fe.errorId, `body: not valid JSON: ${(err as Error).message}`);
  }
  try {
    return serviceFromInput(parsed);
  } catch (err) {
    if (err instanceof RegistryValidationError) throw badRequest(fe.errorId, err.message);
    throw err;
  }
}

function registryFailure(fe: EdgeHandlerContext, what: string, err: unknown): MeshError {
  if (err instanceof RegistryValidationError) return badRequest(fe.errorId, err.message);
  if (err instanceof MeshError) return err;
  return serviceUnavailable(fe.errorId, `registry unavailable: ${what} failed: ${(err as Error)?.message ?? String(err)}`);
}

export async function handleRegistry(fe: EdgeHandlerContext, req: FrontRequest, res: FrontResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://sidecar');
  const method = req.method ?? 'GET';
  const registry = fe.edge.registry;
  const log = fe.edge.logging.get('sidecar');

  switch (method) {
    case 'GET':
    case 'HEAD': {
      req.resume();
      const names = url.searchParams.getAll('service');
      if (names.length > 1) throw badRequest(fe.errorId, 'service: given more than once');
      if (names.length === 1) {
        const name = names[0]!.trim();
        if (name === '') throw badRequest(fe.errorId, 'service: must not be empty (leave it out to list every service)');
        let versions: Service[];
        try {
          versions = await registry.getService(name);
        } catch (err) {
          throw registryFailure(fe, `looking up ${name}`, err);
        }
        const live = versions.filter((s) => s.nodes.length > 0);
        const merged = mergeVersions(live);
        if (!merged) throw serviceNotFound(fe.errorId, name);
        // versions=true: one record per version (mesh get service through a sidecar), sorted by version.
        const perVersion = url.searchParams.get('versions');
        if (perVersion !== null && perVersion !== 'true' && perVersion !== 'false') throw badRequest(fe.errorId, `versions: ${shown(perVersion)} is not true or false`);
        if (perVersion === 'true') {
          sendJson(res, 200, stringifyJson([...live].sort(byVersion)));
          return;
        }
        sendJson(res, 200, stringifyJson(merged));
        return;
      }
      let list: Service[];
      try {
        list = await registry.listServices();
      } catch (err) {
        throw registryFailure(fe, 'listing services', err);
      }
      const sorted = [...new Set(list.map((s) => s.name))].sort();
      sendJson(res, 200, JSON.stringify(sorted.map((name) => ({ name }))));
      return;
    }
    case 'POST':
    case 'PUT': {
      const ttlMs = parseTtl(fe.errorId, url.searchParams);
      const service = await readServiceBody(fe, req);
      try {
        await registry.register(service, ttlMs ? { ttlMs } : undefined);
      } catch (err) {
        throw registryFailure(fe, `registering ${service.name}`, err);
      }
      log.info({ service: service.name, nodes: service.nodes.map((n) => n.id), ttlMs }, 'registered through the sidecar');
      sendJson(res, 200, '{}');
      return;
    }
    case 'DELETE': {
      if (url.searchParams.has('ttl')) {
        req.resume();
        throw badRequest(fe.errorId, 'ttl: not used by DELETE (it deregisters at once)');
      }
      const service = await readServiceBody(fe, req);
      try {
        await registry.deregister(service);
      } catch (err) {
        throw registryFailure(fe, `deregistering ${service.name}`, err);
      }
      log.info({ service: service.name, nodes: service.nodes.map((n) => n.id) }, 'deregistered through the sidecar');
      sendJson(res, 200, '{}');
      return;
    }
    default:
      req.resume();
      res.setHeader('allow', ALLOW);
      throw methodNotAllowed(fe.errorId, `method ${method} not allowed on /registry: use ${ALLOW}`);
  }
}
