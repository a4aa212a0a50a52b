import { runService } from '@mesh-platform/mesh';

await runService((mesh) => {
  const svc = mesh.service({ name: 'go.mesh.srv.greeter' });
  svc.handle('Greeter.SayHello', (req) => ({ message: `Hello ${req.name}` }));
});
