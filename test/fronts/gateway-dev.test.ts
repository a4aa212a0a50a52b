/** `mesh dev` (npm start) runs the gateway with the example services and prints what to try. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { startProcess, tempDir } from '../helpers.js';
import { http } from '../fixtures/gateway-helpers.js';

it('mesh dev: the three-tier example and /rpc answer through the gateway it starts', async () => {
  const dir = tempDir('mesh-dev-');
  // MESH_HOME too: mesh dev makes its mesh CA there (--mtls=strict by default).
  const dev = startProcess(['dev', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0', '--sidecar_address=127.0.0.1:0', `--registry_address=${dir.path}`, '--log_level=warning'], { MESH_HOME: dir.path });
  try {
    await dev.waitForOutput(/Ctrl-C stops everything/, 15000);
    const port = await dev.waitForPort(/gateway: +\S+ \(listening on \S+:(\d+)\)/);
    const admin = await dev.waitForPort(/admin: +http:\/\/\S+:(\d+)\/help/);
    const out = dev.output();
    assert.match(out, new RegExp(`gateway: +http://127\\.0\\.0\\.1:${port}`));
    assert.ok(out.includes(`curl '127.0.0.1:${port}/greeter/say/hello?name=John'`), out);
    assert.ok(out.includes(`curl -XPOST 127.0.0.1:${port}/rpc -d '{"service":"go.mesh.srv.greeter","method":"Say.Hello","request":{"name":"John"}}' -H 'content-type: application/json'`), out);
    const hello = await http('GET', `http://127.0.0.1:${port}/greeter/say/hello?name=John`);
    assert.equal(hello.status, 200, hello.text);
    assert.deepEqual(hello.json(), { message: 'Hello John' });
    // mesh dev shows the requests it serves: an access log line on stdout, in the default format.
    await dev.waitForOutput(/^\[\S+Z\] "GET \/greeter\/say\/hello\?name=John HTTP\/1\.1" 200 - 0 \d+ \d+ - "-" "-" "-" "127\.0\.0\.1:\d+" "127\.0\.0\.1:\d+" go\.mesh\.api\.greeter$/m);
    const rpc = await http('POST', `http://127.0.0.1:${port}/rpc`, {
      headers: { 'content-type': 'application/json' },
      body: '{"service":"go.mesh.srv.greeter","method":"Say.Hello","request":{"name":"John"}}',
    });
    assert.deepEqual(rpc.json(), { msg: 'Hello John' });
    const routes = await http('GET', `http://127.0.0.1:${admin}/routes`);
    assert.equal(routes.status, 200);
    assert.equal(routes.json()[0].route_config_name, 'go.mesh.api');
    assert.equal(await dev.stop(), 0);
  } finally {
    await dev.stop();
    dir.cleanup();
  }
});
