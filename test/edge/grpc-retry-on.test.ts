/**
 * --grpc_retry_on (docs/grpc.md, "Retries of native gRPC calls"): the names a flag and the library take, the codes
 * they are, the refusals (the flag's, the library's); and RequestHold, the copy of a request a
 * retry sends again: whole only once the client ended its side, dropped past its bound.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PassThrough, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { checkGrpcRetryOn, grpcRetryCodes } from '../../src/core/transport/grpc/retry-on.js';
import { HOLD_BYTES, RequestHold } from '../../src/edge/handlers/grpc-retry.js';
import { parseArgs } from '../../src/cli/flags.js';
import { resolveOptions } from '../../src/process/options.js';

/** Writes `chunks` through a RequestHold of `max` bytes (ending the request when `end`); resolves with the hold and what passed. */
async function through(chunks: Buffer[], max?: number, end = true): Promise<{ hold: RequestHold; passed: Buffer }> {
  const hold = new RequestHold(max);
  const got: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _e, cb) {
      got.push(chunk);
      cb();
    },
  });
  const source = new PassThrough();
  const done = pipeline(source, hold, sink);
  for (const c of chunks) source.write(c);
  if (end) {
    source.end();
    await done;
  } else await new Promise((r) => setImmediate(r));
  return { hold, passed: Buffer.concat(got) };
}

describe('--grpc_retry_on', () => {
  it('takes Envoy\'s retry-on names for gRPC, in any case, once each, and none', () => {
    assert.deepEqual(checkGrpcRetryOn(['unavailable']), ['unavailable']);
    assert.deepEqual(checkGrpcRetryOn(['Cancelled', 'deadline-exceeded', 'internal', 'resource-exhausted', 'unavailable', 'internal']), ['cancelled', 'deadline-exceeded', 'internal', 'resource-exhausted', 'unavailable']);
    assert.deepEqual(grpcRetryCodes(['cancelled', 'deadline-exceeded', 'internal', 'resource-exhausted', 'unavailable']), [1, 4, 13, 8, 14]);
    assert.deepEqual(checkGrpcRetryOn(['none']), ['none']);
    assert.deepEqual(grpcRetryCodes(checkGrpcRetryOn(['none'])), []);
    assert.deepEqual(grpcRetryCodes([]), []);
  });

  it('refuses any other name, and none with another name', () => {
    const use = 'use cancelled, deadline-exceeded, resource-exhausted, internal, unavailable (comma list), or none';
    assert.throws(() => checkGrpcRetryOn(['invalid-argument']), { message: `"invalid-argument" is not a retryable gRPC status: ${use}` });
    assert.throws(() => checkGrpcRetryOn(['14']), { message: `"14" is not a retryable gRPC status: ${use}` });
    assert.throws(() => checkGrpcRetryOn(['constructor']), /"constructor" is not a retryable gRPC status/);
    assert.throws(() => checkGrpcRetryOn(['none', 'unavailable']), /"none" is not a retryable gRPC status/);
  });

  it('the flag: default unavailable; a bad value is refused naming the flag; the library option the same', () => {
    assert.deepEqual(parseArgs(['api'], {}).config.grpc_retry_on, ['unavailable']);
    assert.deepEqual(parseArgs(['api', '--grpc_retry_on=internal,UNAVAILABLE'], {}).config.grpc_retry_on, ['internal', 'unavailable']);
    assert.deepEqual(parseArgs(['proxy'], { MESH_GRPC_RETRY_ON: 'none' }).config.grpc_retry_on, ['none']);
    assert.throws(() => parseArgs(['api', '--grpc_retry_on=unavailable,aborted'], {}), {
      message: 'invalid value "unavailable,aborted" for flag --grpc_retry_on: "aborted" is not a retryable gRPC status: use cancelled, deadline-exceeded, resource-exhausted, internal, unavailable (comma list), or none',
    });
    assert.throws(() => parseArgs(['call', '--grpc_retry_on=unavailable'], {}), /--grpc_retry_on/);
    assert.deepEqual(resolveOptions({}).grpcRetryOn, ['unavailable']);
    assert.throws(() => resolveOptions({ grpcRetryOn: ['nope'] }), { message: /^invalid option grpcRetryOn: "nope" is not a retryable gRPC status/ });
  });
});

describe('RequestHold', () => {
  it('passes the request on unchanged and holds it whole once it ended', async () => {
    const chunks = [Buffer.from('\x00\x00\x00\x00\x03abc'), Buffer.from('\x00\x00\x00\x00\x01z')];
    const { hold, passed } = await through(chunks);
    assert.deepEqual(passed, Buffer.concat(chunks));
    assert.deepEqual(hold.whole(), Buffer.concat(chunks));
  });

  it('holds nothing while the client has not ended its side', async () => {
    const { hold, passed } = await through([Buffer.from('abc')], undefined, false);
    assert.deepEqual(passed, Buffer.from('abc'));
    assert.equal(hold.whole(), undefined);
  });

  it('forget(): nothing held any more, the request still passed on whole', async () => {
    const hold = new RequestHold();
    const got: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, cb) {
        got.push(chunk);
        cb();
      },
    });
    const source = new PassThrough();
    const done = pipeline(source, hold, sink);
    source.write(Buffer.from('ab'));
    hold.forget();
    source.end(Buffer.from('cd'));
    await done;
    assert.equal(Buffer.concat(got).toString(), 'abcd');
    assert.equal(hold.whole(), undefined);
  });

  it('drops the copy past its bound (64 KiB by default), the request still passed on whole', async () => {
    assert.equal(HOLD_BYTES, 65536);
    const exact = await through([Buffer.alloc(40_000, 1), Buffer.alloc(HOLD_BYTES - 40_000, 2)]);
    assert.equal(exact.hold.whole()?.length, HOLD_BYTES);
    const over = await through([Buffer.alloc(40_000, 1), Buffer.alloc(HOLD_BYTES - 40_000 + 1, 2), Buffer.alloc(3, 3)]);
    assert.equal(over.passed.length, HOLD_BYTES + 4);
    assert.equal(over.hold.whole(), undefined);
    const small = await through([Buffer.from('abcd'), Buffer.from('e')], 4);
    assert.equal(small.hold.whole(), undefined);
  });
});
