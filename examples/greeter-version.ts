/**
 * A backend of a given version, for the canary walk-through of docs/routing.md:
 * `VERSION=v2 npx tsx examples/greeter-version.ts [mesh flags]` registers go.mesh.srv.canary,
 * version v2: Say.Hello {name} -> {msg: "Hello <name> from v2"}.
 */
import { runService } from '../src/index.js';

const version = process.env.VERSION ?? 'v1';

await runService((mesh) => {
  mesh.service({ name: 'go.mesh.srv.canary', version }).handle('Say.Hello', (req: { name?: string }) => ({ msg: `Hello ${req.name ?? ''} from ${version}` }));
});
