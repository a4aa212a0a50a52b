/**
 * readOtelEnv (src/base/tracing/otel-env.ts), the OTEL_* variables of traces read in one place:
 * the endpoint rules, the key=value lists, the samplers, and the error naming each malformed
 * variable. The processes that read them: tracing-otel-env.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { OtelEnvError, readOtelEnv } from '../../src/base/tracing/otel-env.js';

describe('readOtelEnv', () => {
  it('nothing set: nothing said, tracing left to the flags', () => {
    assert.deepEqual(readOtelEnv({}), { headers: {}, resource: {} });
  });

  it('endpoints: the traces one as is; the generic one gets /v1/traces for http, nothing for grpc', () => {
    assert.equal(readOtelEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).endpoint, 'http://c:4318/v1/traces');
    assert.equal(readOtelEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/base/' }).endpoint, 'http://c:4318/base/v1/traces');
    assert.equal(readOtelEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).endpoint, 'http://c:4317');
    const both = readOtelEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b/custom' });
    assert.equal(both.endpoint, 'https://b/custom');
    assert.equal(both.tracing, 'otlp', 'an endpoint turns tracing on');
    assert.equal(readOtelEnv({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }).protocol, 'grpc');
  });

  it('headers and resource attributes: percent-decoded; the traces headers win key by key; OTEL_SERVICE_NAME wins', () => {
    const env = readOtelEnv({
      OTEL_EXPORTER_OTLP_HEADERS: 'a=1, b=two%20words ,',
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'b=3',
      OTEL_RESOURCE_ATTRIBUTES: 'service.name=x,k%3Dy=v%2Cw',
      OTEL_SERVICE_NAME: 'svc',
    });
    assert.deepEqual(env.headers, { a: '1', b: '3' });
    assert.deepEqual(env.resource, { 'service.name': 'svc', 'k=y': 'v,w' });
  });

  it('samplers: ratio and whether the parent decides', () => {
    const s = (OTEL_TRACES_SAMPLER: string, OTEL_TRACES_SAMPLER_ARG?: string) => {
      const e = readOtelEnv(OTEL_TRACES_SAMPLER_ARG === undefined ? { OTEL_TRACES_SAMPLER } : { OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG });
      return [e.sampleRate, e.parentBased];
    };
    assert.deepEqual(s('always_on'), [1, false]);
    assert.deepEqual(s('always_off'), [0, false]);
    assert.deepEqual(s('traceidratio', '0.25'), [0.25, false]);
    assert.deepEqual(s('traceidratio'), [1, false]);
    assert.deepEqual(s('parentbased_always_off'), [0, true]);
    assert.deepEqual(s('parentbased_traceidratio', '0.5'), [0.5, true]);
  });

  it('exporter none and OTEL_SDK_DISABLED turn tracing off, whatever the endpoint', () => {
    assert.equal(readOtelEnv({ OTEL_TRACES_EXPORTER: 'otlp' }).tracing, 'otlp');
    assert.equal(readOtelEnv({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c' }).tracing, 'off');
    assert.equal(readOtelEnv({ OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c' }).tracing, 'off');
    assert.equal(readOtelEnv({ OTEL_SDK_DISABLED: 'false' }).tracing, undefined);
  });

  it('a malformed variable is an OtelEnvError naming it', () => {
    const refused = (env: NodeJS.ProcessEnv, variable: string) => assert.throws(() => readOtelEnv(env), (err: unknown) => err instanceof OtelEnvError && err.variable === variable && err.message.startsWith(`invalid value "`));
    refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'c:4318' }, 'OTEL_EXPORTER_OTLP_ENDPOINT');
    refused({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://' }, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
    refused({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, 'OTEL_EXPORTER_OTLP_PROTOCOL');
    refused({ OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }, 'OTEL_EXPORTER_OTLP_PROTOCOL');
    refused({ OTEL_EXPORTER_OTLP_HEADERS: '=x' }, 'OTEL_EXPORTER_OTLP_HEADERS');
    refused({ OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'bad name=x' }, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS');
    refused({ OTEL_RESOURCE_ATTRIBUTES: 'a=%E0%A4%A' }, 'OTEL_RESOURCE_ATTRIBUTES');
    refused({ OTEL_TRACES_SAMPLER: 'ALWAYS_ON' }, 'OTEL_TRACES_SAMPLER');
    refused({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' }, 'OTEL_TRACES_SAMPLER_ARG');
    refused({ OTEL_TRACES_SAMPLER_ARG: '-1' }, 'OTEL_TRACES_SAMPLER_ARG');
    refused({ OTEL_TRACES_EXPORTER: 'otlp,console' }, 'OTEL_TRACES_EXPORTER');
    refused({ OTEL_SDK_DISABLED: '1' }, 'OTEL_SDK_DISABLED');
  });
});
