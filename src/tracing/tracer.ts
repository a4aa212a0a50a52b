/**
 * Distributed tracing with the OpenTelemetry SDK (--tracing=otlp): spans exported in batches over
 * OTLP/HTTP (protobuf) to --tracing_address. Built by the runtime only when tracing is on; with
 * it off no tracer exists and the hot path pays one branch (`runtime.tracer?.`).
 *
 * Exporting never slows or fails a request: ending a span only queues it. The queue is bounded
 * (MAX_QUEUE spans waiting or in flight); a span that finds it full is dropped, and so is every
 * span of a batch the receiver refused or did not answer in time. Counted in
 * `tracing.spans_exported` and `tracing.spans_dropped`. Sampling: a new trace is recorded with
 * probability --tracing_sample_rate; a trace that came with a traceparent follows its sampled flag.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Attributes, type Context, type Span } from '@opentelemetry/api';
import { ExportResultCode, TraceState, type ExportResult } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { Tracer as OtelTracer } from '@opentelemetry/api';
import type { Counter, StatsStore } from '../stats/store.js';
import type { TraceContext } from '../util/trace-context.js';

export { SpanKind, SpanStatusCode, type Span };

/** Spans waiting for export or in flight, at most. */
export const MAX_QUEUE = 2048;
/** Spans per export request. */
const MAX_BATCH = 512;
/** A batch leaves at the latest this long after its first span ended. */
const BATCH_DELAY_MS = 1000;
/** One export request may take this long; then its spans are dropped. */
const EXPORT_TIMEOUT_MS = 5000;

export interface TracerOptions {
  /** The OTLP/HTTP endpoint (checked: parseTracingAddress). */
  address: string;
  /** Share of new traces recorded, 0 to 1. */
  sampleRate: number;
  /** The `service.name` of the process's resource, read when the first span starts (services are added before). */
  serviceName: () => string;
  stats: StatsStore;
  /** Told once per run of failed exports. */
  onExportError?: (err: Error) => void;
}

/** The trace context of a span, as this hop forwards it. */
export function traceOf(span: Span): TraceContext {
  const c = span.spanContext();
  return { traceId: c.traceId, spanId: c.spanId, flags: c.traceFlags, state: c.traceState?.serialize() || undefined };
}

/** Counts what the exporter did with each batch. */
class CountingExporter implements SpanExporter {
  constructor(
    private readonly inner: SpanExporter,
    private readonly settled: (count: number, ok: boolean, err?: Error) => void,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    let called = false;
    try {
      this.inner.export(spans, (result) => {
        if (called) return;
        called = true;
        this.settled(spans.length, result.code === ExportResultCode.SUCCESS, result.error);
        done(result);
      });
    } catch (err) {
      if (called) return;
      called = true;
      this.settled(spans.length, false, err as Error);
      done({ code: ExportResultCode.FAILED, error: err as Error });
    }
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

/** Keeps at most MAX_QUEUE sampled spans between end() and the exporter's answer; drops (and counts) the rest. */
class BoundedProcessor implements SpanProcessor {
  pending = 0;
  constructor(
    private readonly inner: SpanProcessor,
    private readonly dropped: Counter,
  ) {}

  onStart(span: Parameters<SpanProcessor['onStart']>[0], parent: Context): void {
    this.inner.onStart(span, parent);
  }

  onEnd(span: ReadableSpan): void {
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    if (this.pending >= MAX_QUEUE) {
      this.dropped.inc();
      return;
    }
    this.pending++;
    this.inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

export class Tracer {
  private tracer?: OtelTracer;
  private provider?: BasicTracerProvider;
  private processor?: BoundedProcessor;
  private readonly exported: Counter;
  private readonly dropped: Counter;
  private failing = false;
  private closed?: Promise<void>;

  constructor(private readonly options: TracerOptions) {
    this.exported = options.stats.counter('tracing.spans_exported');
    this.dropped = options.stats.counter('tracing.spans_dropped');
  }

  /** The SDK's tracer, built with the first span (the resource names the services added by then). */
  private sdk(): OtelTracer {
    if (this.tracer) return this.tracer;
    const exporter = new CountingExporter(new OTLPTraceExporter({ url: this.options.address, timeoutMillis: EXPORT_TIMEOUT_MS }), (count, ok, err) => {
      if (this.processor) this.processor.pending = Math.max(0, this.processor.pending - count);
      if (ok) {
        this.exported.inc(count);
        this.failing = false;
      } else {
        this.dropped.inc(count);
        if (!this.failing) this.options.onExportError?.(err ?? new Error('span export failed'));
        this.failing = true;
      }
    });
    const batch = new BatchSpanProcessor(exporter, { maxQueueSize: MAX_QUEUE, maxExportBatchSize: MAX_BATCH, scheduledDelayMillis: BATCH_DELAY_MS, exportTimeoutMillis: EXPORT_TIMEOUT_MS + 1000 });
    this.processor = new BoundedProcessor(batch, this.dropped);
    const rate = this.options.sampleRate;
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ [ATTR_SERVICE_NAME]: this.options.serviceName() }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(rate) }),
      spanProcessors: [this.processor],
    });
    this.tracer = this.provider.getTracer('mesh');
    return this.tracer;
  }

  /**
   * Starts a span: a child of `parent` (a remote caller's span, or this hop's own span) or the root
   * of a new trace. Its spanContext() is what this hop forwards (traceOf).
   */
  startSpan(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: Attributes): Span {
    let ctx: Context = ROOT_CONTEXT;
    if (parent) {
      ctx = trace.setSpanContext(ROOT_CONTEXT, {
        traceId: parent.traceId,
        spanId: parent.spanId,
        traceFlags: parent.flags & 0xff,
        isRemote: true,
        traceState: parent.state ? safeTraceState(parent.state) : undefined,
      });
    }
    return this.sdk().startSpan(name, { kind, attributes }, ctx);
  }

  /** Exports what is queued (within a few seconds at most), then stops. Safe to call many times. */
  shutdown(): Promise<void> {
    this.closed ??= (async () => {
      if (!this.provider) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.provider.shutdown().catch(() => undefined),
        new Promise<void>((r) => {
          timer = setTimeout(r, EXPORT_TIMEOUT_MS);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    })();
    return this.closed;
  }
}

function safeTraceState(state: string): TraceState | undefined {
  try {
    return new TraceState(state);
  } catch {
    return undefined;
  }
}

/** Marks a span failed (an error answer or a failed call). */
export function failSpan(span: Span, message: string, type?: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message });
  if (type) span.setAttribute('error.type', type);
}
