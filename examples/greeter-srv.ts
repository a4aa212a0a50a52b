/** Runs the backend go.mesh.srv.greeter: `node dist/examples/greeter-srv.js [mesh flags]`. */
import { serveMain } from '../src/server/main.js';
import { greeterBackend } from './greeter.js';

await serveMain(process.argv.slice(2), (runtime, address) => [greeterBackend(runtime, address)]);
