/**
 * The server credentials of a framework service serving gRPC with `--mtls=strict`
 * (./credentials.ts says why and how): mutual TLS from the workload certificate.
 */
import * as grpc from '@grpc/grpc-js';
import type { WorkloadTls } from '../../../base/mtls/workload-tls.js';

/**
 * Server credentials from the workload certificate: mutual TLS, a client certificate required
 * and verified against the mesh roots; follows the workload's renewals and root changes.
 */
export class WorkloadServerCredentials extends grpc.ServerCredentials {
  private readonly unsubscribe: () => void;

  constructor(private readonly workload: WorkloadTls) {
    super({ requestCert: true, rejectUnauthorized: true }, contextOptionsOf(workload));
    this.unsubscribe = workload.onChange(() => this.updateSecureContextOptions(contextOptionsOf(workload)));
  }

  /** Stops following the workload's changes (the server closed). */
  detach(): void {
    this.unsubscribe();
  }

  _equals(other: grpc.ServerCredentials): boolean {
    return other === this;
  }
}

function contextOptionsOf(workload: WorkloadTls): { cert: string; key: string; ca: string[] } {
  const pems = workload.contextOptions();
  return { cert: pems.cert, key: pems.key, ca: [...pems.ca] };
}
