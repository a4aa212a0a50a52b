/** createRegistry: picking a backend from --registry / --registry_address. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { createRegistry, defaultRegistryDirectory } from '../../src/engines/registry/create.js';
import { MemoryRegistry } from '../../src/engines/registry/memory.js';
import { LocalRegistry } from '../../src/engines/registry/local/index.js';
import { EtcdRegistry, parseEtcdAddress } from '../../src/engines/registry/etcd/index.js';
import { tempDir } from '../helpers.js';
import { SchemaOptionError } from '../../src/base/util/option-error.js';

function withEnv<T>(name: string, value: string | undefined, fn: () => T): T {
  const old = process.env[name];
  if (value === undefined) delete process.env[name];
  else process.env[name] = value;
  try {
    return fn();
  } finally {
    if (old === undefined) delete process.env[name];
    else process.env[name] = old;
  }
}

describe('createRegistry', () => {
  it('memory', async () => {
    const r = createRegistry('memory', undefined);
    assert.ok(r instanceof MemoryRegistry);
    assert.equal(r.name, 'memory');
    await r.close();
  });

  it('local: the address is the directory, else opts.home, else $MESH_HOME', async () => {
    const tmp = tempDir();
    try {
      const a = createRegistry('local', join(tmp.path, 'addr'), { home: join(tmp.path, 'home') });
      assert.ok(a instanceof LocalRegistry);
      assert.equal(a.name, 'local');
      assert.equal((a as LocalRegistry).directory, resolve(tmp.path, 'addr'));
      await a.close();

      const b = withEnv('MESH_HOME', join(tmp.path, 'env'), () => createRegistry('local', undefined, { home: join(tmp.path, 'home') }));
      assert.equal((b as LocalRegistry).directory, resolve(tmp.path, 'home'));
      await b.close();

      const c = withEnv('MESH_HOME', join(tmp.path, 'env'), () => createRegistry('local', '', {}));
      assert.equal((c as LocalRegistry).directory, resolve(tmp.path, 'env'));
      await c.close();
    } finally {
      tmp.cleanup();
    }
  });

  it('local: the default directory is ~/.mesh without $MESH_HOME', () => {
    withEnv('MESH_HOME', undefined, () => assert.equal(defaultRegistryDirectory(), join(homedir(), '.mesh')));
    withEnv('MESH_HOME', '/somewhere', () => assert.equal(defaultRegistryDirectory(), '/somewhere'));
  });

  it('etcd: the address is required; host:port lists get http://', async () => {
    // A SchemaOptionError: the library names the option registryAddress, the CLI --registry_address.
    assert.throws(() => createRegistry('etcd', undefined), (e: unknown) => e instanceof SchemaOptionError && e.key === 'registry_address' && /^registry etcd: registryAddress is required/.test(e.message) && /^registry etcd: --registry_address is required/.test(e.format('flag')));
    assert.throws(() => createRegistry('etcd', ' '), /registryAddress is required/);
    const r = createRegistry('etcd', '127.0.0.1:1,127.0.0.1:2');
    assert.ok(r instanceof EtcdRegistry);
    assert.deepEqual((r as EtcdRegistry).hosts, ['http://127.0.0.1:1', 'http://127.0.0.1:2']);
    assert.equal((r as EtcdRegistry).prefix, '/mesh/registry/');
    await r.close();
    assert.deepEqual(parseEtcdAddress('https://etcd.example:2379'), { hosts: ['https://etcd.example:2379'], credentials: undefined, secure: true });
    assert.deepEqual(parseEtcdAddress('etcd.example'), { hosts: ['http://etcd.example:2379'], credentials: undefined, secure: false });
    assert.deepEqual(parseEtcdAddress('https://root:p%40ss@a:2379,https://root:p%40ss@b:443/'), {
      hosts: ['https://a:2379', 'https://b:443'],
      credentials: { username: 'root', password: 'p@ss' },
      secure: true,
    });
    assert.throws(() => parseEtcdAddress(' , '), /invalid address/);
    assert.throws(() => parseEtcdAddress('http://a:1,https://b:2'), /mix of http:\/\/ and https:\/\//);
    assert.throws(() => parseEtcdAddress('https://u:one@a:1,https://u:two@b:2'), /same user and password in every address/);
    assert.throws(() => parseEtcdAddress('nats://a:1'), /scheme nats:\/\/ is not http:\/\/ or https:\/\//);
    assert.throws(() => parseEtcdAddress('a:1/some/path'), /invalid address "a:1\/some\/path"/);
    assert.throws(
      () => parseEtcdAddress('https://u:secret@a:1/x'),
      (err: Error) => /invalid address "https:\/\/REDACTED@a:1\/x"/.test(err.message) && !err.message.includes('secret'),
    );
  });

  it('etcd: an unreachable server is an error naming it, not a hang', async () => {
    const r = new EtcdRegistry('127.0.0.1:1', { callTimeoutMs: 1000 });
    try {
      await assert.rejects(r.getService('x'), /registry etcd \(http:\/\/127\.0\.0\.1:1\)/);
    } finally {
      await r.close();
    }
  });

  it('an unknown kind names the valid ones', () => {
    assert.throws(() => createRegistry('consul', 'x'), (err: Error) => {
      assert.match(err.message, /unknown registry "consul"/);
      for (const k of ['local', 'memory', 'etcd']) assert.ok(err.message.includes(k), err.message);
      return true;
    });
  });
});
