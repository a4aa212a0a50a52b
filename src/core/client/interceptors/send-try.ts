/**
 * The end of the client's chain: sends one try on its host, over the mesh wire (sendRpc on the
 * host's pool) or the node's own transport (`protocol=grpc`), within the try's budget, and
 * settles with its result; it never rejects once the request is on its way.
 */
import { MeshError } from '../../../base/errors.js';
import { sendRpc, TransportError, type RpcControl, type RpcRequest, type RpcResponse } from '../../transport/rpc.js';
import type { UpstreamTarget } from '../../upstream/types.js';
import { formatTraceparent } from '../../../base/util/trace-context.js';
import type { ClientSend, TryResult } from './call.js';

export interface SendTryOptions {
  /** Largest response body accepted from a backend. */
  maxResponseBytes?: number;
  /** The transport of a node that does not speak the mesh wire; undefined for one sendRpc serves. */
  senderFor?: (target: UpstreamTarget) => ((request: RpcRequest, control: RpcControl) => Promise<RpcResponse>) | undefined;
}

export function sendTry(options: SendTryOptions): ClientSend {
  const { maxResponseBytes, senderFor } = options;
  return (call, attempt) => {
    const target = attempt.lease!.target;
    const encoded = call.encodeFor?.(target);
    const request: RpcRequest = {
      service: call.service,
      endpoint: call.endpoint,
      id: call.id,
      contentType: encoded?.contentType ?? call.contentType,
      body: encoded?.body ?? call.body,
      metadata: call.metadata,
      traceparent: (call.traceparent ??= formatTraceparent(call.trace!)),
      tracestate: call.trace!.state,
      timeoutMs: attempt.timeoutMs,
      maxResponseBytes,
    };
    const host = target.key;
    const send = senderFor?.(target);
    return (send ? send(request, attempt.control) : sendRpc(target.dispatcher, request, attempt.control)).then(
      (response): TryResult => ({ kind: 'response', response, host }),
      (err: unknown): TryResult => {
        // The node's transport refused the call before sending it (src/core/transport/grpc/): final, not the host's fault.
        if (err instanceof MeshError) return { kind: 'refused', error: err, host };
        return { kind: 'error', error: err instanceof TransportError ? err : new TransportError({ kind: 'reset' }, String(err)), host };
      },
    );
  };
}
