/**
 * What a client sends the admin interface reaches its log cut to a bound (src/base/util/text.ts
 * clientText): a 12,000-character query on an operation and a 12,000-character X-Forwarded-For on
 * a refused one each add one short line, not the whole text.
 */
import { describe, it, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Logging } from '../../src/base/util/log.js';
import { get, startAdmin, type Running } from '../admin-fixtures.js';

describe('client text in the admin log', () => {
  const lines: string[] = [];
  let admin: Running;
  before(async () => {
    admin = await startAdmin({ logging: new Logging({ level: 'info', format: 'json', destination: { write: (l: string) => void lines.push(l) } as never }) });
  });
  after(() => admin.close());

  it('an operation with a 12,000-character query: one line of about 1 KB', async () => {
    const pad = 'q'.repeat(12_000);
    const r = await get(admin.base, `/healthcheck/ok?pad=${pad}`, { method: 'POST' });
    assert.equal(r.status, 200);
    const line = lines.find((l) => l.includes('admin operation'))!;
    assert.ok(line.length < 1500, `${line.length} characters`);
    const entry = JSON.parse(line) as { url: string };
    assert.match(entry.url, /^\/healthcheck\/ok\?pad=q+…\(\+\d+\)$/);
  });

  it('a refused forwarded request with a 12,000-character X-Forwarded-For: one short line', async () => {
    const r = await get(admin.base, '/healthcheck/fail', { method: 'POST', headers: { 'x-forwarded-for': `10.0.0.1, ${'f'.repeat(12_000)}` } });
    assert.equal(r.status, 403);
    const line = lines.find((l) => l.includes('admin refused a forwarded request'))!;
    assert.ok(line.length < 700, `${line.length} characters`);
    assert.match((JSON.parse(line) as { forwardedFor: string }).forwardedFor, /^10\.0\.0\.1, f+…\(\+\d+\)$/);
  });
});
