/** Listening and graceful closing, shared by every HTTP server of the project. */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Listens and resolves with the bound address; a bind error (EADDRINUSE...) rejects. */
export function listenOn(server: Server, host: string, port: number): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** Counts requests in flight so that a close can wait for them. */
export class InFlight {
  private count = 0;
  private waiters: Array<() => void> = [];

  start(): void {
    this.count++;
  }

  end(): void {
    this.count--;
    if (this.count === 0) for (const w of this.waiters.splice(0)) w();
  }

  /** Resolves when nothing is in flight, or after graceMs. */
  idle(graceMs: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return Promise.race([new Promise<void>((r) => this.waiters.push(r)), new Promise<void>((r) => setTimeout(r, graceMs).unref())]);
  }
}

/**
 * Stops accepting, lets in-flight requests finish (up to graceMs), then closes every connection.
 * `closeOthers` ends connections the HTTP server no longer tracks (upgraded ones), which would
 * otherwise keep the close waiting.
 */
export async function closeGracefully(server: Server, inFlight: InFlight, graceMs: number, closeOthers?: () => void): Promise<void> {
  const closed = new Promise<void>((r) => server.close(() => r()));
  server.closeIdleConnections();
  await inFlight.idle(graceMs);
  server.closeAllConnections();
  closeOthers?.();
  await closed;
}
