/**
 * Runs the backend go.mesh.srv.greeter: `npx tsx examples/greeter-srv.ts [mesh flags]`.
 * Examples run from the repository, so they import the entry point by its path; your code
 * imports it by the package name: `import { runService } from '@mesh-platform/mesh'`.
 */
import { runService } from '../src/index.js';
import { greeterBackend } from './greeter.js';

await runService((mesh) => {
  greeterBackend(mesh);
});
