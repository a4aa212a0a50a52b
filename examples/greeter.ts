/**
 * The example services of the three tiers (backend, API service, gateway). Their code lives in
 * src/demo/greeter.ts, because `mesh dev` runs them from the installed package; it uses the public
 * API only (`import { ... } from '@mesh-platform/mesh'` in your own code).
 */
export { greeterBackend, greeterApi } from '../src/demo/greeter.js';
