/** Property tests: durations and sizes (src/base/util/duration.ts). */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { formatDuration, MAX_DURATION_MS, parseDuration, parseSize } from '../../src/base/util/duration.js';

/** A plain Error (never a TypeError or a RangeError) that quotes the input. */
function clearError(fn: () => unknown, what: RegExp): boolean {
  try {
    fn();
    return true;
  } catch (err) {
    assert.ok(err instanceof Error && err.constructor === Error, `${(err as Error).constructor.name}: ${(err as Error).message}`);
    assert.match(err.message, what);
    return false;
  }
}

describe('fuzz: durations and sizes', () => {
  it('parseDuration(formatDuration(ms)) gives ms back (to the printed precision)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: 0, max: 10 * 24 * 3600 * 1000 }), fc.double({ min: 0, max: 1e9, noNaN: true })), (ms) => {
        const text = formatDuration(ms);
        const back = parseDuration(text);
        // formatDuration prints µs below 1 ms, at most 3 decimals of ms below 1 s and of s above.
        const tolerance = ms < 1 ? 0.0005 : ms < 1000 ? 0.0005 : 0.5;
        assert.ok(Math.abs(back - ms) <= tolerance + 1e-9 * ms, `${ms} → ${text} → ${back}`);
      }),
      { numRuns: 5000 },
    );
  });

  it('Go-syntax durations parse to the sum of their parts', () => {
    const unit = fc.constantFrom(['ns', 1e-6], ['us', 1e-3], ['µs', 1e-3], ['ms', 1], ['s', 1000], ['m', 60_000], ['h', 3_600_000]);
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 100_000 }), unit), { minLength: 1, maxLength: 4 }), (parts) => {
        const text = parts.map(([n, [u]]) => `${n}${u}`).join('');
        const expected = parts.reduce((sum, [n, [, f]]) => sum + n * (f as number), 0);
        if (expected > MAX_DURATION_MS) assert.throws(() => parseDuration(text), /longer than/, text);
        else assert.ok(Math.abs(parseDuration(text) - expected) <= 1e-9 * Math.max(1, expected), text);
      }),
      { numRuns: 3000 },
    );
  });

  it('garbage is a clear Error naming the input, never a crash or a NaN', () => {
    const garbage = fc.oneof(fc.string({ maxLength: 16 }), fc.string({ unit: 'binary', maxLength: 8 }), fc.constantFrom('-5s', '1d', 'NaN', 'Infinitys', '1e3s', '.s', '5 s', '1.2.3s', '9'.repeat(15) + 'h', ''));
    fc.assert(
      fc.property(garbage, (text) => {
        if (clearError(() => parseDuration(text), /invalid duration/)) {
          const v = parseDuration(text);
          assert.ok(Number.isFinite(v) && v >= 0, `${JSON.stringify(text)} → ${v}`);
        }
        if (clearError(() => parseSize(text), /invalid size/)) {
          const v = parseSize(text);
          assert.ok(Number.isSafeInteger(v) && v >= 0, `${JSON.stringify(text)} → ${v}`);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('sizes: n and n with a unit', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 4096 }), fc.constantFrom(['', 1], ['B', 1], ['KiB', 1024], ['MiB', 1024 ** 2], ['GiB', 1024 ** 3]), (n, [u, f]) => {
        assert.equal(parseSize(`${n}${u}`), n * (f as number));
      }),
      { numRuns: 2000 },
    );
  });
});

describe('durations and sizes: values too large', () => {
  it('a numeral too large for a double is refused, not Infinity', () => {
    const huge = '9'.repeat(400);
    assert.throws(() => parseDuration(huge + 's'), /invalid duration/);
    assert.throws(() => parseSize(huge), /invalid size/);
  });

  it('a duration longer than a timer can wait is refused; the longest is accepted', () => {
    assert.equal(parseDuration('596h31m23.647s'), 2 ** 31 - 1);
    assert.throws(() => parseDuration('596h31m23.648s'), /longer than/);
    assert.throws(() => parseDuration('1000h'), /longer than/);
  });
});
