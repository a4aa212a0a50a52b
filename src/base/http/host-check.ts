/**
 * The Host check of the loopback interfaces (admin, sidecar): a DNS-rebinding page (a page on
 * evil.example whose name now points at 127.0.0.1) makes the browser send `Host: evil.example:PORT`,
 * so a listener meant for this machine only answers just the Host values that cannot come from such
 * a page. Accepted (docs/admin.md "Host check"):
 *  - a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z) or `localhost` (not `*.localhost`);
 *  - an IP literal equal to the listener's address; with a wildcard listener (0.0.0.0, ::) any IP
 *    literal (a browser sends an IP literal only when it reached this listener by that address,
 *    which DNS rebinding cannot produce);
 *  - a name of --admin_allowed_hosts (`name`, or `*.suffix` for names under suffix); `*` alone
 *    turns the check off.
 * A request without Host is refused on HTTP/1.1 and served on HTTP/1.0 (a browser always sends Host).
 */
import { isIP } from 'node:net';
import { isLoopback, isWildcard } from '../util/address.js';

export const ALLOWED_HOSTS_FLAG = '--admin_allowed_hosts';

const NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/** `::ffff:HHHH:HHHH`, an IPv4-mapped IPv6 address as the URL parser writes it (compressed, hex). */
const MAPPED = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/;

/**
 * The canonical form of a host (a name or an IP literal, brackets optional): lower case, no trailing
 * dot, IPv4 in dotted decimal (`127.1`, `0x7f.1` and `2130706433` are 127.0.0.1, as a connect sees
 * them), IPv6 compressed without brackets, and an IPv4-mapped IPv6 address as the IPv4 address it
 * reaches (`::ffff:127.0.0.1`, `::ffff:7f00:1`, `0:0:0:0:0:ffff:7f00:1` and `[::ffff:127.0.0.1]`
 * are 127.0.0.1: a connect to one of them reaches a listener on 127.0.0.1). One address, one
 * string: compare canonical forms only. Undefined when it is not a host.
 */
