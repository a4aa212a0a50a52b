/**
 * A JWKS file (`--auth=jwt --auth_jwks=FILE`) is checked before the process starts, without jose
 * (it loads when JWT auth starts or at the first token): each kind of bad file is the start-up
 * error that names it, in the same words as when jose checked it. An EdgeAuth whose first two
 * tokens come at once, before anything loaded jose, verifies both.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { parseArgs } from '../../src/cli/flags.js';
import { EdgeAuth, readAuthSetup } from '../../src/edge/auth/edge.js';
import { SchemaOptionError } from '../../src/base/util/option-error.js';
import { StatsStore } from '../../src/base/stats/store.js';
import { tempDir } from '../helpers.js';

describe('a JWKS file', () => {
  const dir = tempDir('mesh-jwks-');
  after(() => dir.cleanup());
  const file = join(dir.path, 'jwks.json');
  const flags = () => parseArgs(['api', '--auth=jwt', `--auth_jwks=${file}`], {}).config;

  it('a bad one is the start-up error of --auth_jwks, naming why', () => {
    for (const [text, why] of [
      ['[]', 'not a JWKS: needs {"keys": [...]}'],
      ['{"keys":{}}', 'not a JWKS: needs {"keys": [...]}'],
      ['{"keys":[1]}', 'not a JWKS: a key is not an object'],
      ['{"keys":[null]}', 'not a JWKS: a key is not an object'],
      ['{"keys":[[]]}', 'JSON Web Key Set malformed'],
      ['{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}', 'the JWKS holds a symmetric (oct) key: only public keys belong there'],
      ['{"keys":[{"kty":"EC","kid":"k9","d":"x"}]}', 'the JWKS holds a private key (kid k9): publish only public keys'],
      ['{"keys":[{"kty":"EC","d":"x"}]}', 'the JWKS holds a private key: publish only public keys'],
    ] as const) {
      writeFileSync(file, text);
      assert.throws(
        () => readAuthSetup(flags()),
        (e: unknown) => e instanceof SchemaOptionError && e.format('flag') === `invalid value "${file}" for flag --auth_jwks: ${why}`,
        text,
      );
    }
  });

  it('a good one verifies two tokens that come at once, before jose was loaded by the auth', async () => {
    const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
    writeFileSync(file, JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256' }] }));
    const auth = new EdgeAuth(readAuthSetup(flags())!, { stats: new StatsStore(), log: pino({ level: 'silent' }) });
    const token = (sub: string) => new SignJWT({ scope: 'read' }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setSubject(sub).setExpirationTime('5m').sign(privateKey);
    const who = async (t: string) => auth.authenticate({ headers: { authorization: `Bearer ${t}` } } as never);
    const [a, b] = await Promise.all([who(await token('alice')), who(await token('bob'))]);
    assert.deepEqual([a, b], [
      { subject: 'alice', scopes: ['read'] },
      { subject: 'bob', scopes: ['read'] },
    ]);
  });
});
