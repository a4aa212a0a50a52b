/**
 * `Connection:` cannot strip the edge's identity. A client with a valid API key that sends
 * `Connection: keep-alive, Mesh-Auth-Subject, Mesh-Auth-Scopes` still reaches the backend as
 * itself: the edge's Mesh-Auth-* headers are never nominated away (the hop-by-hop removal runs on
 * what the client sent, the edge's headers are the edge's). Through a real `mesh api` process with
 * --auth=key: the proxy handler (a plain node:http backend that records the headers it got) and
 * POST /rpc (a framework service that answers with the metadata it saw).
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRegistry } from '../../src/engines/registry/create.js';
import type { Registry } from '../../src/engines/registry/registry.js';
import { http, tempDir } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';
import { startWho, type ServiceProcess } from '../reliability/harness.js';

const KEY = 'k-0123456789abcdef-billing';
const NOMINATING = 'keep-alive, Mesh-Auth-Subject, Mesh-Auth-Scopes, X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, traceparent, X-Drop-Me';

describe('Connection cannot remove the headers the edge sets', () => {
  const dir = tempDir('mesh-connection-header-');
  let registry: Registry;
  let app: PlainApp;
  let who: ServiceProcess;
  let gw: GatewayProcess;

  before(async () => {
    registry = createRegistry('local', dir.path);
    const keys = join(dir.path, 'keys.txt');
    writeFileSync(keys, `${KEY} billing read,write\n`);
    [app, who] = await Promise.all([startPlainApp('plain'), startWho(dir.path)]);
    await registerPlain(registry, 'go.mesh.api.plain', app.port);
    gw = await startGatewayProcess(dir.path, ['--handler=proxy', '--auth=key', `--auth_keys=${keys}`]);
  });

  after(async () => {
    await Promise.all([gw?.stop(), who?.proc.stop()]);
    await app?.close();
    await registry?.close();
    dir.cleanup();
  });

  it('proxy handler: the backend sees the subject, the scopes, X-Forwarded-* and traceparent; other nominated headers go', async () => {
    const r = await http('GET', `${gw.url}/plain/whoami`, {
      headers: { authorization: `Bearer ${KEY}`, connection: NOMINATING, 'x-drop-me': 'hop', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    });
    assert.equal(r.status, 200, r.text);
    const seen = app.received.at(-1)!.headers;
    assert.equal(seen['mesh-auth-subject'], 'billing');
    assert.equal(seen['mesh-auth-scopes'], 'read write');
    assert.equal(seen['x-forwarded-for'], '127.0.0.1');
    assert.equal(seen['x-forwarded-proto'], 'http');
    assert.equal(seen['x-forwarded-host'], `127.0.0.1:${gw.port}`);
    assert.match(String(seen['traceparent']), /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    assert.equal(seen['x-drop-me'], undefined);
    assert.equal(seen['authorization'], undefined);
  });

  it('POST /rpc: the framework service sees the subject and scopes in its metadata', async () => {
    const r = await http('POST', `${gw.url}/rpc`, {
      headers: { authorization: `Bearer ${KEY}`, connection: NOMINATING, 'content-type': 'application/json' },
      body: JSON.stringify({ service: 'go.mesh.srv.who', method: 'Who.Caller', request: {} }),
    });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json(), { subject: 'billing', scopes: 'read write' });
  });
});
