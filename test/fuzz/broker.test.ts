/**
 * Property tests: broker frames. The sidecar's publish input (src/fronts/sidecar/broker-api.ts: header
 * names, the publish header with its Timestamp, the frame's JSON) and the http broker's header
 * encoding (src/engines/broker/http/wire.ts: Mesh-Broker-Header values, address splitting). Read-only use of
 * their exported functions.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import fc from 'fast-check';
import { MeshError } from '../../src/base/errors.js';
import { canonicalHeaderMap, publishHeader } from '../../src/fronts/sidecar/broker-api.js';
import { canonicalHeaderKey } from '../../src/core/transport/headers.js';
import { decodeHeader, encodeHeader } from '../../src/engines/broker/http/wire.js';
import { parseAddress } from '../../src/base/util/address.js';

const headerName = fc.oneof(fc.stringMatching(/^[a-zA-Z0-9-]{1,12}$/), fc.string({ maxLength: 8 }), fc.constantFrom('timestamp', 'Timestamp', 'connection', 'authorization', 'cookie', 'x-a', 'X-A', '__proto__', 'content-type'));
const headerValue = fc.oneof(fc.string({ maxLength: 16 }), fc.string({ unit: 'binary', maxLength: 8 }), fc.array(fc.string({ maxLength: 5 }), { maxLength: 3 }));

describe('fuzz: broker frames', () => {
  it('canonicalHeaderKey is idempotent; canonicalHeaderMap keeps every value', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ maxLength: 6 }), { maxKeys: 6 }), (header) => {
        for (const k of Object.keys(header)) assert.equal(canonicalHeaderKey(canonicalHeaderKey(k)), canonicalHeaderKey(k));
        const out = canonicalHeaderMap(header);
        for (const v of Object.values(out)) assert.equal(typeof v, 'string');
        assert.ok(Object.keys(out).length <= Object.keys(header).length);
      }),
      { numRuns: 3000 },
    );
  });

  it('publishHeader: a header of strings with a Timestamp, or a 400 MeshError', () => {
    fc.assert(
      fc.property(fc.dictionary(headerName, headerValue, { maxKeys: 6 }), fc.option(fc.oneof(fc.string({ maxLength: 20 }), fc.integer().map(String))), (headers, ts) => {
        const lower: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(headers)) lower[k.toLowerCase()] = v;
        if (ts !== null) lower['timestamp'] = ts;
        const req = { headers: lower } as unknown as IncomingMessage;
        let header: Record<string, string>;
        try {
          header = publishHeader('go.mesh.sidecar', req, 1_700_000_000);
        } catch (err) {
          assert.ok(err instanceof MeshError && err.code === 400, String(err));
          assert.match(err.message, /^Timestamp: /);
          return;
        }
        assert.match(header['Timestamp']!, /^\d+$/);
        for (const [k, v] of Object.entries(header)) {
          assert.equal(typeof v, 'string');
          assert.ok(!['Authorization', 'Cookie', 'Connection'].includes(k), k);
        }
        // The frame a subscriber gets: JSON that parses back to the same header.
        const frame = JSON.stringify({ Header: canonicalHeaderMap(header), Body: Buffer.from('x').toString('base64') });
        assert.deepEqual(JSON.parse(frame).Header, canonicalHeaderMap(header));
      }),
      { numRuns: 3000 },
    );
  });

  it('http broker header: decodeHeader(encodeHeader(h)) is h, and the encoding is a valid header value', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string({ unit: 'binary', maxLength: 8 }), fc.string({ unit: 'binary', maxLength: 12 }), { maxKeys: 6 }), (header) => {
        const encoded = encodeHeader(header);
        assert.match(encoded, /^[\x20-\x7e]*$/, 'printable ASCII only');
        assert.deepEqual(decodeHeader(encoded), JSON.parse(JSON.stringify(header)));
      }),
      { numRuns: 3000 },
    );
  });

  it('http broker header: garbage is an Error naming the header, never a TypeError', () => {
    const garbage = fc.oneof(fc.string({ maxLength: 20 }), fc.json({ maxDepth: 3 }), fc.constantFrom('null', '[]', '{"a":1}', '{"__proto__":"x"}', '{"a":{"b":"c"}}', '"x"'));
    fc.assert(
      fc.property(garbage, (value) => {
        try {
          const out = decodeHeader(value);
          for (const v of Object.values(out)) assert.equal(typeof v, 'string');
        } catch (err) {
          assert.ok(err instanceof Error && !(err instanceof TypeError), String(err));
          assert.match(err.message, /^mesh-broker-header: /);
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('parseAddress (broker address forms): a host and a port in range, or an Error', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('[::1]:80', '[::1]', ':8080', 'a:b', 'h:99999', '::', '1.2.3.4:0')), (text) => {
        try {
          const { host, port } = parseAddress(text, { defaultPort: 8080 });
          assert.equal(typeof host, 'string');
          assert.ok(Number.isInteger(port) && port >= 0 && port <= 65535);
        } catch (err) {
          assert.ok(err instanceof Error && !(err instanceof TypeError), String(err));
          assert.match(err.message, /invalid address/);
        }
      }),
      { numRuns: 3000 },
    );
  });
});
