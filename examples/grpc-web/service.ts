/**
 * The gRPC service of the gRPC-Web example (README.md beside it): a framework service serving
 * helloworld.Greeter of greeter.proto over gRPC, registered as go.mesh.srv.greeter.
 *
 *   npx tsx examples/grpc-web/service.ts --server_protocol=grpc --proto_path=examples/grpc-web
 *
 * Examples run from the repository, so they import the entry point by its path; your code
 * imports it by the package name: `import { runService, MeshError } from '@mesh-platform/mesh'`.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { MeshError, runService } from '../../src/index.js';

await runService((mesh) => {
  const svc = mesh.service({ name: 'go.mesh.srv.greeter' });
  svc.handle('Greeter.SayHello', (req: { name: string }) => {
    if (!req.name) throw new MeshError('go.mesh.srv.greeter', 400, 'name is empty');
    return { message: `Hello ${req.name}` };
  });
  svc.stream(
    'Greeter.Count',
    async function* (req: { name: string; n: number }, ctx) {
      for (let i = 1; i <= req.n; i++) {
        if (i > 1) await sleep(100, undefined, { signal: ctx.signal });
        yield { message: `Hello ${req.name} #${i}` };
      }
    },
    { kind: 'server' },
  );
});
