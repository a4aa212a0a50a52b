/**
 * What admin /config_dump leaves out (src/admin/config-dump.ts): secret options by name, passwords
 * in URLs; and the options a command uses, from the resolved options or the command line.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { effectiveOptions, isSecretOption, renderListenersText } from '../../src/admin/config-dump.js';
import { redactUrl } from '../../src/base/util/redact.js';
import { optionEntries } from '../../src/base/options/schema.js';

describe('admin /config_dump', () => {
  it('secrets are known by name; a file holding one is a path and stays', () => {
    const secrets = optionEntries().map(([key]) => key).filter(isSecretOption).sort();
    assert.deepEqual(secrets, ['admin_token', 'broker_secret', 'ca_token', 'sidecar_token', 'xds_token']);
    assert.equal(isSecretOption('broker_secret_file'), false);
    assert.equal(isSecretOption('rate_limit_key'), false);
  });

  it('URLs are redacted: user information, every query value and the fragment, every URL of a list', () => {
    assert.equal(redactUrl('https://root:pw@etcd-1:2379,https://root:pw@etcd-2:2379'), 'https://REDACTED@etcd-1:2379,https://REDACTED@etcd-2:2379');
    assert.equal(redactUrl('nats://u:p@127.0.0.1:4222'), 'nats://REDACTED@127.0.0.1:4222');
    assert.equal(redactUrl('redis://:secret@127.0.0.1:6379/0'), 'redis://REDACTED@127.0.0.1:6379/0');
    assert.equal(redactUrl('root:pw@etcd-1:2379'), 'REDACTED@etcd-1:2379');
    assert.equal(redactUrl('https://idp.example/jwks?access_token=abc&sig=def&x=&flag#frag'), 'https://idp.example/jwks?access_token=REDACTED&sig=REDACTED&x=&REDACTED#REDACTED');
    assert.equal(redactUrl('http://h/?a=1,2&b=3'), 'http://h/?a=REDACTED&b=REDACTED');
    assert.equal(redactUrl('fetch of http://u:p@h/k?t=1 failed: connect ECONNREFUSED'), 'fetch of http://REDACTED@h/k?t=REDACTED failed: connect ECONNREFUSED');
    for (const plain of ['127.0.0.1:2379', '/etc/mesh/routes.yaml', 'ops@example.com', 'http://[::1]:8080/path']) assert.equal(redactUrl(plain), plain);
  });

  it("a command's options: resolved values, then the command line; secrets left out", () => {
    const options = effectiveOptions('api', { clientRetries: 2, adminToken: 'tok', registryAddress: 'https://u:p@h:2379' }, { routes: '/r.yaml', admin_token: 'tok', handler: 'rpc', auth_jwks: 'https://idp/jwks?access_token=tok2' });
    assert.equal(options.client_retries, 2);
    assert.equal(options.routes, '/r.yaml');
    assert.equal(options.handler, 'rpc');
    assert.equal(options.registry_address, 'https://REDACTED@h:2379');
    assert.equal(options.auth_jwks, 'https://idp/jwks?access_token=REDACTED');
    assert.equal(options.server_name, undefined); // a sidecar option: not mesh api's
    assert.ok(!('admin_token' in options));
    assert.ok(!Object.values(options).includes('tok'));
  });

  it('/listeners text', () => {
    assert.equal(renderListenersText([{ name: 'gateway', address: '::', port: 8080 }, { name: 'b', address: '127.0.0.1', port: 1 }]), 'gateway::[::]:8080\nb::127.0.0.1:1\n');
  });
});
