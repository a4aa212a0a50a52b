/**
 * The JWKS URL's timings as flags (docs/security.md): --auth_jwks_timeout bounds what a hanging
 * URL costs the request with a new kid (401 once it has passed, the fetch failure logged with the
 * bound), --auth_jwks_cooldown spaces the fetches for unknown kids, --auth_jwks_refresh makes the
 * keys be fetched again once older. Real `mesh api` processes; a JWKS server on loopback that can
 * be told to hang.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { createRegistry } from '../../src/engines/registry/create.js';
import { http, listenLoopback, runCli, tempDir, waitFor } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

describe('JWKS URL timings', () => {
  const dir = tempDir('mesh-jwks-');
  const keys: Record<string, { privateKey: CryptoKey; publicKey: CryptoKey }> = {};
  let plain: PlainApp;
  let closeJwks: () => Promise<void>;
  let jwksUrl = '';
  let fetches = 0;
  let hang = false;
  const held: ServerResponse[] = [];
  let gw: GatewayProcess;
  let refreshing: GatewayProcess;

  const token = (kid: string) => new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid }).setSubject('alice').setExpirationTime('5m').sign(keys[kid]!.privateKey);
  const get = (g: GatewayProcess, kid: string) => token(kid).then((t) => http('GET', `${g.url}/plain/echo/call`, { headers: { authorization: `Bearer ${t}` } }));

  before(async () => {
    for (const kid of ['k1', 'k2']) keys[kid] = await generateKeyPair('ES256', { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(keys.k1!.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] };
    const server = createServer((_req, res) => {
      fetches++;
      if (hang) {
        held.push(res); // never answered: a JWKS URL that hangs
        return;
      }
      const body = JSON.stringify(jwks);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    });
    const l = await listenLoopback(server);
    closeJwks = l.close;
    jwksUrl = `http://127.0.0.1:${l.port}/jwks.json`;
    plain = await startPlainApp('plain');
    await registerPlain(createRegistry('local', dir.path), 'go.mesh.api.plain', plain.port);
    const common = ['--handler=rpc', '--auth=jwt', `--auth_jwks=${jwksUrl}`];
    gw = await startGatewayProcess(dir.path, [...common, '--auth_jwks_timeout=300ms', '--auth_jwks_cooldown=0s'], { MESH_LOG_LEVEL: 'warning' });
    refreshing = await startGatewayProcess(dir.path, [...common, '--auth_jwks_refresh=20ms']);
    // Both fetched at start.
    await waitFor(() => fetches >= 2);
  });

  after(async () => {
    await Promise.all([gw?.stop(), refreshing?.stop()]);
    await plain?.close();
    await closeJwks?.();
    dir.cleanup();
  });

  it('a hanging URL costs a new kid --auth_jwks_timeout: 401 once it passed, the failure logged with the bound; known keys still verify', async () => {
    assert.equal((await get(gw, 'k1')).status, 200);
    hang = true;
    const before = fetches;
    const r = await get(gw, 'k2');
    assert.equal(r.status, 401);
    assert.equal(r.text, JSON.stringify({ id: 'go.mesh.auth', code: 401, detail: 'invalid token: no key with kid "k2" in the JWKS', status: 'Unauthorized' }));
    await gw.proc.waitForOutput(/"err":"no answer within 300 ms"[^\n]*"msg":"JWKS fetch failed"/);
    assert.equal(fetches, before + 1);
    // --auth_jwks_cooldown=0s: the next unknown kid fetches again (the default would wait 30 s).
    assert.equal((await get(gw, 'k2')).status, 401);
    assert.equal(fetches, before + 2);
    assert.equal((await get(gw, 'k1')).status, 200);
    for (const res of held.splice(0)) res.destroy();
    hang = false;
  });

  it('--auth_jwks_refresh: keys older than it are fetched again in the background', async () => {
    const before = fetches;
    await waitFor(async () => (await get(refreshing, 'k1')).status === 200 && fetches > before);
  });

  it('a timeout or refresh of 0 is refused at start: exit 2 naming the flag', async () => {
    for (const flag of ['--auth_jwks_timeout=0s', '--auth_jwks_refresh=0s']) {
      const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, '--auth=jwt', `--auth_jwks=${jwksUrl}`, flag]);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`^mesh: invalid value "0" for flag ${flag.slice(0, flag.indexOf('='))}: must be more than 0`));
    }
  });
});
