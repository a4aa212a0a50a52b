/**
 * `mesh sidecar --sidecar_token_file` as a real process: every route but the health path needs
 * `Mesh-Sidecar-Token`, WebSocket subscriptions included; the CLI sends it from MESH_SIDECAR_TOKEN
 * or --sidecar_token_file; the token never reaches a backend, nor the sidecar's command line.
 */
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { runCli, tempDir } from '../helpers.js';
import { http, postJson, refusedHandshake, startSidecar, type SidecarProcess } from '../fixtures/sidecar-common.js';

const TOKEN = 'sidecar-token-0123456789abcdef';
const REQUIRED = '{"id":"go.mesh.auth","code":401,"detail":"a sidecar token is required (Mesh-Sidecar-Token)","status":"Unauthorized"}';
const WRONG = '{"id":"go.mesh.auth","code":401,"detail":"wrong sidecar token","status":"Unauthorized"}';

describe('sidecar token', () => {
  const home = tempDir('mesh-sidecar-token-');
  let sc: SidecarProcess;

  const tokenFile = join(home.path, 'sidecar.token');

  before(async () => {
    writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
    sc = await startSidecar(home.path, [`--sidecar_token_file=${tokenFile}`]);
  });
  after(async () => {
    await sc?.stop();
    home.cleanup();
  });

  it('HTTP: no token or a wrong one is 401 on every route; the health path needs none', async () => {
    for (const [method, path] of [['GET', '/'], ['GET', '/registry'], ['POST', '/rpc'], ['POST', '/broker?topic=t'], ['POST', '/x/y']]) {
      const r = await http(method!, `${sc.base}${path}`, { body: method === 'POST' ? '{}' : undefined });
      assert.equal(r.status, 401, `${method} ${path}`);
      assert.equal(r.headers['www-authenticate'], 'Mesh-Sidecar-Token realm="mesh"');
      assert.equal(r.text, REQUIRED);
      const w = await http(method!, `${sc.base}${path}`, { headers: { 'mesh-sidecar-token': `${TOKEN}x` }, body: method === 'POST' ? '{}' : undefined });
      assert.equal(w.text, WRONG);
    }
    const ok = await http('GET', `${sc.base}/`, { headers: { 'mesh-sidecar-token': TOKEN } });
    assert.equal(ok.status, 200);
    assert.equal((await http('GET', `${sc.base}/_mesh/health`)).status, 200);
    const reg = await postJson(`${sc.base}/registry`, { name: 'go.mesh.srv.tok', nodes: [{ id: 'tok-1', address: '127.0.0.1', port: 7001 }] }, { 'mesh-sidecar-token': TOKEN });
    assert.equal(reg.status, 200, reg.text);
  });

  it('WebSocket subscriptions need the token too', async () => {
    const url = `ws://127.0.0.1:${sc.port}/broker?topic=tok`;
    assert.deepEqual(await refusedHandshake(url), { status: 401, body: REQUIRED });
    assert.deepEqual(await refusedHandshake(url, { 'mesh-sidecar-token': 'nope' }), { status: 401, body: WRONG });
    const ws = new WebSocket(url, { headers: { 'mesh-sidecar-token': TOKEN } });
    await once(ws, 'open');
    const got = once(ws, 'message');
    const pub = await http('POST', `${sc.base}/broker?topic=tok`, { headers: { 'mesh-sidecar-token': TOKEN }, body: 'hi' });
    assert.equal(pub.status, 200, pub.text);
    const [frame] = await got;
    const msg = JSON.parse(String(frame));
    assert.equal(Buffer.from(msg.Body, 'base64').toString(), 'hi');
    // the token is the sidecar's alone: not in the delivered message header
    assert.equal(Object.keys(msg.Header).some((k) => k.toLowerCase() === 'mesh-sidecar-token'), false);
    ws.close();
  });

  it('the CLI sends MESH_SIDECAR_TOKEN with --proxy_address', async () => {
    const addr = `--proxy_address=127.0.0.1:${sc.port}`;
    const ok = await runCli(['list', 'services', addr], { MESH_SIDECAR_TOKEN: TOKEN });
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /go\.mesh\.srv\.tok/);
    const refused = await runCli(['list', 'services', addr], { MESH_SIDECAR_TOKEN: '' });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /a sidecar token is required/);
    const fromFile = await runCli(['list', 'services', addr, `--sidecar_token_file=${tokenFile}`], { MESH_SIDECAR_TOKEN: '' });
    assert.equal(fromFile.code, 0, fromFile.stderr);
    assert.match(fromFile.stdout, /go\.mesh\.srv\.tok/);
  });

  it('the token is not on the sidecar\'s command line', { skip: process.platform !== 'linux' }, () => {
    const cmdline = readFileSync(`/proc/${sc.proc.child.pid}/cmdline`, 'utf8');
    assert.ok(cmdline.includes(`--sidecar_token_file=${tokenFile}`));
    assert.ok(!cmdline.includes(TOKEN));
  });
});
