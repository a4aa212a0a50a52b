/**
 * The API service of the gateway's api-handler row: a framework service, go.mesh.api.bench,
 * endpoint Bench.Call. It takes the gateway's API Request, calls the backend
 * (go.mesh.srv.bench Bench.Call) with the request body by RPC, and answers an API Response
 * carrying the backend's JSON, as examples/greeter.ts does.
 * Usage: node --import tsx bench/servers/api-service.ts --address=127.0.0.1:PORT --registry_address=DIR
 */
import { Runtime } from '../../src/runtime.js';
import { parseArgs } from '../../src/cli/flags.js';
import { Service } from '../../src/server/service.js';
import { apiTypes } from '../../src/codec/api-proto.js';
import { API_SERVICE, BACKEND_SERVICE } from '../lib/payload.js';

interface ApiRequest {
  body?: string;
}

const args = parseArgs(process.argv.slice(2));
const runtime = new Runtime(args.config, { role: 'bench-api' });
runtime.installSignalHandlers();
const types = apiTypes();
const header = { 'Content-Type': { key: 'Content-Type', values: ['application/json'] } };

await new Service(runtime, { name: API_SERVICE, address: args.config.address })
  .handle({
    name: 'Bench.Call',
    requestType: types.Request,
    responseType: types.Response,
    handler: async (req: ApiRequest, ctx) => {
      const answer = await runtime.client.call(BACKEND_SERVICE, 'Bench.Call', Buffer.from(req.body || '{}'), {
        timeoutMs: ctx.deadline - Date.now(),
        id: ctx.id,
      });
      return { statusCode: 200, header, body: answer.body.toString('utf8') };
    },
  })
  .start();
