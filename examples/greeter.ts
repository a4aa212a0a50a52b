/**
 * The example services of SPEC 4.4's three tiers:
 *  - go.mesh.srv.greeter, a backend: Say.Hello {name} -> {msg: "Hello <name>"}
 *  - go.mesh.api.greeter, an API service: Say.Hello takes the gateway's API Request, calls the
 *    backend and answers an API Response.
 */
import type { Runtime } from '../src/runtime.js';
import { Service } from '../src/server/service.js';
import { MeshError } from '../src/errors.js';
import { apiTypes } from '../src/codec/api-proto.js';

export function greeterBackend(runtime: Runtime, address?: string): Service {
  return new Service(runtime, { name: 'go.mesh.srv.greeter', address }).handle({
    name: 'Say.Hello',
    handler: (req: { name?: unknown }) => {
      if (req.name !== undefined && typeof req.name !== 'string') throw new MeshError('go.mesh.srv.greeter', 400, 'name: must be a string');
      return { msg: `Hello ${req.name ?? ''}` };
    },
  });
}

interface Pair {
  key: string;
  values: string[];
}
interface ApiRequest {
  method: string;
  get?: Record<string, Pair>;
  post?: Record<string, Pair>;
  body?: string;
}

export function greeterApi(runtime: Runtime, address?: string): Service {
  const types = apiTypes();
  return new Service(runtime, { name: 'go.mesh.api.greeter', address }).handle({
    name: 'Say.Hello',
    requestType: types.Request,
    responseType: types.Response,
    handler: async (req: ApiRequest, ctx) => {
      let name = req.get?.name?.values?.[0] ?? req.post?.name?.values?.[0];
      if (name === undefined && req.body) {
        try {
          name = (JSON.parse(req.body) as { name?: string }).name;
        } catch {
          throw new MeshError('go.mesh.api.greeter', 400, 'body: not JSON; send {"name": "..."} or ?name=');
        }
      }
      if (!name) throw new MeshError('go.mesh.api.greeter', 400, 'name: required (query ?name= or JSON body)');
      const answer = await runtime.client.callValue<{ msg: string }>('go.mesh.srv.greeter', 'Say.Hello', { name }, {
        timeoutMs: ctx.deadline - Date.now(),
        id: ctx.id,
      });
      return {
        statusCode: 200,
        header: { 'Content-Type': { key: 'Content-Type', values: ['application/json'] } },
        body: JSON.stringify({ message: answer.msg }),
      };
    },
  });
}
