/**
 * Addresses: the one parser and formatter of `host:port` for every flag, option, config file and
 * request that carries one (docs/architecture.md "Addresses").
 *
 * Accepted forms (`parseAddress`):
 *  - `host:port`      a name or IPv4 literal and a port;
 *  - `[v6]:port`      an IPv6 literal in brackets and a port;
 *  - `:port`          every interface (host 0.0.0.0), for a listen address only;
 *  - `port`           only where `barePort` says so (--acme_http_port): same as `:port`;
 *  - `host`, `[v6]`, a bare IPv6 literal: only where `defaultPort` is given (--advertise,
 *    --broker_address); the port is then defaultPort.
 * Everything else is an AddressError whose message names the value and says what to write:
 * `::1:9901` (an unbracketed IPv6 with a port) gets "use [::1]:9901".
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

export interface HostPort {
  /** A name or an IP literal, IPv6 without brackets; `0.0.0.0` for `:port`. */
  host: string;
  port: number;
}

export interface ParseAddressOptions {
  /** The port of the forms without one (`host`, `[v6]`, bare IPv6); without it a port is required. */
  defaultPort?: number;
  /** An address to connect to, not to listen on: a host is required and the port is 1 to 65535. */
  target?: boolean;
  /** A bare `port` is accepted and means `:port` (a flag whose name says it is a port). */
  barePort?: boolean;
  /** What the address is, for messages: `invalid <what> "..."`; default `address`. */
  what?: string;
}

/** A refused address; the message names the value and the form to use. */
export class AddressError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AddressError';
  }
}

/** The host of `:port`: every IPv4 interface. */
export const EVERY_INTERFACE = '0.0.0.0';

const NAME = /^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})$/;
const PORT = /^\d{1,5}$/;

