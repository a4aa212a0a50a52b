/**
 * One rule for topic names (src/engines/broker/names.ts), 400 everywhere: a publish (POST /broker), a
 * WebSocket subscribe and the event handler refuse the same topics (control characters such as
 * NUL and DEL, whitespace, over 256 characters), and neither the answer nor the logs hold the raw
 * bytes. The brokers themselves throw the same problem.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryBroker } from '../../src/engines/broker/memory.js';
import { MAX_NAME_LENGTH, nameProblem } from '../../src/engines/broker/names.js';
import { tempDir, waitFor } from '../helpers.js';
import { http, refusedHandshake, startSidecar, subscribe, type SidecarProcess } from '../fixtures/sidecar-common.js';
import { startGatewayProcess, type GatewayProcess } from '../fixtures/gateway-helpers.js';

/** The bad topics: [as sent in a query, the detail of the 400]. */
const BAD: Array<[string, string]> = [
  ['a%00b', 'topic: "a\\u0000b" must not contain control characters'],
  ['a%7Fb', 'topic: "a\\x7fb" must not contain control characters'],
  ['a%1Bb', 'topic: "a\\u001bb" must not contain control characters'],
  ['a%C2%85b', 'topic: "a\\x85b" must not contain control characters'],
  ['a%E2%80%AEb', 'topic: "a\\u202eb" must not contain control characters'],
  ['a%20b', 'topic: "a b" must not contain whitespace'],
  ['x'.repeat(MAX_NAME_LENGTH + 1), `topic: longer than ${MAX_NAME_LENGTH} characters`],
];

const errorJson = (id: string, detail: string) => JSON.stringify({ id, code: 400, detail, status: 'Bad Request' });
/** No raw control character (other than the line breaks between log lines) in what a process printed. */
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/;

describe('topic names: one rule, 400 everywhere', () => {
  const home = tempDir('mesh-topic-rule-');
  let sc: SidecarProcess;
  let gw: GatewayProcess;

  before(async () => {
    [sc, gw] = await Promise.all([startSidecar(home.path), startGatewayProcess(home.path, ['--handler=event'])]);
  });
  after(async () => {
    await Promise.all([sc?.stop(), gw?.stop()]);
    home.cleanup();
  });

  it('POST /broker refuses them with 400', async () => {
    for (const [topic, detail] of BAD) {
      const r = await http('POST', `${sc.base}/broker?topic=${topic}`, { body: 'x' });
      assert.equal(r.status, 400, topic);
      assert.equal(r.text, errorJson('go.mesh.sidecar', detail), topic);
    }
    assert.doesNotMatch(sc.proc.output(), RAW_CONTROL);
  });

  it('a WebSocket subscribe refuses them with 400 (a queue name too)', async () => {
    for (const [topic, detail] of BAD) {
      assert.deepEqual(await refusedHandshake(`ws://127.0.0.1:${sc.port}/broker?topic=${topic}`), { status: 400, body: errorJson('go.mesh.sidecar', detail) }, topic);
    }
    assert.deepEqual(await refusedHandshake(`ws://127.0.0.1:${sc.port}/broker?topic=ok&queue=q%7F`), {
      status: 400,
      body: errorJson('go.mesh.sidecar', 'queue: "q\\x7f" must not contain control characters'),
    });
    assert.doesNotMatch(sc.proc.output(), RAW_CONTROL);
    // A good name still subscribes and gets what is published.
    const sub = await subscribe(sc.base, 'good.topic~1');
    try {
      assert.equal((await http('POST', `${sc.base}/broker?topic=good.topic~1`, { body: 'hi' })).status, 200);
      await waitFor(() => sub.bodies().includes('hi'));
    } finally {
      sub.ws.close();
    }
  });

  it('the event handler refuses a topic past the rule with 400 and publishes nothing', async () => {
    const segment = 'e'.repeat(MAX_NAME_LENGTH);
    const r = await http('POST', `${gw.url}/${segment}/created`, { body: '{}' });
    assert.equal(r.status, 400);
    assert.equal(r.text, errorJson('go.mesh.api', `topic: longer than ${MAX_NAME_LENGTH} characters`));
    const ok = await http('POST', `${gw.url}/orders/created`, { body: '{}' });
    assert.equal(ok.status, 200, ok.text);
    assert.doesNotMatch(gw.proc.output(), RAW_CONTROL);
  });

  it('the brokers throw the same problem', async () => {
    const broker = new MemoryBroker();
    try {
      for (const [topic, detail] of BAD) {
        const raw = decodeURIComponent(topic);
        assert.equal(nameProblem('topic', raw), detail);
        await assert.rejects(broker.publish(raw, { header: {}, body: new Uint8Array() }), { name: 'TypeError', message: detail });
        await assert.rejects(broker.subscribe(raw, () => undefined), { name: 'TypeError', message: detail });
      }
    } finally {
      await broker.close();
    }
  });
});
