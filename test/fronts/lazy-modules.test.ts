/**
 * A sidecar or a gateway that is not asked for gRPC, a Redis rate limit store, certificate
 * signing, a YAML file, protobuf, a WebSocket, JWT auth or a regex does not load those libraries (their
 * memory is paid by the processes that use them), nor undici's index (fetch, WebSocket, caches
 * and mocks; mesh loads undici's client parts on their own), nor Node's own copy of undici (which an
 * ES import of node:http loads on Node 22 and later, through its WebSocket getters): the real
 * processes run with a loader hook that logs every package imported or required by name, every
 * builtin imported as an ES module, and at exit every builtin Node loaded. A library loaded at its
 * first use serves two first uses at once.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFileSync } from 'node:fs';
import WebSocket from 'ws';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { CLI, http, PRINTED, startProcess, tempDir, waitFor } from '../helpers.js';

const REGISTER = fileURLToPath(new URL('../fixtures/module-log/register.mjs', import.meta.url));
/** Loaded at their first use only. */
const LAZY = ['@grpc/grpc-js', 'redis', '@peculiar/x509', 'yaml', 'protobufjs', 'ws', 'jose', 're2js', 'undici'];

/**
 * A real process under the hook, ready (its admin answered /ready); `packages()` reads the log so
 * far. `flags` may write files into the process's directory and name them.
 */
async function logged(command: readonly string[], admin: RegExp, main: RegExp, flags: (dir: string) => readonly string[] = () => []) {
  const dir = tempDir('mesh-lazy-');
  const log = join(dir.path, 'modules.log');
  const proc = startProcess(['--import', REGISTER, CLI, ...command, ...flags(dir.path), `--registry_address=${dir.path}`, '--log_level=warning'], { MESH_TEST_MODULE_LOG: log, MESH_HOME: dir.path }, '');
  try {
    const port = await proc.waitForPort(admin);
    assert.equal((await http('GET', `http://127.0.0.1:${port}/ready`)).status, 200);
    return {
      base: `http://127.0.0.1:${await proc.waitForPort(main)}`,
      admin: `http://127.0.0.1:${port}`,
      packages: () => new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean)),
      /** Stops the process (SIGTERM, its clean exit) and gives the builtins Node had loaded. */
      builtinsAtExit: async () => {
        assert.equal(await proc.stop(), 0, proc.output());
        const lines = readFileSync(log, 'utf8').split('\n');
        assert.equal(lines.at(-2), 'exit', 'the hook logged the builtins at exit');
        return new Set(lines.filter((l) => l.startsWith('loaded node:')).map((l) => l.slice('loaded node:'.length)));
      },
      stop: async () => {
        await proc.stop();
        dir.cleanup();
      },
    };
  } catch (err) {
    await proc.stop();
    dir.cleanup();
    throw err;
  }
}

