/**
 * Secrets off the command line and out of logs (docs/security.md): a real `mesh api` given its
 * admin token as a file (--admin_token_file) and a JWKS URL with a user, a password and a query of
 * secrets (MESH_AUTH_JWKS), against a JWKS server on loopback that demands Basic auth.
 *
 * - The JWKS is fetched: the server gets `Authorization: Basic` with the decoded user and
 *   password, the path and query as given, and tokens it signed are accepted.
 * - Admin /config_dump shows the URL as `http://REDACTED@host/jwks?access_token=REDACTED&sig=REDACTED`.
 * - The log (a failed fetch names the URL and the error) never holds the password or a query value.
 * - /proc/PID/cmdline names the token file, not the token; the admin needs the file's token.
 * - A token file that is missing, empty or of two lines, or given with --admin_token: exit 2.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer } from 'node:http';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { createRegistry } from '../../src/engines/registry/create.js';
import { http, listenLoopback, runCli, tempDir, waitFor } from '../helpers.js';
import { registerPlain, startGatewayProcess, startPlainApp, type GatewayProcess, type PlainApp } from '../fixtures/gateway-helpers.js';

describe('secrets: token files, redacted URLs, a JWKS URL with a password', () => {
  const dir = tempDir('mesh-secrets-');
  const ADMIN_TOKEN = 'admin-token-SECRET0-0123456789';
  const USER = 'jwks-user';
  const PASSWORD = 'p@ss w0rd-SECRET1';
  const secrets = ['SECRET0', 'SECRET1', 'SECRET2', 'SECRET3', encodeURIComponent(PASSWORD)];
  const requests: Array<{ url: string; authorization?: string }> = [];
  let failNext = true;
  let keys: { privateKey: CryptoKey; publicKey: CryptoKey };
  let jwksPort = 0;
  let closeJwks: () => Promise<void>;
  let plain: PlainApp;
  let gw: GatewayProcess;
  let tokenFile = '';

  before(async () => {
    keys = await generateKeyPair('ES256', { extractable: true });
    const jwks = JSON.stringify({ keys: [{ ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] });
    const expected = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`;
    const server = createServer((req, res) => {
      requests.push({ url: req.url!, authorization: req.headers.authorization });
      if (req.headers.authorization !== expected) {
        res.writeHead(401, { 'www-authenticate': 'Basic realm="jwks"' }).end();
        return;
      }
      if (failNext) {
        // The first fetch fails: the process logs the failure, naming the URL.
        failNext = false;
        res.writeHead(503).end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(jwks) }).end(jwks);
    });
    const l = await listenLoopback(server);
    jwksPort = l.port;
    closeJwks = l.close;
    plain = await startPlainApp('plain');
    await registerPlain(createRegistry('local', dir.path), 'go.mesh.api.plain', plain.port);
    tokenFile = join(dir.path, 'admin.token');
    writeFileSync(tokenFile, `${ADMIN_TOKEN}\n`, { mode: 0o600 });
    const jwksUrl = `http://${USER}:${encodeURIComponent(PASSWORD)}@127.0.0.1:${jwksPort}/jwks?access_token=QT-SECRET2&sig=SG-SECRET3`;
    gw = await startGatewayProcess(dir.path, ['--handler=rpc', '--auth=jwt', `--admin_token_file=${tokenFile}`], { MESH_AUTH_JWKS: jwksUrl });
  });

  after(async () => {
    await gw?.stop();
    await plain?.close();
    await closeJwks?.();
    dir.cleanup();
  });

  it('the JWKS is fetched with Basic auth, from the URL without its user information; its keys verify tokens', async () => {
    await gw.proc.waitForOutput(/JWKS fetch failed/);
    const token = await new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setSubject('alice').setExpirationTime('5m').sign(keys.privateKey);
    const r = await http('GET', `${gw.url}/plain/echo/call`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200, r.text);
    assert.ok(requests.length >= 2);
    for (const req of requests) {
      assert.equal(req.url, '/jwks?access_token=QT-SECRET2&sig=SG-SECRET3');
      assert.equal(req.authorization, `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`);
    }
  });

  it('admin /config_dump shows the URL redacted, and needs the token of the file', async () => {
    assert.equal((await http('GET', `${gw.admin}/config_dump`)).status, 401);
    const r = await http('GET', `${gw.admin}/config_dump`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    assert.equal(r.status, 200);
    const options = (r.json<{ configs: Array<{ options?: Record<string, unknown> }> }>().configs[0]!.options)!;
    assert.equal(options.auth_jwks, `http://REDACTED@127.0.0.1:${jwksPort}/jwks?access_token=REDACTED&sig=REDACTED`);
    assert.equal(options.admin_token_file, tokenFile);
    for (const s of secrets) assert.ok(!r.text.includes(s), `config_dump holds ${s}`);
  });

  it('the log holds no password, query value or token; the failed fetch names the URL redacted', async () => {
    const out = gw.proc.output();
    assert.match(out, new RegExp(`"url":"http://REDACTED@127\\.0\\.0\\.1:${jwksPort}/jwks\\?access_token=REDACTED&sig=REDACTED"[^\\n]*"msg":"JWKS fetch failed"`));
    for (const s of secrets) assert.ok(!out.includes(s), `the log holds ${s}`);
  });

  it('/proc/PID/cmdline names the token file, and holds no secret', { skip: process.platform !== 'linux' }, () => {
    const cmdline = readFileSync(`/proc/${gw.proc.child.pid}/cmdline`, 'utf8');
    assert.ok(cmdline.includes(`--admin_token_file=${tokenFile}`));
    for (const s of secrets) assert.ok(!cmdline.includes(s), `cmdline holds ${s}`);
  });

  it('a token file missing, empty, of two lines or with white space, or with --admin_token: exit 2 naming the flag', async () => {
    const empty = join(dir.path, 'empty.token');
    writeFileSync(empty, '\n\n');
    const two = join(dir.path, 'two.token');
    writeFileSync(two, 'one\ntwo\n');
    const spaced = join(dir.path, 'spaced.token');
    writeFileSync(spaced, 'token with spaces 0123456789\n');
    const cases: Array<[string[], Record<string, string>, string]> = [
      [['--admin_token_file=/nonexistent/admin.token'], {}, 'mesh: invalid value "/nonexistent/admin.token" for flag --admin_token_file: cannot read it (ENOENT)\n'],
      [[`--admin_token_file=${empty}`], {}, `mesh: invalid value "${empty}" for flag --admin_token_file: the file is empty (it should hold --admin_token)\n`],
      [[`--admin_token_file=${two}`], {}, `mesh: invalid value "${two}" for flag --admin_token_file: the file has more than one line (it should hold --admin_token alone)\n`],
      [[`--admin_token_file=${spaced}`], {}, `mesh: invalid value "${spaced}" for flag --admin_token_file: the file holds white space (a --admin_token has none)\n`],
      [[`--admin_token_file=${tokenFile}`], { MESH_ADMIN_TOKEN: 'x' }, 'mesh: give MESH_ADMIN_TOKEN (--admin_token) or --admin_token_file, not both\n'],
    ];
    for (const [flags, env, stderr] of cases) {
      const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, ...flags], env);
      assert.deepEqual({ code: r.code, stderr: r.stderr }, { code: 2, stderr }, flags.join(' '));
    }
  });

  it('an invalid URL option is refused with the URL redacted', async () => {
    const r = await runCli(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, '--rate_limit=10/s', '--rate_limit_store=redis://:pw-SECRET4@127.0.0.1:99999']);
    assert.equal(r.code, 2);
    assert.ok(!r.stderr.includes('SECRET4'), r.stderr);
    assert.match(r.stderr, /redis:\/\/REDACTED@127\.0\.0\.1:99999/);
  });
});
