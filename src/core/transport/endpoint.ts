/**
 * The endpoint a call names (docs/protocol.md, docs/grpc.md "Naming: service and method"): one
 * rule for every door that takes it from a user (`POST /rpc`, the WebSocket at `/rpc`, `mesh call`).
 * `Endpoint.Method`, where `Endpoint` is one name (`Greeter`) or, for a gRPC service, its full
 * dotted name (`helloworld.Greeter`): the method is after the last dot. Each part is a letter or
 * `_` then letters, digits and `_`.
 */
import { MAX_NAME_LENGTH, shown } from '../../engines/registry/validate.js';

const ENDPOINT_RE = /^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$/;

/** undefined when `name` is a valid endpoint to call, else why not (the caller names the field). */
export function endpointNameProblem(name: string): string | undefined {
  if (name.length > MAX_NAME_LENGTH) return `longer than ${MAX_NAME_LENGTH} characters`;
  if (!ENDPOINT_RE.test(name)) return `${shown(name)} is not Endpoint.Method`;
  return undefined;
}
