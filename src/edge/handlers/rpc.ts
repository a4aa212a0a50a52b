/**
 * The rpc handler (gateway `--handler=rpc`, sidecar `/<service>/<method>`): JSON or protobuf
 * bodies pass through to the backend untouched (a JSON body nested deeper than MAX_JSON_DEPTH is
 * refused with 400 first); a GET query becomes a JSON object. The answer's
 * Content-Type is the codec's, never copied from the request.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { asFrontEndError, badRequest, routedError, unsupportedMediaType } from '../../base/errors.js';
import { mediaType } from '../../base/codec/codec.js';
import { JsonDepthError, jsonNestingExceeds } from '../../base/codec/json.js';
import { readBody } from '../../base/http/body.js';
import { sendBytes, sendError } from '../../base/http/respond.js';
import { callOptionsFrom, queryObject, type EdgeHandlerContext } from './front-end.js';
import type { RoutePolicy } from '../routes/effects.js';
import type { RpcRoute } from './resolve.js';
import type { CallContext } from '../../base/util/call-context.js';

const PASS_THROUGH = new Set(['application/json', 'application/protobuf', 'application/x-protobuf', 'application/proto']);

/**
 * `ctx`: the request's call context, when the front end passes it explicitly (else the ambient
 * one); `policy`: what a route of the route file adds (a version, timeouts).
 */
export async function handleRpc(fe: EdgeHandlerContext, route: RpcRoute, req: FrontRequest, res: FrontResponse, ctx?: CallContext, policy?: RoutePolicy): Promise<void> {
  const media = mediaType(req.headers['content-type']);
  let contentType: string;
  let body: Uint8Array;
  if (req.method === 'GET' || req.method === 'HEAD' || req.method === 'DELETE') {
    // A query is the request; a body, if any, is not read.
    req.resume();
    contentType = 'application/json';
    body = Buffer.from(JSON.stringify(queryObject(req)));
  } else {
    if (media !== '' && !PASS_THROUGH.has(media)) {
      req.resume();
      throw unsupportedMediaType(fe.errorId, `unsupported content type ${media}: use application/json or application/protobuf`);
    }
    contentType = media === '' || media === 'application/json' ? 'application/json' : 'application/protobuf';
    body = await readBody(req, fe.maxBodyBytes, fe.errorId);
    if (body.byteLength === 0 && contentType === 'application/json') body = Buffer.from('{}');
    // The body passes through undecoded; the service would refuse it anyway: say so here, with a
    // scan, not a parse.
    else if (contentType === 'application/json' && jsonNestingExceeds(body)) throw badRequest(fe.errorId, `body: ${new JsonDepthError().message}`);
  }
  try {
    const answer = await fe.edge.client.call(route.service, route.method, body, callOptionsFrom(req, contentType, ctx, policy));
    sendBytes(res, 200, contentType, answer.body);
  } catch (err) {
    sendError(res, policy ? routedError(err, fe.errorId) : asFrontEndError(err, fe.errorId));
  }
}
