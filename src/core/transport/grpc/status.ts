/**
 * gRPC status codes as mesh errors: the HTTP status of each code (the table of docs/grpc.md,
 * after google.rpc.Code's own HTTP mapping) and the error JSON a failed gRPC call becomes.
 */
import { CLIENT_CLOSED_REQUEST, errorWithStatus, MeshError } from '../../../base/errors.js';
import { TransportError } from '../rpc.js';

/** gRPC status code → [name, HTTP status]. */
export const GRPC_STATUS: ReadonlyArray<readonly [string, number]> = [
  ['OK', 200],
  ['CANCELLED', 499],
  ['UNKNOWN', 500],
  ['INVALID_ARGUMENT', 400],
  ['DEADLINE_EXCEEDED', 504],
  ['NOT_FOUND', 404],
  ['ALREADY_EXISTS', 409],
  ['PERMISSION_DENIED', 403],
  ['RESOURCE_EXHAUSTED', 429],
  ['FAILED_PRECONDITION', 400],
  ['ABORTED', 409],
  ['OUT_OF_RANGE', 400],
  ['UNIMPLEMENTED', 501],
  ['INTERNAL', 500],
  ['UNAVAILABLE', 503],
  ['DATA_LOSS', 500],
  ['UNAUTHENTICATED', 401],
];

/** The HTTP status of a gRPC status code; 500 for a code outside 0..16. */
export function httpStatusOfGrpc(code: number): number {
  return GRPC_STATUS[code]?.[1] ?? 500;
}

/** The name of a gRPC status code (`NOT_FOUND`), or the number. */
export function grpcCodeName(code: number): string {
  return GRPC_STATUS[code]?.[0] ?? String(code);
}

/**
 * The mesh error of a failed gRPC call: id the gRPC service's full name, code the HTTP status of
 * the gRPC code, detail the status's details message (the code's name when it has none).
 */
export function meshErrorOfGrpc(service: string, code: number, details: string): MeshError {
  const http = httpStatusOfGrpc(code);
  return errorWithStatus(service, http, details || grpcCodeName(code), http === 499 ? CLIENT_CLOSED_REQUEST : undefined);
}

/** The HTTP status → gRPC status code a framework service answers with when it serves gRPC. */
export function grpcCodeOfHttp(status: number): number {
  switch (status) {
    case 400:
      return 3; // INVALID_ARGUMENT
    case 401:
      return 16;
    case 403:
      return 7;
    case 404:
      return 5;
    case 409:
      return 6; // ALREADY_EXISTS
    case 429:
      return 8;
    case 499:
      return 1;
    case 501:
      return 12;
    case 502:
    case 503:
      return 14;
    case 504:
    case 408:
      return 4;
    default:
      return status >= 500 ? 13 : 2; // INTERNAL, UNKNOWN
  }
}

/**
 * A failure of the connection rather than an answer of the node, told apart by the details
 * grpc-js writes for its own failures (a status the node sends keeps its own details): no
 * connection (refused, unreachable, name not resolved) is a connect failure; a connection or
 * stream that broke is a reset, and so is an answer over the receive limit; a deadline that
 * passed on our side is a timeout.
 */
export function transportFailure(err: { code: number; details?: string }, pastDeadline: boolean): TransportError | undefined {
  if (err.code === 4 /* DEADLINE_EXCEEDED */ && pastDeadline) return new TransportError({ kind: 'timeout' }, 'request timed out');
  const details = err.details ?? '';
  if (err.code === 14 /* UNAVAILABLE */ && /^(No connection established|Name resolution failed)/.test(details)) {
    return new TransportError({ kind: 'connect_failure' }, details);
  }
  // grpc-js's own limit on what it receives (the transport's maxResponseBytes): the node sent too
  // much, as a plain HTTP node sending too large a body. Not a quota of the node (429).
  if (err.code === 8 /* RESOURCE_EXHAUSTED */ && /^Received message larger than max/.test(details)) {
    return new TransportError({ kind: 'reset' }, `response larger than the receive limit: ${details}`);
  }
  if (/^(Connection dropped|Stream refused by server|Received RST_STREAM|Write error|Write failed)|\b(ECONNRESET|ETIMEDOUT|EPIPE)\b/.test(details)) {
    return new TransportError({ kind: 'reset' }, details);
  }
  return undefined;
}

