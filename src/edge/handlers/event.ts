/**
 * The event handler: `/<topic>/<event>` publishes an Event `{name, id, timestamp, header, data}`
 * (proto/api.proto) as JSON to topic `<namespace>.<topic>`; `data` is the request body, or for GET
 * the query as a JSON object. 200 once the broker took it; 400 for a topic the brokers' name rule
 * refuses (src/engines/broker/names.ts); 503 when the broker could not take it. A request that
 * is a CloudEvent (structured or binary mode, src/edge/handlers/cloudevents.ts) is published as that
 * CloudEvent instead.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import { randomUUID } from 'node:crypto';
import { badRequest, serviceUnavailable } from '../../base/errors.js';
import { nameProblem } from '../../engines/broker/names.js';
import { readBody } from '../../base/http/body.js';
import { sendJson } from '../../base/http/respond.js';
import { headerPairs, type PairMap } from './api.js';
import { queryObject, type EdgeHandlerContext } from './front-end.js';
import { cloudEventMessage, cloudEventMode } from './cloudevents.js';

export interface EventMessage {
  name: string;
  id: string;
  timestamp: number;
  header: PairMap;
  data: string;
}

export async function handleEvent(fe: EdgeHandlerContext, target: { topic: string; name: string }, req: FrontRequest, res: FrontResponse): Promise<void> {
  // The brokers' one name rule, before the body is read: a 400, not a publish that fails.
  const problem = nameProblem('topic', target.topic);
  if (problem) throw badRequest(fe.errorId, problem);
  const ce = cloudEventMode(req);
  if (ce) {
    const raw = req.method === 'GET' || req.method === 'HEAD' ? (req.resume(), Buffer.alloc(0)) : await readBody(req, fe.maxBodyBytes, fe.errorId);
    const { header, id } = cloudEventMessage(fe.errorId, ce, req, raw);
    header['mesh-topic'] = target.topic;
    header['mesh-event'] = target.name;
    try {
      await fe.edge.broker.publish(target.topic, { header, body: raw });
    } catch (err) {
      throw serviceUnavailable(fe.errorId, `publishing to ${target.topic}: ${(err as Error).message}`);
    }
    sendJson(res, 200, JSON.stringify({ id, topic: target.topic, name: target.name }));
    return;
  }
  const body = req.method === 'GET' || req.method === 'HEAD' ? (req.resume(), undefined) : await readBody(req, fe.maxBodyBytes, fe.errorId);
  const event: EventMessage = {
    name: target.name,
    id: randomUUID(),
    timestamp: Math.floor(Date.now() / 1000),
    header: headerPairs(req),
    data: body === undefined ? JSON.stringify(queryObject(req)) : body.toString('utf8'),
  };
  try {
    await fe.edge.publish(target.topic, {
      header: { 'content-type': 'application/json', 'mesh-topic': target.topic, 'mesh-event': target.name, 'mesh-id': event.id },
      body: Buffer.from(JSON.stringify(event)),
    });
  } catch (err) {
    throw serviceUnavailable(fe.errorId, `publishing to ${target.topic}: ${(err as Error).message}`);
  }
  sendJson(res, 200, JSON.stringify({ id: event.id, topic: target.topic, name: event.name }));
}