/** Parses an address (forms above); throws an AddressError. */
export function parseAddress(text: string, options: ParseAddressOptions = {}): HostPort {
  const value = String(text).trim();
  const bad = (why?: string): AddressError =>
    new AddressError(`invalid ${options.what ?? 'address'} "${text}"${why ? `: ${why}` : ' (use host:port)'}`);
  const minPort = options.target ? 1 : 0;
  const port = (portText: string): number => {
    if (portText === '') throw bad('no port after ":" (use host:port)');
    if (!PORT.test(portText)) throw bad(`"${portText}" is not a port (use host:port)`);
    const n = Number(portText);
    if (n < minPort || n > 65535) throw bad(`port out of range (${minPort} to 65535)`);
    return n;
  };
  const withDefault = (host: string): HostPort => {
    if (options.defaultPort === undefined) {
      throw bad(isIP(host) === 6 ? `no port (use [${host}]:port)` : `no port (use ${host}:port)`);
    }
    return { host, port: options.defaultPort };
  };
  if (value === '') throw bad('empty (use host:port)');
  if (/\s/.test(value)) throw bad('no spaces (use host:port)');
  if (/:\/\/|[/?#@\\]/.test(value)) throw bad('not a URL or path (use host:port, no scheme)');

  // [v6] and [v6]:port
  if (value.startsWith('[')) {
    const m = /^\[([^\]]*)\](?::(.*))?$/.exec(value);
    if (!m || isIP(m[1]!) !== 6) throw bad('brackets hold an IPv6 address: use [v6]:port');
    if (m[2] === undefined) return withDefault(m[1]!);
    return { host: m[1]!, port: port(m[2]) };
  }

  // A bare IPv6 literal: a host with no port, or a port written without brackets.
  if (isIP(value) === 6) {
    if (options.defaultPort !== undefined) return { host: value, port: options.defaultPort };
    const i = value.lastIndexOf(':');
    const head = value.slice(0, i);
    const tail = value.slice(i + 1);
    if (PORT.test(tail) && isIP(head) === 6) throw bad(`an IPv6 address with a port needs brackets: use [${head}]:${tail}`);
    throw bad(`no port (use [${value}]:port)`);
  }

  const colons = value.split(':').length - 1;
  if (colons > 1) throw bad('an IPv6 address goes in brackets: use [v6]:port');
  if (colons === 1) {
    const i = value.indexOf(':');
    const host = value.slice(0, i);
    const p = port(value.slice(i + 1));
    if (host === '') {
      if (options.target) throw bad('no host (use host:port)');
      return { host: EVERY_INTERFACE, port: p };
    }
    if (!NAME.test(host)) throw bad(`"${host}" is not a host name or IP address (use host:port)`);
    return { host, port: p };
  }

  // No colon: a bare port or a bare host.
  if (/^\d+$/.test(value)) {
    if (options.barePort && !options.target) return { host: EVERY_INTERFACE, port: port(value) };
    throw bad(options.target ? undefined : 'use host:port (or :port for every interface)');
  }
  if (!NAME.test(value)) throw bad();
  if (options.defaultPort === undefined) throw bad();
  return withDefault(value);
}

/** `parseAddress` returning undefined instead of throwing. */
export function tryParseAddress(text: string, options: ParseAddressOptions = {}): HostPort | undefined {
  try {
    return parseAddress(text, options);
  } catch {
    return undefined;
  }
}

/** A host as it goes before `:port` or into a URL: an IPv6 literal in brackets (already bracketed: as is). */
export function formatHost(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

/** `host:port`, IPv6 in brackets: what parseAddress reads back. */
export function formatAddress(host: string, port: number): string {
  return `${formatHost(host)}:${port}`;
}

/**
 * A listen host meaning every interface: `0.0.0.0`, `::`, `[::]`, `::ffff:0.0.0.0` (and its
 * compressed spellings) or the empty host.
 */
export function isWildcard(host: string): boolean {
  let h = host.trim().toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h === '' || h === '0.0.0.0') return true;
  if (isIP(h) !== 6) return false;
  return /^[0:]*$/.test(h) || /^[0:]*:ffff:(0\.0\.0\.0|0+:0+)$/.test(h);
}

/** A loopback host: `localhost`, 127.0.0.0/8, `::1`, IPv4-mapped 127.x (`::ffff:127.0.0.1`, `::ffff:7f00:1`); brackets optional. */
export function isLoopback(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return (
    h === 'localhost' ||
    h === '::1' ||
    /^127\.\d+\.\d+\.\d+$/.test(h) ||
    /^::ffff:127\.\d+\.\d+\.\d+$/.test(h) ||
    /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(h)
  );
}

/** The first non-internal IPv4 address of this machine; 127.0.0.1 when there is none. */
export function firstExternalIPv4(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

/**
 * Parses --advertise: `host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 literal (always a
 * host: `2001:db8::1` is one address, never `2001:db8:` and port 1). Port 0 (absent or written
 * `:0`) means "the bound port", so one flag fits every listener of a process.
 */
export function parseAdvertise(text: string): HostPort {
  const what = 'advertise address';
  if (/^\s*:\d*\s*$/.test(text) || /^\s*\d+\s*$/.test(text)) {
    throw new AddressError(`invalid ${what} "${text}": no host (use host or host:port, a host others can reach)`);
  }
  const parsed = parseAddress(text, { defaultPort: 0, what });
  if (isWildcard(parsed.host)) {
    throw new AddressError(`invalid ${what} "${text}": ${parsed.host} is a wildcard, not an address others can reach`);
  }
  return parsed;
}

/**
 * The address to register for a listener bound at `listen`: --advertise when given (its port, or
 * the bound one when it has none); otherwise the bound host, or for a wildcard bind the first
 * external IPv4 of the machine.
 */
export function advertisedAddress(listen: HostPort, advertise?: string): HostPort {
  const text = advertise?.trim();
  if (!text) return { host: isWildcard(listen.host) ? firstExternalIPv4() : listen.host, port: listen.port };
  const adv = parseAdvertise(text);
  return { host: adv.host, port: adv.port || listen.port };
}
