/** Runs the API service go.mesh.api.greeter: `node dist/examples/greeter-api.js [mesh flags]`. */
import { serveMain } from '../src/server/main.js';
import { greeterApi } from './greeter.js';

await serveMain(process.argv.slice(2), (runtime, address) => [greeterApi(runtime, address)]);
