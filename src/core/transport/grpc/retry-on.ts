/**
 * --grpc_retry_on (docs/grpc.md, "Retries of native gRPC calls"): the gRPC statuses after which a front tries a native
 * gRPC call again on another node, named as Envoy's `retry-on` names them for gRPC. The option is
 * checked here (the process's options and the flags share the check); the edge retries
 * (src/edge/handlers/grpc-pass.ts).
 */

/** The statuses --grpc_retry_on may name, by Envoy's `retry-on` names, and their codes. */
export const GRPC_RETRY_ON: Readonly<Record<string, number>> = {
  cancelled: 1,
  'deadline-exceeded': 4,
  'resource-exhausted': 8,
  internal: 13,
  unavailable: 14,
};

/**
 * --grpc_retry_on: the names as given (each known, none twice), or why not. `none` alone: no
 * status is retried.
 */
export function checkGrpcRetryOn(names: readonly string[]): string[] {
  if (names.length === 1 && names[0] === 'none') return ['none'];
  const out: string[] = [];
  for (const raw of names) {
    const name = raw.toLowerCase();
    if (!Object.hasOwn(GRPC_RETRY_ON, name)) throw new Error(`"${raw}" is not a retryable gRPC status: use ${Object.keys(GRPC_RETRY_ON).join(', ')} (comma list), or none`);
    if (!out.includes(name)) out.push(name);
  }
  return out;
}

/** The codes of checked --grpc_retry_on names. */
export function grpcRetryCodes(names: readonly string[]): number[] {
  return names.filter((n) => Object.hasOwn(GRPC_RETRY_ON, n)).map((n) => GRPC_RETRY_ON[n]!);
}

