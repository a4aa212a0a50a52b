/** `mesh dev` / `npm start`: the demo on the embedded default, with what to try printed. */
import type { ParsedArgs } from './flags.js';
import { Runtime } from '../runtime.js';
import { greeterApi, greeterBackend } from '../../examples/greeter.js';

export async function runDev(args: ParsedArgs): Promise<number> {
  const runtime = new Runtime(args.config, { role: 'dev' });
  runtime.installSignalHandlers();
  const admin = await runtime.startAdmin('127.0.0.1:9901');
  const backend = greeterBackend(runtime);
  const api = greeterApi(runtime);
  await backend.start();
  await api.start();
  const home = args.config.registry === 'local' ? ` (registry: ${args.config.registry_address ?? process.env.MESH_HOME ?? '~/.mesh'})` : '';
  process.stdout.write(
    [
      `mesh dev is running${home}.`,
      `  services: go.mesh.srv.greeter, go.mesh.api.greeter`,
      admin ? `  admin:    http://${admin.host}:${admin.port}/help` : '  admin:    off',
      '',
      'Try, in another terminal:',
      '  npx mesh list services',
      admin ? `  curl http://${admin.host}:${admin.port}/clusters` : '',
      `  npx mesh call go.mesh.srv.greeter Say.Hello '{"name":"John"}'`,
      '',
      'Ctrl-C stops everything.',
      '',
    ].join('\n'),
  );
  return -1; // keep running until a signal
}
