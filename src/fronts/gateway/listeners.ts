/**
 * The listeners of a route file's Gateway documents, served by mesh api besides `--address`
 * (docs/routing.md, "Gateways and listeners"; which routes each serves: src/edge/routes/listeners.ts).
 *
 * One front server per port as the Gateway writes it, on the host of `--address`, at the port
 * `--gateway_ports` maps it to (default the same). An HTTPS port presents, per TLS handshake, the
 * certificate of the listener its SNI name is for (ListenerCertificates). The ports and protocols
 * are read at start: a reload that changes them is refused (the old routes stay); routes,
 * hostnames and certificate files change on a reload.
 *
 * Stats and admin: each port's server counts under `http.gateway_<port>.` and is listed by admin
 * /listeners as `gateway_<port>`; the certificates by admin /certs.
 */
import type { SecureContext, Server as TlsServer, TlsOptions } from 'node:tls';
import type { CertificateInfo } from '../../tls/certificate.js';
import type { TlsProvider } from '../../tls/provider.js';
import { loadPair, type LoadedPair } from '../../tls/files.js';
import { SchemaOptionError } from '../../base/util/option-error.js';
import { listenerPorts, type PortListeners } from '../../edge/routes/listeners.js';
import { RouteFileError, type GatewaySpec, type ListenerSpec, type RouteFile } from '../../edge/routes/file.js';

/** `--gateway_ports`: `PORT=BIND` entries (the port as written = the port to bind, 0 a free one). */
export function parseGatewayPorts(entries: readonly string[] | undefined): Map<number, number> {
  const out = new Map<number, number>();
  for (const entry of entries ?? []) {
    const m = /^([0-9]{1,5})=([0-9]{1,5})$/.exec(entry.trim());
    const written = m ? Number(m[1]) : NaN;
    const bind = m ? Number(m[2]) : NaN;
    if (!m || written < 1 || written > 65535 || bind > 65535) throw new SchemaOptionError('gateway_ports', "not PORT=BIND (a Gateway listener's port = the port to listen on, 0 for any free one)", entry);
    if (out.has(written)) throw new SchemaOptionError('gateway_ports', `port ${written} is mapped twice`, entry);
    out.set(written, bind);
  }
  return out;
}

/** The name of a Gateway port's server: its stats prefix (`http.gateway_<port>.`) and its admin /listeners entry. */
export function portServerName(port: number): string {
  return `gateway_${port}`;
}

function listenerWhere(gateway: GatewaySpec, listener: ListenerSpec): string {
  return `Gateway ${gateway.name} listener ${listener.name}`;
}

/** Every HTTPS listener's pair, read and checked; a bad file is a RouteFileError at the listener's line. */
export function loadListenerPairs(file: RouteFile): Map<ListenerSpec, LoadedPair> {
  const pairs = new Map<ListenerSpec, LoadedPair>();
  for (const gateway of file.gateways) {
    for (const listener of gateway.listeners) {
      if (!listener.tls) continue;
      try {
        pairs.set(listener, loadPair(listener.tls.certFile, listener.tls.keyFile));
      } catch (err) {
        throw new RouteFileError(file.file, listener.line, (err as Error).message, `${listenerWhere(gateway, listener)} tls`);
      }
    }
  }
  return pairs;
}

/**
 * The certificates of one HTTPS port: the SNI name chooses the listener (PortListeners.forName),
 * whose certificate is presented; a name no listener is for gets the port's first listener's.
 */
export class ListenerCertificates implements TlsProvider {
  private contexts: Array<{ listener: ListenerSpec; pair: LoadedPair }> = [];
  private port!: PortListeners;
  private readonly servers = new Set<TlsServer>();

  constructor(port: PortListeners, pairs: Map<ListenerSpec, LoadedPair>) {
    this.update(port, pairs);
  }

  /** The port's listeners and pairs after a reload. */
  update(port: PortListeners, pairs: Map<ListenerSpec, LoadedPair>): void {
    this.port = port;
    this.contexts = port.listeners.map(({ listener }) => ({ listener, pair: pairs.get(listener)! }));
    for (const server of this.servers) server.setSecureContext(this.fallback());
  }

  private contextFor(servername: string): SecureContext {
    const chosen = this.port.forName(servername.toLowerCase());
    return (this.contexts.find((c) => c.listener === chosen?.listener) ?? this.contexts[0]!).pair.context;
  }

  /** A client that sends no SNI name (an IP address) gets the certificate of the listener a name-less request is for, else the first. */
  private fallback(): { cert: Buffer; key: Buffer } {
    const chosen = this.port.forName(undefined);
    const { pair } = this.contexts.find((c) => c.listener === chosen?.listener) ?? this.contexts[0]!;
    return { cert: pair.cert, key: pair.key };
  }

  serverOptions(): TlsOptions {
    return { ...this.fallback(), SNICallback: (servername, cb) => cb(null, this.contextFor(servername)) };
  }

  attach(server: TlsServer): void {
    this.servers.add(server);
  }

  detach(server: TlsServer): void {
    this.servers.delete(server);
  }

  certificates(): CertificateInfo[] {
    return this.contexts.map((c) => c.pair.info);
  }

  async start(): Promise<void> {}

  async close(): Promise<void> {}
}

/**
 * What a reload of the route file may change once the ports listen: not the ports and their
 * protocols. Throws the RouteFileError that keeps the old routes; returns the new pairs.
 */
export function checkReload(file: RouteFile, started: string | undefined): Map<ListenerSpec, LoadedPair> {
  const now = listenerPorts(file);
  if (started !== undefined && now !== started) {
    const line = file.gateways[0]?.line;
    throw new RouteFileError(file.file, line, `the Gateway listeners' ports and protocols changed (${started || 'none'} to ${now || 'none'}): they are read at start, restart mesh api to change them`);
  }
  return loadListenerPairs(file);
}