export function canonicalHost(text: string): string | undefined {
  let h = text.trim();
  if (h === '') return undefined;
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (isIP(h) === 6) h = `[${h}]`;
  else if (/[\s/?#@\\[\]:%]/.test(h)) return undefined;
  let host: string;
  try {
    host = new URL(`http://${h}/`).hostname;
  } catch {
    return undefined;
  }
  if (host.startsWith('[')) {
    const v6 = host.slice(1, -1);
    const mapped = MAPPED.exec(v6);
    if (!mapped) return v6;
    const hi = parseInt(mapped[1]!, 16);
    const lo = parseInt(mapped[2]!, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  if (host.endsWith('.')) host = host.slice(0, -1);
  if (isIP(host) === 0 && !NAME.test(host)) return undefined;
  return host;
}

/** A Host header's host and port, as splitHostHeader reads them. */
export interface HostHeader {
  /** A DNS name or IPv4 address as sent (case kept), or an IPv6 address in brackets. */
  host: string;
  /** The port's digits; undefined when none is given (`host` or `host:`). */
  port: number | undefined;
}

/** One DNS label or an IPv4 part: letters, digits, `-`, `_`; at most 63 characters. */
const LABEL = /^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$/;

/**
 * A Host header read strictly as an RFC 3986 authority without userinfo: a DNS name (labels of
 * letters, digits, `-` and `_`, at most 253 characters, one trailing dot allowed) or an IPv4
 * address, or an IPv6 address in brackets; then optionally `:` and a port of digits, at most
 * 65535. Undefined for anything else: empty, a user (`a@b`), a path, query or fragment character,
 * spaces, percent escapes, a bare IPv6 address. What a Host must be before it is copied anywhere
 * (a redirect's Location) or checked against a list (HostCheck).
 */
export function splitHostHeader(header: string | undefined): HostHeader | undefined {
  if (header === undefined) return undefined;
  const m = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::([0-9]{0,5}))?$/.exec(header);
  if (!m) return undefined;
  const host = m[1]!;
  if (host.startsWith('[')) {
    if (isIP(host.slice(1, -1)) !== 6) return undefined;
  } else {
    const name = host.endsWith('.') ? host.slice(0, -1) : host;
    if (name.length === 0 || name.length > 253 || !name.split('.').every((l) => LABEL.test(l))) return undefined;
  }
  const port = m[2] === undefined || m[2] === '' ? undefined : Number(m[2]);
  if (port !== undefined && port > 65535) return undefined;
  return { host, port };
}

/** 127.0.0.0/8, ::1 and IPv4-mapped loopback (src/base/util/address.ts isLoopback). */
export const isLoopbackAddress = isLoopback;

/** 0.0.0.0 and :: (and ::ffff:0.0.0.0): a listener on every interface (src/base/util/address.ts isWildcard). */
export const isWildcardAddress = isWildcard;

/**
 * Checks and normalises the entries of --admin_allowed_hosts: `*`, a host name, `*.suffix`, or an IP
 * literal; never a port or a URL. Throws an Error naming the bad entry.
 */
export function parseAllowedHosts(list: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of list) {
    const entry = raw.trim().toLowerCase();
    if (entry === '*') {
      out.push('*');
      continue;
    }
    const wild = entry.startsWith('*.');
    const canonical = canonicalHost(wild ? entry.slice(2) : entry);
    if (canonical === undefined || (wild && isIP(canonical) !== 0)) {
      throw new Error(`"${raw}" is not a host name, *.domain or IP address (no port, no scheme)`);
    }
    out.push(wild ? `*.${canonical}` : canonical);
  }
  return out;
}

export type HostVerdict = 'allowed' | 'missing' | 'refused';

/** Host values whose verdict is remembered: a client sends the same one on every request. */
const VERDICTS_MAX = 256;

export class HostCheck {
  private readonly all: boolean;
  private readonly names: ReadonlySet<string>;
  private readonly suffixes: readonly string[];
  /**
   * Verdicts by Host value, once the listener's address is known (it decides IP literals): the
   * check parses the value with the URL parser, which was 3% of the sidecar's CPU when it ran on
   * every request. Bounded: when full, it is emptied and filled again.
   */
  private readonly verdicts = new Map<string, 'allowed' | 'refused'>();

  /**
   * @param allowed --admin_allowed_hosts, already checked by parseAllowedHosts (flags.ts does)
   * @param listener the address the listener is bound to (undefined before it listens)
   */
  constructor(
    allowed: readonly string[],
    private readonly listener: () => string | undefined,
  ) {
    const list = parseAllowedHosts(allowed);
    this.all = list.includes('*');
    this.names = new Set(list.filter((e) => !e.startsWith('*')));
    this.suffixes = list.filter((e) => e.startsWith('*.')).map((e) => e.slice(1));
  }

  /** The verdict on a request's Host header (`host`, `host:port`, `[v6]:port`). */
  check(header: string | undefined, httpVersion: string): HostVerdict {
    if (this.all) return 'allowed';
    if (header === undefined || header === '') return httpVersion === '1.0' && header === undefined ? 'allowed' : 'missing';
    const known = this.verdicts.get(header);
    if (known !== undefined) return known;
    const verdict = this.decide(header);
    if (this.listener() !== undefined) {
      if (this.verdicts.size >= VERDICTS_MAX) this.verdicts.clear();
      this.verdicts.set(header, verdict);
    }
    return verdict;
  }

  private decide(header: string): 'allowed' | 'refused' {
    const parts = splitHostHeader(header);
    const host = parts ? canonicalHost(parts.host) : undefined;
    if (host === undefined) return 'refused';
    if (host === 'localhost' || isLoopbackAddress(host)) return 'allowed';
    if (isIP(host) !== 0) {
      const bound = this.listener();
      const own = bound === undefined ? undefined : canonicalHost(bound);
      if (own !== undefined && (own === host || isWildcardAddress(own))) return 'allowed';
    }
    if (this.names.has(host)) return 'allowed';
    for (const suffix of this.suffixes) if (host.endsWith(suffix) && isIP(host) === 0) return 'allowed';
    return 'refused';
  }
}
