/**
 * How long a stolen certificate renews through `mesh ca serve`, in process on loopback with real
 * HTTPS: every certificate records its join (when, with which token, the join's first serial),
 * renewals copy it, and a renewal more than --ca_join_lifetime after the join is refused (401);
 * `mesh ca revoke`'s list (revocation.ts), read again when it changes, refuses renewals of a
 * revoked certificate or join (403), of a revoked service's earlier joins, and joins with a
 * revoked token (401) and renewals of what joined with it; a list that is too large or does not
 * parse refuses everything (500).
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import pino from 'pino';
import { CaServer } from '../../src/tls/workload/ca-server.js';
import { caPaths, initCa } from '../../src/tls/workload/ca.js';
import { revoke, revokedPath } from '../../src/tls/workload/revocation.js';
import { makeToken } from '../../src/tls/workload/token.js';
import { createCsr, generateKeyPair, joinFactsOf, privateKeyPem } from '../../src/tls/workload/x509.js';
import { tempDir, waitFor } from '../helpers.js';

const log = pino({ level: 'silent' });
const cleanups: Array<() => unknown> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

interface Held {
  cert: string;
  key: string;
  serial: string;
}

interface Answer {
  status: number;
  detail?: string;
  held?: Held;
}

async function startCa(joinLifetimeMs?: number) {
  const tmp = tempDir('ca-serve-revoke-');
  cleanups.push(tmp.cleanup);
  const caDir = join(tmp.path, 'ca');
  await initCa(caDir, { trustDomain: 'mesh.local' });
  const server = await CaServer.start({ caDir, trustDomain: 'mesh.local', host: '127.0.0.1', port: 0, names: ['127.0.0.1'], certTtlMs: 3_600_000, log, joinLifetimeMs });
  cleanups.push(() => server.close());
  const made = await makeToken(caDir, { services: ['go.mesh.srv.*'], trustDomain: 'mesh.local', ttlMs: 600_000 });

  /** POST /v1/certificate for `service`, with a token (a join) or a held certificate (a renewal). */
  async function ask(service: string, auth: { token?: string; held?: Held }): Promise<Answer> {
    const keys = await generateKeyPair();
    const body = JSON.stringify({ service, csr: await createCsr(keys, service) });
    const key = await privateKeyPem(keys.privateKey);
    const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: server.port,
          path: '/v1/certificate',
          method: 'POST',
          ca: readFileSync(caPaths(caDir).signerCert),
          cert: auth.held?.cert,
          key: auth.held?.key,
          headers: { 'content-type': 'application/json', ...(auth.token ? { authorization: `Bearer ${auth.token}` } : {}) },
          agent: false,
        },
        (r) => {
          let text = '';
          r.on('data', (d: Buffer) => (text += d.toString()));
          r.on('end', () => resolve({ status: r.statusCode!, text }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    const json = JSON.parse(res.text) as { chain?: string; serial?: string; detail?: string };
    if (res.status !== 200) return { status: res.status, detail: json.detail };
    return { status: 200, held: { cert: json.chain!, key, serial: json.serial! } };
  }
  return { caDir, server, token: made.token, tokenId: made.id, ask };
}

const renew = async (ask: (s: string, a: { held: Held }) => Promise<Answer>, service: string, held: Held): Promise<Held> => {
  const a = await ask(service, { held });
  assert.equal(a.status, 200, a.detail);
  return a.held!;
};

describe('mesh ca serve: a join lasts --ca_join_lifetime', () => {
  it('records the join in each certificate, copies it on renewal, and refuses a renewal once the join is older than --ca_join_lifetime (401)', async () => {
    const { token, tokenId, ask } = await startCa(10_000);
    const before = Date.now();
    const joined = await ask('go.mesh.srv.a', { token });
    assert.equal(joined.status, 200, joined.detail);
    const first = joined.held!;
    const facts = joinFactsOf(first.cert)!;
    assert.equal(facts.token, tokenId);
    assert.equal(facts.chain, first.serial);
    assert.ok(facts.joinedAt >= before - 1000 && facts.joinedAt <= Date.now());

    // Three chained renewals with the certificate alone carry the same join.
    let held = first;
    for (let i = 0; i < 3; i++) held = await renew(ask, 'go.mesh.srv.a', held);
    assert.notEqual(held.serial, first.serial);
    assert.deepEqual(joinFactsOf(held.cert), facts);

    // Past the join's lifetime: refused, whatever certificate of the chain is shown.
    const refused = await waitFor(async () => {
      const a = await ask('go.mesh.srv.a', { held });
      // (A 429 of the service's rate limit is not the answer waited for.)
      return a.status === 200 || a.status === 429 ? undefined : a;
    }, 30_000, 500);
    assert.ok(Date.now() - facts.joinedAt > 10_000);
    const at = new Date(facts.joinedAt).toISOString().replace(/\.\d{3}Z$/, 'Z');
    assert.deepEqual(refused, { status: 401, detail: `the certificate's join (${at}, join token ${tokenId}) is older than --ca_join_lifetime (10s): join again with a new token (mesh ca token)` });
    // A new join (with a valid token) starts a new chain.
    const again = await ask('go.mesh.srv.a', { token });
    assert.equal(again.status, 200, again.detail);
    assert.equal(joinFactsOf(again.held!.cert)!.chain, again.held!.serial);
  });
});

describe('mesh ca revoke: the signing service consults the revocation list', () => {
  it('a revoked serial refuses renewals of that certificate and, for a join\'s first serial, of every renewal of it (403); other joins renew', async () => {
    const { caDir, token, ask } = await startCa();
    const a1 = (await ask('go.mesh.srv.a', { token })).held!;
    const a2 = await renew(ask, 'go.mesh.srv.a', a1);
    const b1 = (await ask('go.mesh.srv.b', { token })).held!;
    const r = revoke(caDir, 'serial', a1.serial);
    const at = new Date(r.at).toISOString().replace(/\.\d{3}Z$/, 'Z');
    assert.deepEqual(await ask('go.mesh.srv.a', { held: a2 }), {
      status: 403,
      detail: `certificate ${a2.serial} of go.mesh.srv.a may not be renewed: serial ${a1.serial} was revoked at ${at} (mesh ca revoke); join again with a new token (mesh ca token)`,
    });
    assert.equal((await ask('go.mesh.srv.a', { held: a1 })).status, 403);
    await renew(ask, 'go.mesh.srv.b', b1);
    // A single renewal (not the join's first) is revoked by its own serial.
    const b2 = await renew(ask, 'go.mesh.srv.b', b1);
    revoke(caDir, 'serial', b2.serial);
    assert.equal((await ask('go.mesh.srv.b', { held: b2 })).status, 403);
  });

  it('a revoked service refuses renewals of the joins made before; a join made after renews', async () => {
    const { caDir, token, ask } = await startCa();
    const old = (await ask('go.mesh.srv.a', { token })).held!;
    const other = (await ask('go.mesh.srv.b', { token })).held!;
    revoke(caDir, 'service', 'go.mesh.srv.a');
    const refused = await ask('go.mesh.srv.a', { held: old });
    assert.equal(refused.status, 403);
    assert.match(refused.detail!, /^certificate [0-9a-f]+ of go\.mesh\.srv\.a may not be renewed: service go\.mesh\.srv\.a was revoked at \S+ \(mesh ca revoke\); join again with a new token \(mesh ca token\)$/);
    await renew(ask, 'go.mesh.srv.b', other);
    const fresh = await waitFor(async () => {
      const a = await ask('go.mesh.srv.a', { token });
      // The revocation time is to the millisecond: a join in the same one counts as before it.
      return a.status === 200 ? a.held : undefined;
    }, 5000, 200);
    await renew(ask, 'go.mesh.srv.a', fresh);
  });

  it('a revoked token refuses joins with it (401) and renewals of what joined with it (403); another token joins', async () => {
    const { caDir, token, tokenId, ask } = await startCa();
    const held = (await ask('go.mesh.srv.a', { token })).held!;
    revoke(caDir, 'token', tokenId);
    const join_ = await ask('go.mesh.srv.a', { token });
    assert.equal(join_.status, 401);
    assert.match(join_.detail!, new RegExp(`^join token ${tokenId} was revoked at \\S+Z: make a new one with mesh ca token$`));
    const renewal = await ask('go.mesh.srv.a', { held });
    assert.equal(renewal.status, 403);
    assert.match(renewal.detail!, new RegExp(`: join token ${tokenId} was revoked at `));
    const other = await makeToken(caDir, { services: ['go.mesh.srv.a'], trustDomain: 'mesh.local', ttlMs: 60_000 });
    assert.equal((await ask('go.mesh.srv.a', { token: other.token })).status, 200);
  });

  it('a revocation list that is too large or does not parse refuses every certificate (500); fixed, it is read again', async () => {
    const { caDir, token, ask } = await startCa();
    const held = (await ask('go.mesh.srv.a', { token })).held!;
    appendFileSync(revokedPath(caDir), 'not json\n');
    assert.deepEqual(await ask('go.mesh.srv.a', { held }), {
      status: 500,
      detail: `the revocation list ${revokedPath(caDir)} line 1 is not {"kind":"serial"|"service"|"token","value":…,"at":ISO}: certificates are refused until it is fixed (mesh ca revoke writes it)`,
    });
    assert.equal((await ask('go.mesh.srv.a', { token })).status, 500);
    writeFileSync(revokedPath(caDir), ' '.repeat(1024 * 1024 + 1));
    assert.deepEqual(await ask('go.mesh.srv.a', { held }), { status: 500, detail: `the revocation list ${revokedPath(caDir)} is larger than 1048576 bytes: certificates are refused until it is shortened` });
    writeFileSync(revokedPath(caDir), '');
    await renew(ask, 'go.mesh.srv.a', held);
  });
});
