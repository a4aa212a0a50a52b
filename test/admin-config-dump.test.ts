/**
 * What admin /config_dump leaves out (src/admin/config-dump.ts): secret options by name, passwords
 * in URLs; and the options a command uses, from the resolved options or the command line.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { effectiveOptions, isSecretOption, redactUserinfo, renderListenersText } from '../src/admin/config-dump.js';
import { optionEntries } from '../src/base/options/schema.js';

describe('admin /config_dump', () => {
  it('secrets are known by name; a file holding one is a path and stays', () => {
    const secrets = optionEntries().map(([key]) => key).filter(isSecretOption).sort();
    assert.deepEqual(secrets, ['admin_token', 'broker_secret', 'ca_token', 'sidecar_token', 'xds_token']);
    assert.equal(isSecretOption('broker_secret_file'), false);
    assert.equal(isSecretOption('rate_limit_key'), false);
  });

  it('passwords in URLs are redacted, every URL of a list', () => {
    assert.equal(redactUserinfo('https://root:pw@etcd-1:2379,https://root:pw@etcd-2:2379'), 'https://[redacted]@etcd-1:2379,https://[redacted]@etcd-2:2379');
    assert.equal(redactUserinfo('nats://u:p@127.0.0.1:4222'), 'nats://[redacted]@127.0.0.1:4222');
    assert.equal(redactUserinfo('127.0.0.1:2379'), '127.0.0.1:2379');
  });

  it("a command's options: resolved values, then the command line; secrets left out", () => {
    const options = effectiveOptions('api', { clientRetries: 2, adminToken: 'tok', registryAddress: 'https://u:p@h:2379' }, { routes: '/r.yaml', admin_token: 'tok', handler: 'rpc' });
    assert.equal(options.client_retries, 2);
    assert.equal(options.routes, '/r.yaml');
    assert.equal(options.handler, 'rpc');
    assert.equal(options.registry_address, 'https://[redacted]@h:2379');
    assert.equal(options.server_name, undefined); // a sidecar option: not mesh api's
    assert.ok(!('admin_token' in options));
    assert.ok(!Object.values(options).includes('tok'));
  });

  it('/listeners text', () => {
    assert.equal(renderListenersText([{ name: 'gateway', address: '::', port: 8080 }, { name: 'b', address: '127.0.0.1', port: 1 }]), 'gateway::[::]:8080\nb::127.0.0.1:1\n');
  });
});
