/**
 * Distributed tracing with the OpenTelemetry SDK (--tracing=otlp): spans exported in batches over
 * OTLP/HTTP (protobuf) or OTLP/gRPC to --tracing_address (or the OTEL_* variables: otel-env.ts). Built by the runtime only when tracing is on; with
 * it off no tracer exists and the hot path pays one branch (`runtime.tracer?.`).
 *
 * Exporting never slows or fails a request: ending a span only queues it. The queue is bounded
 * (MAX_QUEUE spans waiting or in flight); a span that finds it full is dropped, and so is every
 * span of a batch the receiver refused or did not answer in time. Counted in
 * `tracing.spans_exported` and `tracing.spans_dropped`. Sampling: a new trace is recorded with
 * probability --tracing_sample_rate; a trace that came with a traceparent follows its sampled flag.
 */
import { createRequire } from 'node:module';
import type { Attributes, Context, Span, Tracer as OtelTracer } from '@opentelemetry/api';
import type { ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import type { Counter, StatsStore } from '../stats/store.js';
import type { TraceContext } from '../util/trace-context.js';
import type { OtlpProtocol } from './otel-env.js';
import { OtlpGrpcTraceExporter } from './otlp-grpc-exporter.js';

export type { Span };

/**
 * The OpenTelemetry packages, loaded when the first Tracer is built (--tracing=otlp): a process
 * with tracing off (and every short CLI command) never loads them. Loaded with require, so the
 * API, the SDK and the exporter share one instance of each package.
 */
interface Otel {
  api: typeof import('@opentelemetry/api');
  core: typeof import('@opentelemetry/core');
  resources: typeof import('@opentelemetry/resources');
  sdk: typeof import('@opentelemetry/sdk-trace-base');
  exporter: typeof import('@opentelemetry/exporter-trace-otlp-proto');
}

function loadOtel(): Otel {
  const require = createRequire(import.meta.url);
  return {
    api: require('@opentelemetry/api') as Otel['api'],
    core: require('@opentelemetry/core') as Otel['core'],
    resources: require('@opentelemetry/resources') as Otel['resources'],
    sdk: require('@opentelemetry/sdk-trace-base') as Otel['sdk'],
    exporter: require('@opentelemetry/exporter-trace-otlp-proto') as Otel['exporter'],
  };
}

/** OpenTelemetry's span kinds (the values of the API's SpanKind), usable without loading it. */
export const SpanKind = { INTERNAL: 0, SERVER: 1, CLIENT: 2, PRODUCER: 3, CONSUMER: 4 } as const;
export type SpanKind = (typeof SpanKind)[keyof typeof SpanKind];
/** The API's SpanStatusCode.ERROR. */
const STATUS_ERROR = 2;
/** TraceFlags.SAMPLED. */
const SAMPLED = 1;
/** ExportResultCode.SUCCESS. */
const EXPORT_SUCCESS = 0;

/** Spans waiting for export or in flight, at most. */
export const MAX_QUEUE = 2048;
/** Spans per export request. */
const MAX_BATCH = 512;
/** A batch leaves at the latest this long after its first span ended. */
const BATCH_DELAY_MS = 1000;
/** One export request may take this long; then its spans are dropped. */
const EXPORT_TIMEOUT_MS = 5000;

export interface TracerOptions {
  /** The OTLP endpoint (checked: parseTracingAddress). */
  address: string;
  /** OTLP over HTTP (protobuf) or gRPC. Default http/protobuf. */
  protocol?: OtlpProtocol;
  /** Sent with every export request (HTTP headers, gRPC metadata). */
  headers?: Record<string, string>;
  /** Attributes of the process's resource (OTEL_RESOURCE_ATTRIBUTES); a service.name here wins over serviceName. */
  resource?: Record<string, string>;
  /** Share of new traces recorded, 0 to 1. */
  sampleRate: number;
  /** A trace that came with a traceparent follows its sampled flag (default true); false: sampleRate decides every trace. */
  parentBased?: boolean;
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
        this.settled(spans.length, result.code === EXPORT_SUCCESS, result.error);
        done(result);
      });
    } catch (err) {
      if (called) return;
      called = true;
      this.settled(spans.length, false, err as Error);
      done({ code: 1, error: err as Error }); // ExportResultCode.FAILED
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
    if ((span.spanContext().traceFlags & SAMPLED) === 0) return;
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
  private readonly otel = loadOtel();
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
    const { sdk, resources, exporter: otlp } = this.otel;
    const { address: url, headers = {} } = this.options;
    const inner: SpanExporter =
      this.options.protocol === 'grpc' ? new OtlpGrpcTraceExporter({ url, headers, timeoutMillis: EXPORT_TIMEOUT_MS }) : new otlp.OTLPTraceExporter({ url, headers, timeoutMillis: EXPORT_TIMEOUT_MS });
    const exporter = new CountingExporter(inner, (count, ok, err) => {
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
    const batch = new sdk.BatchSpanProcessor(exporter, { maxQueueSize: MAX_QUEUE, maxExportBatchSize: MAX_BATCH, scheduledDelayMillis: BATCH_DELAY_MS, exportTimeoutMillis: EXPORT_TIMEOUT_MS + 1000 });
    this.processor = new BoundedProcessor(batch, this.dropped);
    const rate = this.options.sampleRate;
    const root = rate >= 1 ? new sdk.AlwaysOnSampler() : rate <= 0 ? new sdk.AlwaysOffSampler() : new sdk.TraceIdRatioBasedSampler(rate);
    this.provider = new sdk.BasicTracerProvider({
      resource: resources.resourceFromAttributes({ 'service.name': this.options.serviceName(), ...this.options.resource }),
      sampler: this.options.parentBased === false ? root : new sdk.ParentBasedSampler({ root }),
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
    const { api } = this.otel;
    let ctx: Context = api.ROOT_CONTEXT;
    if (parent) {
      ctx = api.trace.setSpanContext(api.ROOT_CONTEXT, {
        traceId: parent.traceId,
        spanId: parent.spanId,
        traceFlags: parent.flags & 0xff,
        isRemote: true,
        traceState: parent.state ? this.traceState(parent.state) : undefined,
      });
    }
    return this.sdk().startSpan(name, { kind: kind as number, attributes }, ctx);
  }

  private traceState(state: string) {
    try {
      return new this.otel.core.TraceState(state);
    } catch {
      return undefined;
    }
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

/** Marks a span failed (an error answer or a failed call). */
export function failSpan(span: Span, message: string, type?: string): void {
  span.setStatus({ code: STATUS_ERROR, message });
  if (type) span.setAttribute('error.type', type);
}
