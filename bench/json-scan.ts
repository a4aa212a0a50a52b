/**
 * The JSON depth scan (jsonNestingExceeds, run before JSON.parse on every JSON body) against
 * JSON.parse itself, on a structured body and on one long string: best of 5 rounds each.
 * Expected: the scan well under the parse (about 0.4x structured, 0.02x strings).
 * Run: node --import tsx bench/json-scan.ts (prints one JSON object).
 */
import { jsonNestingExceeds } from '../src/base/codec/json.js';

const bodies = {
  structured: JSON.stringify({ items: Array.from({ length: 5000 }, (_, i) => ({ id: i, name: `item ${i}`, tags: ['a', 'b'], nested: { x: i * 1.5, s: 'q "u" \\ x' } })) }),
  strings: JSON.stringify({ blob: 'x'.repeat(2_000_000) }),
};
const out: Record<string, { parseMs: number; scanMs: number; ratio: number }> = {};
for (const [name, text] of Object.entries(bodies)) {
  let parse = Infinity;
  let scan = Infinity;
  for (let round = 0; round < 5; round++) {
    let t = performance.now();
    JSON.parse(text);
    parse = Math.min(parse, performance.now() - t);
    t = performance.now();
    jsonNestingExceeds(text);
    scan = Math.min(scan, performance.now() - t);
  }
  out[name] = { parseMs: Number(parse.toFixed(3)), scanMs: Number(scan.toFixed(3)), ratio: Number((scan / parse).toFixed(3)) };
}
console.log(JSON.stringify(out));
