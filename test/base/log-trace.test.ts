/**
 * Log lines carry the trace (docs/observability.md, "Context"): every line written while a request
 * is handled has `trace_id` and `span_id`, in the text and JSON formats; lines outside a request
 * have neither. Exact bytes with a frozen clock, then a real gateway process whose client logs a
 * failed attempt (debug) while serving a request that came with a traceparent.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { Logging } from '../../src/base/util/log.js';
import { ContextStore } from '../../src/base/util/call-context.js';
import { createRegistry } from '../../src/engines/registry/create.js';
import { freePort, http, startProcess, tempDir, PRINTED } from '../helpers.js';

const FROZEN = new Date(2024, 0, 2, 3, 4, 5, 6).getTime();
const TRACE = '0af7651916cd43dd8448eb211c80319c';
const SPAN = '00f067aa0ba902b7';

function capture(format: 'text' | 'json') {
  const lines: string[] = [];
  const store = new ContextStore();
  const logging = new Logging({ level: 'debug', format, color: false, now: () => FROZEN, destination: { write: (s: string) => void lines.push(s) }, trace: () => store.current?.trace });
  return { logging, lines, store };
}

describe('log lines carry the trace of the request being handled', () => {
  it('text: trace_id and span_id after the fields, inside a request only, across awaits', async () => {
    const { logging, lines, store } = capture('text');
    const log = logging.get('server');
    log.info({ a: 1 }, 'outside');
    await store.run({ trace: { traceId: TRACE, spanId: SPAN, flags: 1 } }, async () => {
      log.info({ a: 1 }, 'inside');
      await new Promise((r) => setTimeout(r, 1)); // a timer hop: the context must survive it (what is tested), not ordering
      log.warn('after an await');
    });
    log.info('outside again');
    assert.deepEqual(lines, [
      '03:04:05.006 INFO     server outside a=1\n',
      `03:04:05.006 INFO     server inside a=1 trace_id=${TRACE} span_id=${SPAN}\n`,
      `03:04:05.006 WARNING  server after an await trace_id=${TRACE} span_id=${SPAN}\n`,
      '03:04:05.006 INFO     server outside again\n',
    ]);
  });

  it('json: trace_id and span_id fields; a line that names its own trace keeps it', () => {
    const { logging, lines, store } = capture('json');
    const log = logging.get('client');
    store.run({ trace: { traceId: TRACE, spanId: SPAN, flags: 0 } }, () => {
      log.debug({ service: 's' }, 'attempt failed');
      log.info({ trace_id: 'mine', span_id: 'x' }, 'own');
    });
    const time = new Date(FROZEN).toISOString();
    assert.deepEqual(lines, [
      `{"level":"debug","time":"${time}","pid":${process.pid},"subsystem":"client","service":"s","trace_id":"${TRACE}","span_id":"${SPAN}","msg":"attempt failed"}\n`,
      `{"level":"info","time":"${time}","pid":${process.pid},"subsystem":"client","trace_id":"mine","span_id":"x","msg":"own"}\n`,
    ]);
  });

  it('the caller object is left as it was', () => {
    const { logging, store } = capture('json');
    const fields = { k: 'v' };
    store.run({ trace: { traceId: TRACE, spanId: SPAN, flags: 0 } }, () => logging.get('main').info(fields, 'x'));
    assert.deepEqual(fields, { k: 'v' });
  });
});

describe('log lines of a real gateway carry the trace id of the request', () => {
  const dir = tempDir();
  after(() => dir.cleanup());

  for (const format of ['json', 'text'] as const) {
    it(`--log_format=${format}: the client's debug line, and the access log line`, async () => {
      // A service whose only node refuses connections: the client logs the failed attempt at debug.
      const registry = createRegistry('local', dir.path);
      const port = await freePort();
      await registry.register({ name: 'go.mesh.srv.down', version: 'latest', metadata: {}, endpoints: [], nodes: [{ id: 'down-1', address: '127.0.0.1', port, metadata: { protocol: 'mesh' } }] });
      await registry.close();
      const proc = startProcess(['api', '--address=127.0.0.1:0', '--admin_address=off', `--registry_address=${dir.path}`, '--handler=rpc', '--namespace=go.mesh.srv', '--log_level=debug', `--log_format=${format}`, '--client_retries=0', '--access_log=stdout', '--access_log_format=%REQ(:PATH)% %RESPONSE_CODE% trace=%TRACE_ID%']);
      try {
        const gw = await proc.waitForPort(PRINTED.api, 15000);
        const startup = proc.output();
        const r = await http('POST', `http://127.0.0.1:${gw}/down/call`, { headers: { 'content-type': 'application/json', traceparent: `00-${TRACE}-${SPAN}-01` }, body: '{}' });
        assert.equal(r.status, 502, r.text);
        // The access log line (stdout) names the caller's trace.
        await proc.waitForOutput(new RegExp(`^/down/call 502 trace=${TRACE}$`, 'm'));
        const lines = proc.output().split('\n');
        const attempt = lines.find((l) => l.includes('attempt failed'));
        assert.ok(attempt, proc.output());
        for (const line of [attempt]) {
          if (format === 'json') {
            const entry = JSON.parse(line) as Record<string, string>;
            assert.equal(entry.trace_id, TRACE, line);
            assert.match(entry.span_id!, /^[0-9a-f]{16}$/);
            assert.notEqual(entry.span_id, SPAN, 'the gateway hop span, not the caller');
          } else {
            assert.match(line, new RegExp(`trace_id=${TRACE} span_id=[0-9a-f]{16}`), line);
          }
        }
        // Lines outside any request (start-up) carry no trace.
        assert.ok(startup.includes('mesh api listening'));
        assert.ok(!startup.includes('trace_id'), startup);
      } finally {
        await proc.stop();
      }
    });
  }
});
