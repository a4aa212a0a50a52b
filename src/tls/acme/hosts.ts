/** The ACME allow-list (`--acme_hosts`): host-name checks and normalisation. */
import { isIP } from 'node:net';
import { SchemaOptionError } from '../../base/util/option-error.js';

/** Lower case, without a trailing dot: how names are compared and cached. */
export function normalizeHost(name: string): string {
  return name.trim().toLowerCase().replace(/\.$/, '');
}

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Why `name` cannot be an ACME host name, or undefined when it can. */
export function invalidHostReason(name: string): string | undefined {
  const host = normalizeHost(name);
  if (host === '') return 'empty name';
  if (host.includes('*')) return 'wildcards need the DNS-01 challenge, which mesh does not answer: list each name';
  if (isIP(host) || isIP(host.replace(/^\[|\]$/g, ''))) return 'an IP address, not a host name';
  if (host.length > 253) return 'longer than 253 characters';
  if (!host.split('.').every((label) => LABEL.test(label))) return 'not a valid DNS name';
  return undefined;
}

/** The allow-list, normalised and de-duplicated, in the order given. Throws naming the first bad entry. */
export function parseAcmeHosts(hosts: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of hosts) {
    const why = invalidHostReason(raw);
    if (why) throw new SchemaOptionError('acme_hosts', why, raw);
    const host = normalizeHost(raw);
    if (!out.includes(host)) out.push(host);
  }
  return out;
}
