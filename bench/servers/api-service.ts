/**
 * The API service of the gateway's api-handler row: a framework service, go.mesh.api.bench,
 * endpoint Bench.Call. It takes the gateway's API Request, calls the backend
 * (go.mesh.srv.bench Bench.Call) with the request body by RPC, and answers an API Response
 * carrying the backend's JSON, as examples/greeter.ts does.
 *
 * The framework is loaded from dist/ (what `npm run build` emits and `mesh` runs), like the
 * gateway it is measured with: through tsx, every closure the framework creates per request
 * (readBody's listeners, the client's callbacks) would also pay for esbuild's keepNames wrapper
 * (`__name`, an Object.defineProperty per closure), which is not the framework's cost. Falls back
 * to src/ when dist/ is not built.
 * Usage: node --import tsx bench/servers/api-service.ts --address=127.0.0.1:PORT --registry_address=DIR
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { API_SERVICE, BACKEND_SERVICE } from '../lib/payload.js';

type Framework = typeof import('../../src/process/runtime.js') &
  typeof import('../../src/cli/flags.js') &
  typeof import('../../src/cli/options.js') &
  typeof import('../../src/framework/server/service.js') &
  typeof import('../../src/base/codec/api-proto.js');

/** The modules the service needs, by layout: today's, and the one before src/ was grouped by part (an older base build). */
const LAYOUTS = [
  ['process/runtime', 'cli/flags', 'cli/options', 'framework/server/service', 'base/codec/api-proto'],
  ['runtime', 'cli/flags', 'cli/options', 'server/service', 'codec/api-proto'],
] as const;

async function loadFramework(): Promise<Framework> {
  // BENCH_FRAMEWORK_SRC: another build's dist/src/ (the base build of an A/B run), of either layout.
  const given = process.env.BENCH_FRAMEWORK_SRC;
  const dist = given ? pathToFileURL(join(given, '/')) : new URL('../../dist/src/', import.meta.url);
  const built = LAYOUTS.find((l) => existsSync(fileURLToPath(new URL(`${l[3]}.js`, dist))));
  if (given && !built) throw new Error(`BENCH_FRAMEWORK_SRC=${given}: no framework/server/service.js (or server/service.js) there`);
  const base = built ? dist : new URL('../../src/', import.meta.url);
  const ext = built ? '.js' : '.ts';
  const load = (path: string) => import(new URL(path + ext, base).href) as Promise<Partial<Framework>>;
  const parts = await Promise.all((built ?? LAYOUTS[0]).map(load));
  return Object.assign({}, ...parts) as Framework;
}

interface ApiRequest {
  body?: string;
}

const { Runtime, parseArgs, optionsFromFlags, Service, apiTypes } = await loadFramework();
const args = parseArgs(process.argv.slice(2));
const runtime = new Runtime(optionsFromFlags(args.config), { role: 'bench-api' });
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
