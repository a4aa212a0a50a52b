/**
 * Runs the API service go.mesh.api.greeter: `npx tsx examples/greeter-api.ts [mesh flags]`.
 * Examples run from the repository, so they import the entry point by its path; your code
 * imports it by the package name: `import { runService } from '@mesh-platform/mesh'`.
 */
import { runService } from '../src/index.js';
import { greeterApi } from './greeter.js';

await runService((mesh) => {
  greeterApi(mesh);
});
