/**
 * The files of `mesh new service`: a TypeScript service project on the public API of
 * @mesh-platform/mesh (runService), with its handler as a pure function and a test of it.
 */

export interface ServiceTemplate {
  /** Full service name, e.g. go.mesh.srv.hello. */
  name: string;
  /** npm package name of the project, e.g. hello. */
  packageName: string;
  /** Endpoint, e.g. Hello.Call. */
  endpoint: string;
  /** Path segment of the gateway's rpc handler, e.g. hello (go.mesh.srv.hello behind --namespace=go.mesh.srv). */
  path: string;
  /** The version range of @mesh-platform/mesh, e.g. ^0.1.0. */
  meshVersion: string;
  typescriptVersion: string;
  typesNodeVersion: string;
}

export function serviceFiles(t: ServiceTemplate): Record<string, string> {
  const packageJson = {
    name: t.packageName,
    version: '0.1.0',
    private: true,
    description: `The ${t.name} service`,
    type: 'module',
    engines: { node: '>=20.18.1' },
    scripts: {
      build: 'tsc -p tsconfig.json',
      start: 'node dist/src/main.js',
      test: 'tsc -p tsconfig.json && node --test dist/test/handler.test.js',
    },
    dependencies: { '@mesh-platform/mesh': t.meshVersion },
    devDependencies: { '@types/node': t.typesNodeVersion, typescript: t.typescriptVersion },
  };
  const tsconfig = {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noUncheckedIndexedAccess: true,
      esModuleInterop: true,
      skipLibCheck: true,
      sourceMap: true,
      types: ['node'],
      rootDir: '.',
      outDir: 'dist',
    },
    include: ['src', 'test'],
  };
  const [, method] = t.endpoint.split('.');
  const fn = method!.charAt(0).toLowerCase() + method!.slice(1);

  return {
    'package.json': JSON.stringify(packageJson, null, 2) + '\n',
    'tsconfig.json': JSON.stringify(tsconfig, null, 2) + '\n',
    '.gitignore': 'node_modules/\ndist/\n',
    'src/handler.ts': `/** The ${t.endpoint} endpoint of ${t.name}: a pure function, tested in test/handler.test.ts. */

export interface ${method}Request {
  name?: string;
}

export interface ${method}Response {
  msg: string;
}

export function ${fn}(req: ${method}Request): ${method}Response {
  const name = typeof req.name === 'string' && req.name.trim() !== '' ? req.name.trim() : 'world';
  return { msg: \`Hello \${name}\` };
}
`,
    'src/main.ts': `/**
 * The ${t.name} service. Every mesh flag works: npm start -- --registry=etcd --log_level=debug
 * (or MESH_REGISTRY=etcd in the environment); npx mesh help lists them.
 */
import { runService } from '@mesh-platform/mesh';
import { ${fn}, type ${method}Request, type ${method}Response } from './handler.js';

await runService((mesh) => {
  mesh.service({ name: '${t.name}' }).handle<${method}Request, ${method}Response>('${t.endpoint}', (req) => ${fn}(req));
});
`,
    'test/handler.test.ts': `import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ${fn} } from '../src/handler.js';

test('${t.endpoint} greets by name', () => {
  assert.deepEqual(${fn}({ name: 'John' }), { msg: 'Hello John' });
});

test('${t.endpoint} without a name greets the world', () => {
  assert.deepEqual(${fn}({}), { msg: 'Hello world' });
  assert.deepEqual(${fn}({ name: '  ' }), { msg: 'Hello world' });
});
`,
    'README.md': `# ${t.name}

A mesh service in TypeScript, on [@mesh-platform/mesh](https://www.npmjs.com/package/@mesh-platform/mesh).
It answers \`${t.endpoint}\`: \`{"name":"John"}\` → \`{"msg":"Hello John"}\`.

| File | What |
|---|---|
| \`src/handler.ts\` | the endpoint, a pure function |
| \`src/main.ts\` | the process: \`runService\` registers the service and serves it |
| \`test/handler.test.ts\` | the test of the handler (node:test) |

## Run it

\`\`\`sh
npm install
npm run build
npm start            # ${t.name} listening on 127.0.0.1:PORT (...), admin on 127.0.0.1:PORT
\`\`\`

Every mesh flag works, after \`--\`: \`npm start -- --log_level=debug\`, or in the environment as
\`MESH_<NAME>\` (\`MESH_LOG_LEVEL=debug npm start\`). \`npx mesh help\` lists them.

## Call it

In another terminal (the service and the CLI share the local registry in \`~/.mesh\`, or
\`$MESH_HOME\`):

\`\`\`sh
npx mesh list services
npx mesh call ${t.name} ${t.endpoint} '{"name":"John"}'
# {
#   "msg": "Hello John"
# }
\`\`\`

Through the API gateway:

\`\`\`sh
npx mesh api --handler=rpc --namespace=${t.name.slice(0, t.name.length - t.path.length - 1) || 'go.mesh.srv'}     # :8080
curl -XPOST localhost:8080/${t.path}/${method!.toLowerCase()} -H 'content-type: application/json' -d '{"name":"John"}'
# {"msg":"Hello John"}
\`\`\`

or, with the gateway's defaults (in place of the one above), through its \`/rpc\` path:

\`\`\`sh
npx mesh api                                                                  # :8080
curl -XPOST localhost:8080/rpc -H 'content-type: application/json' \\
  -d '{"service":"${t.name}","method":"${t.endpoint}","request":{"name":"John"}}'
# {"msg":"Hello John"}
\`\`\`

## Test it

\`\`\`sh
npm test
\`\`\`
`,
  };
}
