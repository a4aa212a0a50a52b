/**
 * OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc): each batch of spans is one unary call of the
 * collector's opentelemetry.proto.collector.trace.v1.TraceService/Export, the request encoded by
 * the OpenTelemetry transformer's protobuf serializer (the encoding the OTLP/HTTP exporter sends).
 * A SpanExporter, wrapped by the Tracer like the HTTP one (counted, bounded).
 */
import { createRequire } from 'node:module';
import type { ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type * as GrpcJs from '@grpc/grpc-js';

const EXPORT_PATH = '/opentelemetry.proto.collector.trace.v1.TraceService/Export';

interface Serializer {
  serializeRequest(spans: ReadableSpan[]): Uint8Array | undefined;
}

export interface GrpcExporterOptions {
  /** http://host:port (plain) or https://host:port (TLS with the system roots). */
  url: string;
  /** Sent as gRPC metadata with every call. */
  headers: Record<string, string>;
  timeoutMillis: number;
}

export class OtlpGrpcTraceExporter implements SpanExporter {
  private readonly grpc: typeof GrpcJs;
  private readonly serializer: Serializer;
  private readonly client: GrpcJs.Client;
  private readonly metadata: GrpcJs.Metadata;

  constructor(private readonly options: GrpcExporterOptions) {
    const require = createRequire(import.meta.url);
    this.grpc = require('@grpc/grpc-js') as typeof GrpcJs;
    // The serializer of the OTLP/HTTP exporter's own dependency (resolved from it: the same version, the same encoding).
    const fromExporter = createRequire(require.resolve('@opentelemetry/exporter-trace-otlp-proto'));
    this.serializer = (fromExporter('@opentelemetry/otlp-transformer') as { ProtobufTraceSerializer: Serializer }).ProtobufTraceSerializer;
    const url = new URL(options.url);
    const credentials = url.protocol === 'https:' ? this.grpc.credentials.createSsl() : this.grpc.credentials.createInsecure();
    this.client = new this.grpc.Client(url.host, credentials);
    this.metadata = new this.grpc.Metadata();
    for (const [k, v] of Object.entries(options.headers)) this.metadata.set(k.toLowerCase(), v);
  }

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    let body: Uint8Array | undefined;
    try {
      body = this.serializer.serializeRequest(spans);
    } catch (err) {
      done({ code: 1, error: err as Error });
      return;
    }
    if (!body) {
      done({ code: 1, error: new Error('spans could not be encoded') });
      return;
    }
    this.client.makeUnaryRequest(
      EXPORT_PATH,
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.from(body),
      this.metadata,
      { deadline: Date.now() + this.options.timeoutMillis },
      (err) => done(err ? { code: 1, error: new Error(`OTLP/gRPC export to ${this.options.url}: ${err.message}`) } : { code: 0 }),
    );
  }

  shutdown(): Promise<void> {
    this.client.close();
    return Promise.resolve();
  }

  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
}
