/**
 * The greeter of `mesh dev` and of examples/, written against the public API only:
 *  - go.mesh.srv.greeter, a backend: Say.Hello {name} -> {msg: "Hello <name>"}
 *  - go.mesh.api.greeter, an API service: Say.Hello takes the gateway's API Request, calls the
 *    backend and answers an API Response.
 */
import { MeshError, apiTypes, type Mesh, type Service } from '../index.js';

export function greeterBackend(mesh: Mesh, address?: string): Service {
  return mesh.service({ name: 'go.mesh.srv.greeter', address }).handle('Say.Hello', (req: { name?: unknown }) => {
    if (req.name !== undefined && typeof req.name !== 'string') throw new MeshError('go.mesh.srv.greeter', 400, 'name: must be a string');
    return { msg: `Hello ${req.name ?? ''}` };
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

export function greeterApi(mesh: Mesh, address?: string): Service {
  const types = apiTypes();
  return mesh.service({ name: 'go.mesh.api.greeter', address }).handle<ApiRequest>(
    'Say.Hello',
    async (req) => {
      let name = req.get?.name?.values?.[0] ?? req.post?.name?.values?.[0];
      if (name === undefined && req.body) {
        try {
          name = (JSON.parse(req.body) as { name?: string }).name;
        } catch {
          throw new MeshError('go.mesh.api.greeter', 400, 'body: not JSON; send {"name": "..."} or ?name=');
        }
      }
      if (!name) throw new MeshError('go.mesh.api.greeter', 400, 'name: required (query ?name= or JSON body)');
      // Inside a handler, a call carries what remains of the inbound deadline, its Mesh-Id,
      // metadata and trace by itself.
      const answer = await mesh.call<{ msg: string }>('go.mesh.srv.greeter', 'Say.Hello', { name });
      return {
        statusCode: 200,
        header: { 'Content-Type': { key: 'Content-Type', values: ['application/json'] } },
        body: JSON.stringify({ message: answer.msg }),
      };
    },
    { requestType: types.Request, responseType: types.Response },
  );
}