const SIDECAR = ['sidecar', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'];

describe('libraries loaded at their first use', () => {
  for (const [name, command, admin, main] of [
    ['mesh sidecar', SIDECAR, PRINTED.sidecarAdmin, PRINTED.sidecar],
    ['mesh api', ['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'], PRINTED.apiAdmin, PRINTED.api],
  ] as const) {
    it(`${name} serving plain HTTP does not load ${LAZY.join(', ')}`, async () => {
      const p = await logged(command, admin, main);
      try {
        const loaded = p.packages();
        // The hook sees packages loaded by name: pino and undici's agent always are.
        assert.ok(loaded.has('pino') && loaded.has('undici/lib/dispatcher/agent.js'), `the hook logged: ${[...loaded].join(' ')}`);
        assert.deepEqual(LAZY.filter((pkg) => loaded.has(pkg)), []);
        // node:http is required, never imported: an ES import reads its WebSocket getters.
        assert.ok(loaded.has('import node:fs') && !loaded.has('import node:http'), `the hook logged: ${[...loaded].join(' ')}`);
        const builtins = await p.builtinsAtExit();
        assert.ok(builtins.has('http'), `Node loaded: ${[...builtins].join(' ')}`);
        assert.equal(builtins.has('internal/deps/undici/undici'), false, `Node loaded: ${[...builtins].join(' ')}`);
      } finally {
        await p.stop();
      }
    });
  }

  // The CA is made in MESH_HOME, the certificate signed and renewed, in a child process.
  it(`mesh sidecar with --mtls=strict makes its CA, signs its certificate and renews it, and does not load ${LAZY.join(', ')}`, async () => {
    const p = await logged([...SIDECAR, '--mtls=strict', '--mtls_cert_ttl=3s'], PRINTED.sidecarAdmin, PRINTED.sidecar);
    try {
      const serials = async () => {
        const body = (await http('GET', `${p.admin}/certs`)).json<{ certificates: Array<{ cert_chain: Array<{ path: string; serial_number: string }> }> }>();
        return body.certificates.flatMap((c) => c.cert_chain).filter((c) => /^workload:spiffe:\/\/mesh\.local\/svc\//.test(c.path)).map((c) => c.serial_number);
      };
      const first = await serials();
      assert.equal(first.length, 1);
      // Renewed at two thirds of 3 s: another serial.
      await waitFor(async () => (await serials()).some((serial) => serial !== first[0]), 15_000, 100);
      const loaded = p.packages();
      assert.ok(loaded.has('pino'), `the hook logged: ${[...loaded].join(' ')}`);
      assert.deepEqual(LAZY.filter((pkg) => loaded.has(pkg)), []);
    } finally {
      await p.stop();
    }
  });

  // Past the auth step: the sidecar's broker takes the message; the gateway, with no service, answers its 404.
  for (const [name, command, admin, main, path, passed] of [
    ['a sidecar', SIDECAR, PRINTED.sidecarAdmin, PRINTED.sidecar, '/broker?topic=jwt', 200],
    ['mesh api', ['api', '--address=127.0.0.1:0', '--admin_address=127.0.0.1:0'], PRINTED.apiAdmin, PRINTED.api, '/nothing', 404],
  ] as const) {
    it(`${name} with --auth=jwt loads jose at start: two tokens at once right after it are both verified, a forged one refused`, async () => {
      const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
      const other = await generateKeyPair('ES256');
      const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }] };
      const p = await logged(command, admin, main, (dir) => {
        writeFileSync(join(dir, 'jwks.json'), JSON.stringify(jwks));
        return ['--auth=jwt', `--auth_jwks=${join(dir, 'jwks.json')}`, '--auth_default=authenticated'];
      });
      try {
        assert.equal(p.packages().has('jose'), true);
        const sign = (key: typeof privateKey, sub: string) => new SignJWT({}).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setSubject(sub).setExpirationTime('5m').sign(key);
        const call = async (token?: string) => {
          const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {};
          return path.startsWith('/broker') ? http('POST', `${p.base}${path}`, { headers: { ...headers, 'content-type': 'text/plain' }, body: 'x' }) : http('GET', `${p.base}${path}`, { headers });
        };
        const [a, b] = await Promise.all([call(await sign(privateKey, 'alice')), call(await sign(privateKey, 'bob'))]);
        assert.deepEqual([a.status, b.status], [passed, passed], `${a.text} ${b.text}`);
        if (passed === 404) assert.match(a.text, /"detail":"path \/nothing names no service/);
        const forged = await call(await sign(other.privateKey, 'mallory'));
        assert.equal(forged.status, 401);
        assert.match(forged.text, /"detail":"invalid token: signature verification failed"/);
        assert.equal((await call()).status, 401);
      } finally {
        await p.stop();
      }
    });
  }

  it('a sidecar loads ws at its first WebSocket subscription: two at once both subscribe and receive', async () => {
    const p = await logged(SIDECAR, PRINTED.sidecarAdmin, PRINTED.sidecar);
    const sockets: WebSocket[] = [];
    try {
      assert.equal(p.packages().has('ws'), false);
      const received = Array.from({ length: 2 }, () => {
        const ws = new WebSocket(`${p.base.replace(/^http/, 'ws')}/broker?topic=lazy`);
        sockets.push(ws);
        const frame = new Promise<{ Body: string }>((resolve, reject) => {
          ws.once('message', (data) => resolve(JSON.parse(data.toString()) as { Body: string }));
          ws.once('error', reject);
        });
        return { opened: new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject))), frame };
      });
      await Promise.all(received.map((r) => r.opened));
      assert.equal(p.packages().has('ws'), true);
      const r = await http('POST', `${p.base}/broker?topic=lazy`, { headers: { 'content-type': 'text/plain' }, body: 'first' });
      assert.equal(r.status, 200, r.text);
      for (const { frame } of received) assert.equal(Buffer.from((await frame).Body, 'base64').toString('utf8'), 'first');
    } finally {
      for (const ws of sockets) ws.terminate();
      await p.stop();
    }
  });
});
