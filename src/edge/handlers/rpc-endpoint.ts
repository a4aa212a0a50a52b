/**
 * `POST /rpc` on the gateway and the sidecar (SPEC 2.8, DESIGN 6): form fields or a JSON object
 * with `service`, `method` (or `endpoint`), `request` (an object or a string holding JSON) and
 * optional `address` (host:port) to call one node. Keys are matched case-insensitively.
 *
 * A WebSocket upgrade at `/rpc?service=S&endpoint=E` (or `method=E`) opens a streaming call of
 * that endpoint, served like one at its own path (src/edge/handlers/stream.ts), with the same checks as
 * `POST /rpc`: the services `allowed`, then the auth rules for that service and endpoint.
 */
import type { IncomingMessage } from 'node:http';
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { Duplex } from 'node:stream';
import { asFrontEndError, badRequest, forbidden, MeshError, methodNotAllowed, unsupportedMediaType } from '../../base/errors.js';
import { mediaType } from '../../base/codec/codec.js';
import { JsonDepthError, parseJson, stringifyJson } from '../../base/codec/json.js';
import { readBody } from '../../base/http/body.js';
import { refuseSocket, sendBytes, sendError } from '../../base/http/respond.js';
import { callOptionsFrom, queryObject, type EdgeHandlerContext } from './front-end.js';
import type { RpcRoute } from './resolve.js';
import type { StreamSockets } from './stream.js';
import { tryParseAddress } from '../../base/util/address.js';
import { endpointNameProblem } from '../../core/transport/endpoint.js';

export interface RpcCall {
  service: string;
  method: string;
  request: Buffer;
  address?: string;
}

/** Parses and validates the body of POST /rpc; throws a 400 naming the problem. */
export function parseRpcCall(errorId: string, contentType: string | undefined, body: Buffer): RpcCall {
  const media = mediaType(contentType);
  const fields: Record<string, unknown> = {};
  if (media === 'application/json' || media === '') {
    let parsed: unknown;
    try {
      parsed = parseJson(body.toString('utf8') || '{}');
    } catch (err) {
      if (err instanceof JsonDepthError) throw badRequest(errorId, `body: ${err.message}`);
      throw badRequest(errorId, `malformed JSON body: ${(err as Error).message}`);
    }
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw badRequest(errorId, 'body: must be a JSON object');
    for (const [k, v] of Object.entries(parsed)) fields[k.toLowerCase()] = v;
  } else if (media === 'application/x-www-form-urlencoded') {
    for (const [k, v] of new URLSearchParams(body.toString('utf8'))) if (!(k.toLowerCase() in fields)) fields[k.toLowerCase()] = v;
  } else {
    throw unsupportedMediaType(errorId, `unsupported content type ${media}: use application/json or a form`);
  }
  const { service, method } = rpcTarget(errorId, fields);
  let request: unknown = fields.request ?? {};
  if (typeof request === 'string') {
    try {
      request = request.trim() === '' ? {} : parseJson(request);
    } catch (err) {
      if (err instanceof JsonDepthError) throw badRequest(errorId, `request: ${err.message}`);
      throw badRequest(errorId, `request: not valid JSON: ${(err as Error).message}`);
    }
  }
  if (request === null || typeof request !== 'object' || Array.isArray(request)) throw badRequest(errorId, 'request: must be a JSON object');
  const address = fields.address;
  if (address !== undefined && address !== '' && (typeof address !== 'string' || !tryParseAddress(address, { target: true })))
    throw badRequest(errorId, 'address: must be host:port');
  return { service, method, request: Buffer.from(stringifyJson(request)), address: address ? (address as string) : undefined };
}

/** The service and method named by /rpc's fields (lower-case keys); throws a 400 naming the problem. */
function rpcTarget(errorId: string, fields: Record<string, unknown>): { service: string; method: string } {
  const service = fields.service;
  if (typeof service !== 'string' || service.trim() === '') throw badRequest(errorId, 'service: required');
  const method = fields.method ?? fields.endpoint;
  if (typeof method !== 'string' || method.trim() === '') throw badRequest(errorId, 'method: required (or endpoint)');
  const problem = endpointNameProblem(method);
  if (problem) throw badRequest(errorId, `method: ${problem}`);
  return { service: service.trim(), method };
}

/** The 403 of a service that /rpc may not call (--rpc_allow). */
function notAllowed(errorId: string, service: string): MeshError {
  return forbidden(errorId, `service ${service.length > 200 ? `${service.slice(0, 200)}...` : service} may not be called through /rpc (--rpc_allow)`);
}

/**
 * `allowed`: the services /rpc may call (the gateway's `--rpc_allow`); another service is refused
 * with 403 before anything is sent to it.
 */
export async function handleRpcEndpoint(fe: EdgeHandlerContext, req: FrontRequest, res: FrontResponse, allowed?: (service: string) => boolean): Promise<void> {
  if (req.method !== 'POST') {
    req.resume();
    res.setHeader('allow', 'POST');
    throw methodNotAllowed(fe.errorId, `method ${req.method} not allowed on /rpc: use POST`);
  }
  const body = await readBody(req, fe.maxBodyBytes, fe.errorId);
  const call = parseRpcCall(fe.errorId, req.headers['content-type'], body);
  const routed = fe.routeCall?.(req, call.service, call.method);
  if (routed) {
    call.service = routed.service;
    // The rule takes the call: its stats, access log name and fault.
    const started = routed.policy.effects?.begin(req, res, fe.errorId);
    if (started) await started;
  }
  if (allowed && !allowed(call.service)) throw notAllowed(fe.errorId, call.service);
  const authorized = fe.authorizeCall?.(req, res, call.service, call.method);
  if (authorized) await authorized;
  try {
    const answer = await fe.edge.client.call(call.service, call.method, call.request, {
      ...callOptionsFrom(req, undefined, undefined, routed?.policy),
      contentType: 'application/json',
      address: call.address,
    });
    sendBytes(res, 200, 'application/json', answer.body);
  } catch (err) {
    sendError(res, asFrontEndError(err, fe.errorId));
  }
}

/** What a WebSocket at /rpc serves instead of a unary endpoint. */
const UNARY_AT_RPC = 'a WebSocket at /rpc opens streaming calls only (call it with POST /rpc)';

/**
 * A WebSocket upgrade at `/rpc?service=S&endpoint=E`, after the front end's own checks (Host,
 * token, credential): refused before the handshake with error JSON (400 a missing or bad field, 403
 * a service not `allowed` or denied by the auth rules, 404 an unknown service or a unary endpoint),
 * otherwise the stream runs on the socket as at the endpoint's path.
 */
export async function handleRpcStreamUpgrade(fe: EdgeHandlerContext, streams: StreamSockets, req: IncomingMessage, socket: Duplex, head: Buffer, allowed?: (service: string) => boolean): Promise<void> {
  let route: RpcRoute;
  try {
    const fields: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(queryObject(req))) fields[k.toLowerCase()] = Array.isArray(v) ? v[0] : v;
    const { service, method } = rpcTarget(fe.errorId, fields);
    if (allowed && !allowed(service)) throw notAllowed(fe.errorId, service);
    const authorized = fe.authorizeCall?.(req, undefined, service, method);
    if (authorized) await authorized;
    route = { service, method };
  } catch (err) {
    refuseSocket(socket, err, fe.errorId, { linger: false });
    return;
  }
  return streams.upgrade(route, req, socket, head, UNARY_AT_RPC);
}
