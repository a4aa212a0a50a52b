/**
 * Trace context and request id in broker messages: a message published while a call is served
 * carries the call's trace (`traceparent`, `tracestate`: the publishing hop's span as parent) and
 * its Mesh-Id in the message headers; every backend (memory, http, nats) carries headers as they
 * are. A subscriber's handler runs in the context of the message it got, so the calls it makes
 * continue the trace. The headers follow the W3C rules of src/base/util/trace-context.ts.
 */
import { formatTraceparent, parseTraceparent, TRACEPARENT, TRACESTATE, type TraceContext } from '../../base/util/trace-context.js';

/** The value of a message header, its name matched in any case. */
export function messageHeader(header: Record<string, string> | undefined, lower: string): string | undefined {
  if (!header) return undefined;
  const exact = header[lower];
  if (exact !== undefined) return exact;
  for (const name in header) if (name.toLowerCase() === lower) return header[name];
  return undefined;
}

/**
 * The headers of a message to publish, with `trace` as its trace context and `id` (the request
 * id header of the call being served: name in lower case, value) when the header has none.
 * `replace`: a traceparent or tracestate already in the header (any case: a front end's inbound
 * request headers) is the caller's, replaced by this hop's; otherwise (headers the publisher set
 * itself) one already there is kept. A Mesh-Id already there is always kept.
 */
export function stampMessageHeader(header: Record<string, string>, trace: TraceContext, id: readonly [name: string, value: string] | undefined, replace: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  let hasTrace = false;
  let hasId = false;
  for (const name in header) {
    const lower = name.toLowerCase();
    if (lower === TRACEPARENT || lower === TRACESTATE) {
      if (replace) continue;
      hasTrace = true;
    } else if (lower === id?.[0]) hasId = true;
    out[name] = header[name]!;
  }
  if (!hasTrace) {
    out[TRACEPARENT] = formatTraceparent(trace);
    if (trace.state !== undefined) out[TRACESTATE] = trace.state;
  }
  if (!hasId && id) out[id[0]] = id[1];
  return out;
}

/** The trace a message came with (undefined: none, or malformed). */
export function messageTrace(header: Record<string, string> | undefined): TraceContext | undefined {
  const parent = messageHeader(header, TRACEPARENT);
  return parent === undefined ? undefined : parseTraceparent(parent, messageHeader(header, TRACESTATE));
}
