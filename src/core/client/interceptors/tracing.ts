/**
 * Tracing (--tracing=otlp): a client span per call, around its tries, named `<service>/<endpoint>`;
 * the requests carry it as their parent. A failed call sets the span's status and
 * rpc.response.status_code from the error the caller gets.
 */
import { toMeshError } from '../../../base/errors.js';
import { failSpan, SpanKind, traceOf, type Span, type Tracer } from '../../../base/tracing/tracer.js';
import { callError, succeeded, type ClientInterceptor, type TryResult, type UnaryCall } from './call.js';

export function tracing(tracer: Tracer): ClientInterceptor {
  return (next) => (call, attempt) => {
    const span = tracer.startSpan(`${call.service}/${call.endpoint}`, SpanKind.CLIENT, call.parent, { 'rpc.system': 'mesh', 'rpc.service': call.service, 'rpc.method': call.endpoint });
    call.trace = traceOf(span);
    return traced(span, call, next(call, attempt));
  };
}

async function traced(span: Span, call: UnaryCall, result: Promise<TryResult>): Promise<TryResult> {
  try {
    const r = await result;
    if (!succeeded(r)) failed(span, callError(r, call));
    return r;
  } catch (err) {
    failed(span, toMeshError(err));
    throw err;
  } finally {
    span.end();
  }
}

function failed(span: Span, e: { code: number; detail: string }): void {
  span.setAttribute('rpc.response.status_code', e.code);
  failSpan(span, e.detail, String(e.code));
}
